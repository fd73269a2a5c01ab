"""What ``perfctl bisect`` decides, and the record it keeps.

A bisection first measures BAD against GOOD: only a ``regressed`` verdict (the
rule of :mod:`perfctl.stats.decision`) starts a search, and its change ``T`` with its
95% CI is "the slowdown" (:class:`Slowdown`; the ends are measured again, pooled,
until that CI is narrow against ``T``, so every step is held against a known gap).
Each step then measures a commit against GOOD and judges its change ``x``:

* its 95% CI wholly below half the slowdown (``sqrt(1 + T) - 1`` on a log scale) is
  **like good**, wholly above it **like bad**, as a CI clear of the mark always was;
* otherwise ``x`` is weighed between the two ends (:func:`log_odds`): how much likelier
  it is if the commit is like BAD (``x ~ T``: the step's error, the slowdown's own and
  the noise band) than if it is like GOOD (``x ~ 0``: the step's error and the band).
  At ``ODDS``:1 either way, on that end's side of halfway and not clearly (``FIT_Z``)
  off that end towards the other, it is **like bad** or **like good**
  (``SECOND_LOOK_ODDS`` on a second look);
* anything else: **unknown** (more rounds are added; a commit that stays unknown is
  stepped over like ``git bisect skip``, and the next-nearest commit is tried; one
  left unknown inside the final range gets a second look with more attempts);
* the regime failing, or the commit not building: **skipped**.

The odds decide where the CI rule alone waits: a 95% CI clear of halfway needs more
rounds at the same noise, and a loose estimate of ``T`` moved the mark so far
that it held the very culprit unknown (benchmarks/README.md, bisect run 3). Under that
normal model a step is judged wrongly about once in ``ODDS``, a rough figure: the
errors are read off rank intervals, and drift between comparisons is not in them; a
wrong step is what the verification catches. The band keeps a commit with a small
change of its own (an unrelated +1%) like good however many rounds it gets. Halfway
and the fit checks still split the answers, because a commit is only "the culprit" if
it carries most of the slowdown: one at halfway (a slowdown split between commits)
stays unknown, however precisely it is measured. The same
test verifies the answer: the culprit's parent against the culprit must be
``regressed`` *and* like bad (``verified``). ``benchmarks/bisect_rules.py`` plays this
rule and the CI-only rule it replaced on simulated noise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from perfctl.model import (
    FAILED,
    REGRESSED,
    SCHEMA_VERSION,
    SKIPPED,
    RefInfo,
    RegimeComparison,
    Verdict,
    check_schema,
    ref_from_dict,
)


class Likeness(StrEnum):
    """Which end a measured commit resembles."""

    GOOD = "like good"
    BAD = "like bad"
    UNKNOWN = "unknown"
    SKIPPED = "skipped"


class Outcome(StrEnum):
    """How a bisection ended."""

    CULPRIT = "culprit"  # one commit, verified against its parent
    RANGE = "range"  # several candidates (skipped commits between, or not verified)
    NO_REGRESSION = "no regression"  # BAD is not slower than GOOD
    FAILED = "failed"  # the regime cannot be measured at GOOD or BAD (note says why)


class StepKind(StrEnum):
    """What a step measured."""

    CONFIRM = "confirm"  # BAD vs GOOD
    STEP = "step"  # a commit vs GOOD
    VERIFY = "verify"  # the culprit (or range end) vs its parent (or range start)


@dataclass(frozen=True)
class Step:
    """One measured pair: ``commit`` against ``base``, pooled over its comparisons."""

    kind: StepKind
    base: RefInfo
    commit: RefInfo
    likeness: Likeness
    verdict: Verdict | None = None
    change: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    rounds: int = 0  # worker processes per side, all comparisons pooled
    seconds: float = 0.0
    comparisons: tuple[str, ...] = ()  # stored comparison ids
    reason: str = ""


@dataclass(frozen=True)
class ProfileLink:
    """``bisect --profile``: a differential of the answer's two ends (py-spy's, or with
    ``--measure instructions`` also callgrind's)."""

    before: RefInfo
    after: RefInfo
    # py-spy: diff_svg, diff_reverse_svg, diff_json; callgrind: diff_svg,
    # diff_reverse_svg, functions_json
    files: dict[str, str] = field(default_factory=dict)
    movers: tuple[str, ...] = ()  # the functions whose self time (instructions) moved most
    error: str = ""  # why there is no profile (py-spy could not attach, say)
    source: str = ""  # where callgrind's figures came from: which comparison measured them
    seconds: float = 0.0  # py-spy's: how long each end was sampled (0: callgrind's; older records)


