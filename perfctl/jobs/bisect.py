"""`perfctl bisect GOOD BAD --regime R`: the commit that made a regime slower.

confirm (BAD vs GOOD must be ``regressed``) → search the first-parent line,
each step one commit measured interleaved against GOOD with ``compare``'s
machinery and judged like good / like bad / unknown / skipped
(:mod:`perfctl.stats.bisection`) → verify the culprit against its parent with
more rounds → a culprit, or a candidate range when the answer does not hold.
Every measurement is a stored comparison; the record is saved after each step,
so a re-run (after Ctrl-C, say) reuses what was finished.
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from perfctl.config import Config
from perfctl.errors import BuildError, RegimeFailed, UsageError
from perfctl.jobs.compare import COMPARE_DEFAULT, CompareSettings, Progress, compare_refs
from perfctl.model import (
    FAILED,
    IMPROVED,
    NO_CHANGE,
    REGRESSED,
    SKIPPED,
    Comparison,
    RefInfo,
    RegimeComparison,
)
from perfctl.stats.bisection import (
    Bisection,
    Likeness,
    Outcome,
    Step,
    StepKind,
    classify,
    pooled,
    verified,
)

Judge = Callable[[RegimeComparison], Likeness]


@dataclass(frozen=True)
class BisectSettings:
    """How hard each step tries before it gives up on a commit."""

    compare: CompareSettings = COMPARE_DEFAULT
    attempts: int = 3  # comparisons per commit (each with its own rounds) before "unknown"
    verify_factor: int = 2  # the verification runs this many times the rounds
    fresh: bool = False  # ignore the stored record and comparisons


def search(n: int, judge: Callable[[int], Likeness]) -> tuple[int, int, dict[int, Likeness]]:
    """Bisect commits 0 (good) .. n (bad); returns the last good, first bad and every verdict.

    A commit judged unknown or skipped is stepped over: the candidate nearest the
    midpoint is tried next (the lower one on a tie), as ``git bisect skip`` does.
    """
    lo, hi = 0, n
    judged: dict[int, Likeness] = {}
    while True:
        left = [i for i in range(lo + 1, hi) if i not in judged]
        if not left:
            return lo, hi, judged
        mid = (lo + hi) // 2
        i = min(left, key=lambda j: (abs(j - mid), j))
        judged[i] = judge(i)
        if judged[i] == Likeness.GOOD:
            lo = i
        elif judged[i] == Likeness.BAD:
            hi = i


def widen(lo: int, hi: int, judged: dict[int, Likeness], n: int) -> tuple[int, int]:
    """One judged step further out on each side: the range if one boundary step was wrong."""
    goods = [i for i, v in judged.items() if v == Likeness.GOOD and i < lo]
    bads = [i for i, v in judged.items() if v == Likeness.BAD and i > hi]
    return max(goods, default=0), min(bads, default=n)


def _confirm_judge(row: RegimeComparison) -> Likeness:
    if row.verdict == REGRESSED:
        return Likeness.BAD
    if row.verdict in (IMPROVED, NO_CHANGE):
        return Likeness.GOOD
    if row.verdict in (FAILED, SKIPPED):
        return Likeness.SKIPPED
    return Likeness.UNKNOWN


def _verify_judge(total: float) -> Judge:
    def judge(row: RegimeComparison) -> Likeness:
        if verified(row, total):
            return Likeness.BAD
        found = classify(row, total)
        return Likeness.UNKNOWN if found == Likeness.BAD else found

    return judge


class _Bisector:
    """One bisection: its commits, settings, record, and the steps measured so far."""

    def __init__(
        self,
        config: Config,
        glob: str,
        line: tuple[RefInfo, ...],
        settings: BisectSettings,
        say: Progress,
    ) -> None:
        from perfctl.store.bisects import bisection_id, load_bisection
        from perfctl.store.local import utcnow

        self.config, self.glob, self.line, self.settings, self.say = (
            config,
            glob,
            line,
            settings,
            say,
        )
        bid = bisection_id(line[0].sha, line[-1].sha, glob)
        prior = None if settings.fresh else load_bisection(config.state_dir, bid)
        self.prior = {(s.kind, s.base.sha, s.commit.sha): s for s in prior.steps} if prior else {}
        self.name = prior.regime if prior else ""
        self.record = Bisection(
            id=bid,
            created=prior.created if prior else utcnow(),
            regime=self.name,
            good=line[0],
            bad=line[-1],
            commits=len(line) - 1,
            settings={"preset": settings.compare.name, "attempts": settings.attempts},
        )

    # -- the whole job --------------------------------------------------------
    def run(self) -> Bisection:
        """Confirm, search, verify; the finished record (saved)."""
        good, bad = self.line[0], self.line[-1]
        confirm = self.measure(StepKind.CONFIRM, good, bad, _confirm_judge, self.settings.compare)
        if confirm.likeness == Likeness.SKIPPED:
            raise RegimeFailed(
                f"the regime cannot be measured on GOOD or BAD: {confirm.reason}",
                "fix the regime (or pick other ends), then re-run",
            )
        if confirm.likeness != Likeness.BAD:
            return self.finish(Outcome.NO_REGRESSION, (), "")
        total = confirm.change or 0.0

        def judge_commit(i: int) -> Likeness:
            step = self.measure(
                StepKind.STEP, good, self.line[i], lambda r: classify(r, total), self.compare
            )
            return step.likeness

        lo, hi, judged = search(len(self.line) - 1, judge_commit)
        return self.conclude(lo, hi, judged, total)

    @property
    def compare(self) -> CompareSettings:
        """Settings of one step's comparison."""
        return self.settings.compare

    def conclude(self, lo: int, hi: int, judged: dict[int, Likeness], total: float) -> Bisection:
        """Verify the answer with more rounds; widen it to a range when it does not hold."""
        s = self.compare.schedule
        k = self.settings.verify_factor
        more = replace(
            self.compare, schedule=replace(s, rounds=s.rounds * k, max_rounds=s.max_rounds * k)
        )
        check = self.measure(
            StepKind.VERIFY, self.line[lo], self.line[hi], _verify_judge(total), more
        )
        holds = check.likeness == Likeness.BAD
        note = ""
        if not holds:
            note = (
                f"not verified: {self.line[lo].short} → {self.line[hi].short} changed "
                f"{_pct(check.change)}, not most of the slowdown ({_pct(total)}); "
                "the candidates span the neighbouring steps"
            )
            lo, hi = widen(lo, hi, judged, len(self.line) - 1)
        candidates = self.line[lo + 1 : hi + 1]
        if holds and len(candidates) == 1:
            return self.finish(Outcome.CULPRIT, candidates, note)
        if holds:
            note = "the commits between were skipped or unclear: the slowdown is in this range"
        return self.finish(Outcome.RANGE, candidates, note)

    def finish(self, outcome: Outcome, candidates: tuple[RefInfo, ...], note: str) -> Bisection:
        """Save and return the finished record."""
        culprit = candidates[0] if outcome == Outcome.CULPRIT else None
        self.record = replace(
            self.record, outcome=outcome, candidates=candidates, culprit=culprit, note=note
        )
        self.save()
        return self.record

    def save(self) -> None:
        """Write the record as it stands (after every step)."""
        from perfctl.store.bisects import save_bisection

        save_bisection(self.config.state_dir, self.record)

    # -- one step -------------------------------------------------------------
    def measure(
        self, kind: StepKind, base: RefInfo, commit: RefInfo, judge: Judge, cs: CompareSettings
    ) -> Step:
        """Measure ``commit`` against ``base`` until the judge decides or attempts run out."""
        reused = self.prior.get((kind, base.sha, commit.sha))
        if reused is not None:
            self.say(f"{kind}: {commit.short} reused ({reused.likeness})")
            return self.add(reused)
        rows, ids = self.stored(base, commit)
        seconds = 0.0
        while not rows or (
            judge(pooled(rows, threshold=cs.threshold, alpha=cs.alpha)) == Likeness.UNKNOWN
            and len(ids) < self.settings.attempts
        ):
            started = time.monotonic()
            c = self.attempt(
                kind, base, commit, replace(cs, schedule=replace(cs.schedule, seed=len(ids)))
            )
            seconds += time.monotonic() - started
            if isinstance(c, str):
                skip = Step(kind, base, commit, Likeness.SKIPPED, seconds=seconds, reason=c)
                return self.add(skip)
            rows.append(self.row(c))
            ids.append(c.id)
        row = pooled(rows, threshold=cs.threshold, alpha=cs.alpha)
        return self.add(_step(kind, base, commit, judge(row), row, seconds, tuple(ids)))

    def attempt(
        self, kind: StepKind, base: RefInfo, commit: RefInfo, cs: CompareSettings
    ) -> Comparison | str:
        """One stored comparison of the pair, or why ``commit`` cannot be built."""
        self.say(f"{kind}: {commit.short} {commit.subject[:50]} vs {base.short}")
        try:
            return compare_refs(
                self.config,
                base.sha,
                commit.sha,
                regimes=[self.glob],
                settings=cs,
                progress=self.say,
            )
        except BuildError as exc:
            if kind == StepKind.CONFIRM:
                raise  # GOOD or BAD itself: nothing to bisect
            log = exc.message.partition("build log: ")[2]
            return f"does not build (build log: {log})" if log else f"does not build: {exc.message}"

    def add(self, step: Step) -> Step:
        """Append a finished step to the record and save it."""
        self.record = replace(self.record, steps=(*self.record.steps, step))
        self.save()
        return step

    def row(self, c: Comparison) -> RegimeComparison:
        """The bisected regime's row of a comparison (its name fixed by the first one)."""
        if not self.name:
            self.name = _one_name(c, self.glob)
            self.record = replace(self.record, regime=self.name)
        for r in c.regimes:
            if r.name == self.name:
                return r
        raise UsageError(
            f"comparison {c.id} has no regime `{self.name}`", "check the --regime name"
        )

    def stored(self, base: RefInfo, commit: RefInfo) -> tuple[list[RegimeComparison], list[str]]:
        """A stored comparison of exactly these commits on this machine, if one has the regime."""
        from perfctl.measure.machine import fingerprint
        from perfctl.store.local import open_store

        if self.settings.fresh or not self.name:
            return [], []
        c = open_store(self.config.state_dir, self.config.store_url).find_comparison(
            base.sha, commit.sha
        )
        if c is None or c.settings.get("from_store") or c.settings.get("merged_from"):
            return [], []  # recomputed or merged: its runs were not interleaved as one
        rows = [r for r in c.regimes if r.name == self.name and r.base_values]
        if not rows or c.machine.id != fingerprint().id:
            return [], []
        self.say(f"reusing stored comparison {c.id} of {base.short} and {commit.short}")
        return rows, [c.id]


