"""One regime's search of a `perfctl bisect` call: its steps, second looks and verification.

The steps are measured through the call's shared pairs (:mod:`perfctl.jobs.bisect_pairs`)
and judged by :mod:`perfctl.stats.bisection`; the record is saved after every step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from perfctl.config import Config
from perfctl.jobs.bisect_pairs import Judge, Pairs, verify_judge
from perfctl.jobs.compare import COMPARE_DEFAULT, CompareSettings, Progress
from perfctl.model import RefInfo
from perfctl.render.tables import fmt_pct
from perfctl.stats.bisection import (
    JUDGE,
    ODDS,
    SECOND_LOOK_ODDS,
    Bisection,
    Likeness,
    Outcome,
    Slowdown,
    Step,
    StepKind,
    classify,
    narrowed,
    search,
    unclear,
    widen,
)


@dataclass(frozen=True)
class BisectSettings:
    """How hard each step tries before it gives up on a commit."""

    compare: CompareSettings = COMPARE_DEFAULT
    attempts: int = 3  # comparisons per commit (each with its own rounds) before "unknown"
    verify_factor: int = 2  # a timed verification runs this many times the rounds
    fresh: bool = False  # ignore the stored record and comparisons
    profile: bool = False  # py-spy's (and counting instructions, callgrind's) differential
    # Seconds each end loops under py-spy; None: PROFILE_SECONDS, or a stored one's length.
    profile_duration: float | None = None

    @property
    def measure(self) -> str:
        """The signal compared: time, instructions or memory."""
        return self.compare.schedule.measure


class Call(Protocol):
    """What a search needs of its `perfctl bisect` call (:class:`perfctl.jobs.bisect.Group`)."""

    config: Config
    line: tuple[RefInfo, ...]
    settings: BisectSettings
    pairs: Pairs
    say: Progress

    def open_names(self, name: str) -> Sequence[str]:
        """The regimes a new comparison measures: ``name`` and every later open one."""
        ...


class Searcher:
    """One regime's bisection: its record, and the steps measured so far."""

    def __init__(self, group: Call, record: Bisection, prior: Bisection | None) -> None:
        self.group, self.record, self.prior_record = group, record, prior
        # A record judged by another rule (before JUDGE): its comparisons are reused, but
        # each step is judged anew from them.
        self.rejudge = prior is not None and prior.settings.get("judge") != JUDGE
        # Each pair's stored steps in the order measured: a commit's first look, then
        # its second look, are handed out in that order on a resume.
        self.prior: dict[tuple[str, str, str], list[Step]] = {}
        for s in prior.steps if prior else ():
            self.prior.setdefault((s.kind, s.base.sha, s.commit.sha), []).append(s)

    @property
    def line(self) -> tuple[RefInfo, ...]:
        """GOOD, every first-parent commit, BAD."""
        return self.group.line

    @property
    def compare(self) -> CompareSettings:
        """Settings of one step's comparison."""
        return self.group.settings.compare

    def run(self, total: Slowdown) -> Bisection:
        """Search and verify; the finished record (saved)."""
        good = self.line[0]

        def judge_commit(i: int, attempts: int | None = None) -> Likeness:
            odds = ODDS if attempts is None else SECOND_LOOK_ODDS  # a second look
            judge = lambda r: classify(r, total, odds)  # noqa: E731
            step = self.measure(StepKind.STEP, good, self.line[i], judge, self.compare, attempts)
            return step.likeness

        n = len(self.line) - 1
        lo, hi, judged = search(n, judge_commit)
        # A commit stepped over as unknown may be the culprit itself (a busy spell
        # widened its interval): before settling for a range, each unknown commit
        # inside it gets the verification's share of attempts, pooled with its own.
        looked: set[int] = set()
        more = self.group.settings.attempts * self.group.settings.verify_factor
        while (i := unclear(lo, hi, judged, looked)) is not None:
            looked.add(i)
            judged[i] = judge_commit(i, more)
            lo, hi = narrowed(lo, hi, i, judged[i])
            lo, hi, judged = search(n, judge_commit, (lo, hi, judged))
        return self.conclude(lo, hi, judged, total)

    def conclude(self, lo: int, hi: int, judged: dict[int, Likeness], total: Slowdown) -> Bisection:
        """Verify the answer with more rounds; widen it to a range when it does not hold."""
        s = self.compare.schedule
        # A counter's processes agree to well under its band: more of them would not
        # sharpen the verification, only multiply its callgrind (or tracemalloc) runs.
        k = self.group.settings.verify_factor if s.measure == "time" else 1
        more = replace(
            self.compare, schedule=replace(s, rounds=s.rounds * k, max_rounds=s.max_rounds * k)
        )
        check = self.measure(
            StepKind.VERIFY, self.line[lo], self.line[hi], verify_judge(total), more, alone=True
        )
        holds = check.likeness == Likeness.BAD
        note = ""
        if not holds:
            note = (
                f"not verified: {self.line[lo].short} → {self.line[hi].short} changed "
                f"{fmt_pct(check.change)}, not most of the slowdown ({fmt_pct(total.change)}); "
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

    def adopt(self, record: Bisection) -> None:
        """Make ``record`` this search's record, saved when it changed anything."""
        if record != self.record:
            self.record = record
            self.save()

    def save(self) -> None:
        """Write the record as it stands (after every step)."""
        from perfctl.store.bisects import save_bisection

        self.record = self.named(self.record)
        save_bisection(self.group.config.state_dir, self.record)

    def named(self, record: Bisection) -> Bisection:
        """``record`` with ``settings.machines``: every machine behind its steps' figures."""
        machines = self.group.pairs.machines(record.steps)
        return replace(record, settings={**record.settings, "machines": machines})

    def measure(
        self,
        kind: StepKind,
        base: RefInfo,
        commit: RefInfo,
        judge: Judge,
        cs: CompareSettings,
        attempts: int | None = None,
        alone: bool = False,
    ) -> Step:
        """This regime's step for the pair (reused from its record when already finished).

        ``attempts`` raises the comparisons pooled before the pair counts as unknown.
        """
        stored = self.prior.get((kind, base.sha, commit.sha))
        reused = stored.pop(0) if stored else None
        name = self.record.regime
        names = [name] if alone else self.group.open_names(name)
        if reused is not None:
            # A later look at this pair (its second look) pools with these comparisons,
            # as it would have without the interruption.
            self.group.pairs.resume(kind, base, commit, reused.comparisons, names, cs)
            # A skipped step (it did not build) has nothing to judge anew.
            if not self.rejudge or reused.likeness == Likeness.SKIPPED:
                self.group.say(f"{kind}: {commit.short} reused ({reused.likeness})")
                return self.add(reused)
        step = self.group.pairs.step(kind, base, commit, name, judge, cs, names, attempts)
        if reused is not None:  # judged anew: its first measuring time still counts
            step = replace(step, seconds=round(step.seconds + reused.seconds, 2))
        return self.add(step)

    def restart(self, confirm: Step) -> None:
        """Start the record again from a confirm step measured further (and keep it)."""
        self.record = replace(self.record, steps=(confirm,))
        self.keep()

    def keep(self) -> None:
        """Save the record as this call starts it, with the stored record's later steps
        still in it until they are added again: a stop before then loses none of them.
        A record judged by an earlier rule is left as it is until a step is judged."""
        from perfctl.store.bisects import save_bisection

        if self.rejudge:
            return
        later = self.prior_record.steps[1:] if self.prior_record else ()
        whole = replace(self.record, steps=(*self.record.steps, *later))
        save_bisection(self.group.config.state_dir, self.named(whole))

    def add(self, step: Step) -> Step:
        """Append a finished step to the record and save it."""
        self.record = replace(self.record, steps=(*self.record.steps, step))
        self.save()
        return step