@dataclass(frozen=True)
class Bisection:
    """A bisection record: saved after every step so that a re-run resumes it."""

    id: str
    created: str
    regime: str
    good: RefInfo
    bad: RefInfo
    commits: int  # first-parent commits in GOOD..BAD
    outcome: Outcome | None = None  # None while running
    steps: tuple[Step, ...] = ()  # confirm, steps in the order measured, verify
    culprit: RefInfo | None = None
    candidates: tuple[RefInfo, ...] = ()  # oldest first; the culprit alone when verified
    note: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    group: str = ""  # the id shared by every regime of one `perfctl bisect` call
    profile: ProfileLink | None = None  # --profile: py-spy's differential
    callgrind: ProfileLink | None = None  # --profile --measure instructions: callgrind's
    schema: int = SCHEMA_VERSION

    def of_kind(self, kind: StepKind) -> list[Step]:
        """The steps of one kind, in the order measured."""
        return [s for s in self.steps if s.kind == kind]

    def last_looks(self) -> list[Step]:
        """The search steps, one per commit: its last (a second look pools the first)."""
        last = {s.commit.sha: s for s in self.of_kind(StepKind.STEP)}
        return [s for s in self.of_kind(StepKind.STEP) if last[s.commit.sha] is s]

    @property
    def seconds(self) -> float:
        """Time spent measuring (and building) over every step, re-runs included."""
        return math.fsum(s.seconds for s in self.steps)


Z95 = 1.959963984540054  # the two-sided 95% normal quantile: CI half-width / standard error
JUDGE = "odds"  # the rule a record's steps were judged by (records before it: "halfway")
ODDS = 99.0  # how much likelier one end must make a step's figure before it is judged
# A second look (a commit left unknown inside the final range) settles for 19:1: a wrong
# answer there is caught by the verification and ends as a range, never a wrong culprit.
SECOND_LOOK_ODDS = 19.0
FIT_Z = 3.29  # "clearly" off an end: beyond its 99.9% two-sided range
PRECISE = 0.5  # the slowdown is known once its CI half-width is at most half its low end
_TINY = 1e-6  # a floor for standard errors: counters can give a zero-width interval
_LEAST = -1.0 + 1e-9  # Welch's interval for counters can reach below -100%: no log there


@dataclass(frozen=True)
class Slowdown:
    """GOOD → BAD as the confirm step measured it: the relative change and its 95% CI."""

    change: float
    ci_low: float
    ci_high: float
    # The noise band (--threshold): a commit like either end may still differ from it
    # by a change of its own this small (an unrelated commit, a layout shift).
    band: float = 0.0

    @property
    def log(self) -> float:
        """The change on a log scale."""
        return log1p(self.change)

    @property
    def slack(self) -> float:
        """The band as a standard deviation on a log scale (the band is its 95% range)."""
        return log1p(self.band) / Z95

    @property
    def se(self) -> float:
        """Its standard error on a log scale, read off the 95% CI."""
        return log_se(self.ci_low, self.ci_high)

    @property
    def precise(self) -> bool:
        """Whether the CI is narrow against the slowdown: its half-width at most PRECISE of
        the CI's low end (the low end, because a comparison that stopped early on a lucky
        run of rounds overstates the change)."""
        return self.ci_low > 0 and Z95 * self.se <= PRECISE * log1p(self.ci_low)

    @classmethod
    def of(cls, step: Step, band: float = 0.0) -> Slowdown:
        """The slowdown a regressed confirm step measured (``band``: the noise band)."""
        if step.change is None or step.ci_low is None or step.ci_high is None:
            raise ValueError("a confirm step without a change and its CI has no slowdown")
        return cls(step.change, step.ci_low, step.ci_high, band)