def _one_name(c: Comparison, glob: str) -> str:
    """The one regime ``--regime`` names (a baseline dragged along does not count)."""
    names = [r.name for r in c.regimes]
    exact = [n for n in names if n == glob or f"{_family(c, n)}.{n}" == glob]
    hits = exact or [n for n in names if fnmatch.fnmatchcase(n, glob)]
    if len(hits) != 1:
        shown = ", ".join(hits[:5]) or "none"
        raise UsageError(
            f"--regime `{glob}` selects {len(hits)} regimes ({shown}); bisect follows one",
            "name a single regime exactly",
        )
    return hits[0]


def _family(c: Comparison, name: str) -> str:
    return next((r.family for r in c.regimes if r.name == name), "")


def _step(
    kind: StepKind,
    base: RefInfo,
    commit: RefInfo,
    likeness: Likeness,
    row: RegimeComparison,
    seconds: float,
    ids: tuple[str, ...],
) -> Step:
    return Step(
        kind=kind,
        base=base,
        commit=commit,
        likeness=likeness,
        verdict=row.verdict,
        change=row.change,
        ci_low=row.ci_low,
        ci_high=row.ci_high,
        rounds=min(len(row.base_values), len(row.head_values)),
        seconds=round(seconds, 2),
        comparisons=ids,
        reason=row.reason if likeness in (Likeness.SKIPPED, Likeness.UNKNOWN) else "",
    )


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x * 100:+.1f}%"


def bisect(
    config: Config,
    good: str,
    bad: str,
    regime: str,
    settings: BisectSettings | None = None,
    progress: Progress | None = None,
) -> Bisection:
    """Find the commit in GOOD..BAD that made ``regime`` slower; the stored record."""
    from perfctl.git.line import first_parent_line
    from perfctl.store.lock import project_lock

    settings = settings or BisectSettings()
    say = progress or (lambda _msg: None)
    with project_lock(config.state_dir, wait=settings.compare.lock_wait, what="bisect"):
        line = first_parent_line(config.root, good, bad)
        line = (replace(line[0], ref=good), *line[1:-1], replace(line[-1], ref=bad))
        return _Bisector(config, regime, line, settings, say).run()