def log1p(change: float) -> float:
    """A relative change on a log scale (a change of -100% or below counts as -100%)."""
    return math.log1p(max(change, _LEAST))


def log_se(ci_low: float, ci_high: float) -> float:
    """The standard error of a change on a log scale, from its 95% CI."""
    return max((log1p(ci_high) - log1p(ci_low)) / (2.0 * Z95), _TINY)


def halfway(total: float) -> float:
    """Half of a relative slowdown on a log scale: +100% -> +41.4%."""
    return math.sqrt(1.0 + total) - 1.0


def log_odds(change: float, ci_low: float, ci_high: float, total: Slowdown) -> float:
    """log(P(change | like BAD) / P(change | like GOOD)) for a commit measured against GOOD.

    Like GOOD: the true change is 0, give or take the band, and ``change`` is off by the
    step's own error; like BAD: it is the slowdown, whose own error adds to both.
    """
    x, s = log1p(change), log_se(ci_low, ci_high)
    good = math.hypot(s, total.slack)
    bad = math.hypot(s, total.slack, total.se)
    return _log_normal(x - total.log, bad) - _log_normal(x, good)


def _log_normal(d: float, sd: float) -> float:
    return -0.5 * (d / sd) ** 2 - math.log(sd)


def classify(row: RegimeComparison, total: Slowdown, odds: float = ODDS) -> Likeness:
    """Like good / like bad / unknown / skipped, for a commit measured against GOOD."""
    if row.verdict in (FAILED, SKIPPED):
        return Likeness.SKIPPED
    if row.change is None or row.ci_low is None or row.ci_high is None:
        return Likeness.UNKNOWN
    mid = halfway(total.change)
    if row.ci_high < mid:  # the CI wholly on one side of halfway settles it, as it
        return Likeness.GOOD  # always did; the odds settle what is still open
    if row.ci_low > mid:
        return Likeness.BAD
    ratio = log_odds(row.change, row.ci_low, row.ci_high, total)
    x, s = log1p(row.change), log_se(row.ci_low, row.ci_high)
    good, bad = math.hypot(s, total.slack), math.hypot(s, total.slack, total.se)
    # Likelier near one end is not enough: the figure must fit that end too (one that
    # fits neither, a commit carrying half the slowdown, stays unknown).
    if ratio >= math.log(odds) and row.change > mid and x + FIT_Z * bad >= total.log:
        return Likeness.BAD
    if ratio <= -math.log(odds) and row.change <= mid and x - FIT_Z * good <= 0.0:
        return Likeness.GOOD
    return Likeness.UNKNOWN


def verified(row: RegimeComparison, total: Slowdown) -> bool:
    """Whether parent -> culprit is a regression carrying most of the slowdown."""
    return row.verdict == REGRESSED and classify(row, total) == Likeness.BAD


def search(
    n: int,
    judge: Callable[[int], Likeness],
    start: tuple[int, int, dict[int, Likeness]] | None = None,
) -> tuple[int, int, dict[int, Likeness]]:
    """Bisect commits 0 (good) .. n (bad); returns the last good, first bad and every verdict.

    A commit judged unknown or skipped is stepped over: the candidate nearest the
    midpoint is tried next (the lower one on a tie), as ``git bisect skip`` does.
    ``start`` continues an earlier search (its range and verdicts).
    """
    lo, hi, judged = start if start else (0, n, {})
    judged = dict(judged)
    while True:
        left = [i for i in range(lo + 1, hi) if i not in judged]
        if not left:
            return lo, hi, judged
        i = nearest_middle(left, lo, hi)
        judged[i] = judge(i)
        lo, hi = narrowed(lo, hi, i, judged[i])


def unclear(lo: int, hi: int, judged: dict[int, Likeness], looked: set[int]) -> int | None:
    """The unknown commit inside the range to look at again (nearest the middle), if any."""
    left = [i for i in range(lo + 1, hi) if judged.get(i) == Likeness.UNKNOWN and i not in looked]
    return nearest_middle(left, lo, hi) if left else None


def nearest_middle(candidates: Sequence[int], lo: int, hi: int) -> int:
    """The candidate nearest the middle of lo..hi (the lower one on a tie)."""
    mid = (lo + hi) // 2
    return min(candidates, key=lambda j: (abs(j - mid), j))


def narrowed(lo: int, hi: int, i: int, likeness: Likeness) -> tuple[int, int]:
    """The range after commit ``i`` was judged: like good moves lo, like bad moves hi."""
    if likeness == Likeness.GOOD:
        return i, hi
    if likeness == Likeness.BAD:
        return lo, i
    return lo, hi


def widen(lo: int, hi: int, judged: dict[int, Likeness], n: int) -> tuple[int, int]:
    """One judged step further out on each side: the range if one boundary step was wrong."""
    goods = [i for i, v in judged.items() if v == Likeness.GOOD and i < lo]
    bads = [i for i, v in judged.items() if v == Likeness.BAD and i > hi]
    return max(goods, default=0), min(bads, default=n)


def pooled(
    rows: Sequence[RegimeComparison], *, threshold: float, alpha: float, pairing: str = "process"
) -> RegimeComparison:
    """One regime's verdict over every process of several comparisons of the same pair.

    Each comparison interleaved its own processes, so pooling keeps drift balanced;
    a failed or skipped row wins (that commit cannot be judged). The rows' unit and
    clock go with the values, so counters keep their own test (Welch's t, not the
    time rule) and paired processes their paired analysis.
    """
    from perfctl.stats import verdicts

    for r in rows:
        if r.verdict in (FAILED, SKIPPED):
            return r
    first = rows[0]
    sides = verdicts.sides_of(rows)
    (row,) = verdicts.decide_all(
        {first.name: sides}, threshold=threshold, alpha=alpha, pairing=pairing
    )
    return row


def step_from_dict(d: dict[str, Any]) -> Step:
    """Rebuild a Step."""
    d = dict(d)
    d["kind"] = StepKind(d["kind"])
    d["likeness"] = Likeness(d["likeness"])
    d["verdict"] = Verdict(d["verdict"]) if d.get("verdict") else None
    d["base"] = ref_from_dict(d["base"])
    d["commit"] = ref_from_dict(d["commit"])
    d["comparisons"] = tuple(d.get("comparisons") or ())
    return Step(**{k: v for k, v in d.items() if k in Step.__dataclass_fields__})


def bisection_from_dict(d: dict[str, Any]) -> Bisection:
    """Rebuild a Bisection from its JSON form (its schema checked first)."""
    check_schema(d, "bisection")
    d = dict(d)
    d["good"] = ref_from_dict(d["good"])
    d["bad"] = ref_from_dict(d["bad"])
    d["outcome"] = Outcome(d["outcome"]) if d.get("outcome") else None
    d["steps"] = tuple(step_from_dict(s) for s in d.get("steps") or ())
    d["culprit"] = ref_from_dict(d["culprit"]) if d.get("culprit") else None
    d["candidates"] = tuple(ref_from_dict(c) for c in d.get("candidates") or ())
    for link in ("profile", "callgrind"):
        d[link] = _profile_from_dict(d[link]) if d.get(link) else None
    return Bisection(**{k: v for k, v in d.items() if k in Bisection.__dataclass_fields__})


def _profile_from_dict(d: dict[str, Any]) -> ProfileLink:
    return ProfileLink(
        before=ref_from_dict(d["before"]),
        after=ref_from_dict(d["after"]),
        files={str(k): str(v) for k, v in (d.get("files") or {}).items()},
        movers=tuple(str(m) for m in d.get("movers") or ()),
        error=str(d.get("error") or ""),
        source=str(d.get("source") or ""),
        seconds=float(d.get("seconds") or 0.0),
    )
