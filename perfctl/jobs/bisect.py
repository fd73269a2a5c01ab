"""`perfctl bisect GOOD BAD --regime R …`: the commit that made each regime slower.

confirm (BAD vs GOOD, every selected regime: only a ``regressed`` one is searched)
→ for each regressed regime, search the first-parent line, each step one commit
measured interleaved against GOOD with ``compare``'s machinery and judged like good
/ like bad / unknown / skipped (:mod:`perfctl.stats.bisection`) → verify the culprit
against its parent with more rounds → a culprit, or a candidate range when the
answer does not hold → with ``--profile``, py-spy's differential of the two ends.
A step measures every regime still being searched (:mod:`perfctl.jobs.bisect_pairs`),
so searches that meet at a commit share its measurement. Every measurement is a
stored comparison; each regime's record is saved after each step, so a re-run
(after Ctrl-C, say) reuses what was finished.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from perfctl.config import Config
from perfctl.errors import RegimeFailed, UsageError
from perfctl.jobs.bisect_pairs import Judge, Pairs, confirm_judge, select_names, verify_judge
from perfctl.jobs.compare import COMPARE_DEFAULT, CompareSettings, Progress, facts_once
from perfctl.model import RefInfo
from perfctl.stats.bisection import (
    Bisection,
    Likeness,
    Outcome,
    ProfileLink,
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
    verify_factor: int = 2  # the verification runs this many times the rounds
    fresh: bool = False  # ignore the stored record and comparisons
    profile: bool = False  # py-spy differential of the answer's two ends

    @property
    def measure(self) -> str:
        """The signal compared: time, instructions or memory."""
        return self.compare.schedule.measure


class _Bisector:
    """One regime's bisection: its record, and the steps measured so far."""

    def __init__(self, group: _Group, record: Bisection, prior: Bisection | None) -> None:
        self.group, self.record, self.prior_record = group, record, prior
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

    def run(self, total: float) -> Bisection:
        """Search and verify; the finished record (saved)."""
        good = self.line[0]

        def judge_commit(i: int, attempts: int | None = None) -> Likeness:
            judge = lambda r: classify(r, total)  # noqa: E731
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

    def conclude(self, lo: int, hi: int, judged: dict[int, Likeness], total: float) -> Bisection:
        """Verify the answer with more rounds; widen it to a range when it does not hold."""
        s = self.compare.schedule
        k = self.group.settings.verify_factor
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

        save_bisection(self.group.config.state_dir, self.record)

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
            self.group.say(f"{kind}: {commit.short} reused ({reused.likeness})")
            # A later look at this pair (its second look) pools with these comparisons,
            # as it would have without the interruption.
            self.group.pairs.resume(kind, base, commit, reused.comparisons, names, cs)
            return self.add(reused)
        return self.add(self.group.pairs.step(kind, base, commit, name, judge, cs, names, attempts))

    def add(self, step: Step) -> Step:
        """Append a finished step to the record and save it."""
        self.record = replace(self.record, steps=(*self.record.steps, step))
        self.save()
        return step


class _Group:
    """One `perfctl bisect` call: its ends, its regimes, and the pairs they share."""

    def __init__(
        self,
        config: Config,
        globs: tuple[str, ...],
        line: tuple[RefInfo, ...],
        settings: BisectSettings,
        say: Progress,
    ) -> None:
        from perfctl.store.bisects import group_id, load_group

        self.config, self.globs, self.line, self.settings, self.say = (
            config,
            globs,
            line,
            settings,
            say,
        )
        selection = {"regimes": sorted(globs), "family": settings.compare.family}
        self.id = group_id(line[0].sha, line[-1].sha, selection, settings.measure)
        found = [] if settings.fresh else load_group(config.state_dir, self.id)
        self.prior = {b.regime: b for b in found}  # this call's records, by regime
        self.pairs = Pairs(config, settings.attempts, settings.fresh, say, settings.measure)
        self.open: list[str] = []  # regimes whose search has not finished, in order
        self.names: list[str] = []  # every selected regime

    def open_names(self, name: str) -> list[str]:
        """The regimes a new comparison measures: ``name`` and every later open one."""
        return self.open[self.open.index(name) :] if name in self.open else [name]

    def run(self) -> tuple[Bisection, ...]:
        """Confirm every regime, then search each regressed one; the finished records."""
        confirms = self.confirm()
        if all(s.likeness == Likeness.SKIPPED for s in confirms.values()):
            reasons = "; ".join(f"{n}: {s.reason}" for n, s in confirms.items())
            raise RegimeFailed(
                f"the regime cannot be measured on GOOD or BAD: {reasons}",
                "fix the regime (or pick other ends), then re-run",
            )
        bisectors = {n: self.bisector(n, s) for n, s in confirms.items()}
        self.open = [n for n, s in confirms.items() if s.likeness == Likeness.BAD]
        done = {}
        for name, b in bisectors.items():
            step = confirms[name]
            if step.likeness == Likeness.SKIPPED:
                done[name] = b.finish(Outcome.FAILED, (), step.reason or "the regime failed")
            elif step.likeness != Likeness.BAD:
                done[name] = b.finish(Outcome.NO_REGRESSION, (), "")
            else:
                done[name] = b.run(step.change or 0.0)
                self.open.remove(name)
        return tuple(self.profiled(b, done[n]) for n, b in bisectors.items())

    def confirm(self) -> dict[str, Step]:
        """BAD vs GOOD for every selected regime (from the stored records when resumed)."""
        self.names = self.resumed_names()
        if self.names:
            for name in self.names:
                step = self.prior[name].of_kind(StepKind.CONFIRM)[0]
                self.say(f"confirm: {name} reused ({step.likeness})")
            return {n: self.prior[n].of_kind(StepKind.CONFIRM)[0] for n in self.names}
        good, bad = self.line[0], self.line[-1]
        names = self.names = self.selected(good, bad)
        cs = self.settings.compare
        return {
            n: self.pairs.step(StepKind.CONFIRM, good, bad, n, confirm_judge, cs, names[i:])
            for i, n in enumerate(names)
        }

    def resumed_names(self) -> list[str]:
        """The regimes an earlier run of this call selected, when every one of them still
        has its record of this call with a confirm step; else none (confirm again).

        A record is per regime, so another call on the same ends may have taken one
        over; then this call's selection is incomplete and must not shrink silently.
        """
        names = next((list(b.settings.get("names") or ()) for b in self.prior.values()), [])
        complete = sorted(names) == sorted(self.prior) and all(
            b.of_kind(StepKind.CONFIRM) for b in self.prior.values()
        )
        return sorted(names) if names and complete else []

    def selected(self, good: RefInfo, bad: RefInfo) -> list[str]:
        """The regimes the selection names, from a first comparison of the two ends.

        A stored comparison of the ends counts only if it was asked for the same
        selection (an interrupted run of this call): a narrower one would hide regimes.
        """
        family = self.settings.compare.family
        c = self.pairs.stored(good, bad, self.settings.compare)
        asked = {"globs": list(self.globs), "family": family}
        if c is None or {k: c.settings.get(k) for k in asked} != asked:
            found = self.pairs.attempt(
                StepKind.CONFIRM, good, bad, self.globs, self.settings.compare
            )
            assert not isinstance(found, str)  # a confirm attempt raises BuildError instead
            c = found
        else:
            self.say(f"reusing stored comparison {c.id} of {good.short} and {bad.short}")
        names = select_names(c.regimes, self.globs, family)
        self.pairs.seed(good, bad, c, names)
        return names

    def bisector(self, name: str, confirm: Step) -> _Bisector:
        """The regime's bisector, its record started with the confirm step."""
        from perfctl.store.bisects import bisection_id, load_bisection
        from perfctl.store.local import utcnow

        good, bad = self.line[0], self.line[-1]
        bid = bisection_id(good.sha, bad.sha, name, self.settings.measure)
        # The regime's own record, whichever call wrote it: its steps are reused.
        prior = None if self.settings.fresh else load_bisection(self.config.state_dir, bid)
        cpus = list(self.settings.compare.schedule.affinity)
        if prior is not None and list(prior.settings.get("affinity") or ()) != cpus:
            cpus = []  # its reused steps were placed otherwise: no one placement to name
        record = Bisection(
            id=bid,
            created=prior.created if prior else utcnow(),
            regime=name,
            good=good,
            bad=bad,
            commits=len(self.line) - 1,
            steps=(confirm,),
            settings={
                "preset": self.settings.compare.name,
                "attempts": self.settings.attempts,
                "measure": self.settings.measure,
                "affinity": cpus,
                "regimes": list(self.globs),
                "family": self.settings.compare.family,
                "names": list(self.names),  # this call's selection, to resume it whole
            },
            group=self.id,
        )
        b = _Bisector(self, record, prior)
        b.save()
        return b

    def profiled(self, b: _Bisector, record: Bisection) -> Bisection:
        """The record with py-spy's differential of its answer's two ends (never fatal).

        A profile of the same ends from an earlier run is kept, with or without --profile.
        """
        if record.outcome not in (Outcome.CULPRIT, Outcome.RANGE) or not record.candidates:
            return record
        before = self.line[self.line.index(record.candidates[0]) - 1]
        after = record.candidates[-1]
        done = b.prior_record.profile if b.prior_record else None
        if done and not done.error and (done.before.sha, done.after.sha) == (before.sha, after.sha):
            b.record = replace(record, profile=done)  # resumed: profiled already
            b.save()
            return b.record
        if not self.settings.profile:
            return record
        self.say(f"profile: {record.regime} {before.short} → {after.short} (py-spy)")
        link = profile_ends(self.config, record.regime, before, after, self.settings)
        b.record = replace(record, profile=link)
        b.save()
        return b.record


def profile_ends(
    config: Config, regime: str, before: RefInfo, after: RefInfo, settings: BisectSettings
) -> ProfileLink:
    """py-spy profiles of both ends, diffed per op; a failure is kept as the link's error."""
    from perfctl.errors import PerfctlError
    from perfctl.jobs import profile as profiling

    regimes = settings.compare.regimes
    try:
        a = profiling.resolve_target(config, after.sha, isolated=True)
        b = profiling.resolve_target(config, before.sha, isolated=True)
        d = profiling.profile_pair(config, regime, b, a, regimes=regimes)
    except PerfctlError as exc:
        return ProfileLink(before, after, error=exc.message)
    except OSError as exc:  # the reports folder cannot be written, say: never fatal
        return ProfileLink(before, after, error=f"{type(exc).__name__}: {exc}")
    moved = [f for f in d.diff.functions if f.change != "same"][:5]
    movers = tuple(
        f"{f.where}: self time per op {_signed_us(f.delta_self_per_op_s)} ({f.change})"
        for f in moved
    )
    files = {"diff_svg": str(d.diff_svg), "diff_reverse_svg": str(d.diff_reverse_svg)}
    return ProfileLink(before, after, {**files, "diff_json": str(d.diff_json)}, movers)


def _signed_us(seconds: float) -> str:
    return f"{seconds * 1e6:+.2f} µs"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x * 100:+.1f}%"


def bisect(
    config: Config,
    good: str,
    bad: str,
    regimes: str | Sequence[str],
    settings: BisectSettings | None = None,
    progress: Progress | None = None,
) -> tuple[Bisection, ...]:
    """Find the commit in GOOD..BAD that made each selected regime slower; the records.

    ``regimes`` are names or globs (``--regime``); with the settings' family alone,
    every regime of that family. One record per regime, sorted by name.
    """
    from perfctl.git.line import first_parent_line
    from perfctl.store.lock import project_lock

    settings = settings or BisectSettings()
    globs = (regimes,) if isinstance(regimes, str) else tuple(regimes)
    if not globs and settings.compare.family is None:
        raise UsageError(
            "bisect needs the regimes to follow", "name them with --regime or --family"
        )
    say = facts_once(progress or (lambda _msg: None))
    if settings.profile:
        from perfctl.profile import pyspy

        pyspy.find_py_spy()  # before anything is measured
    with project_lock(config.state_dir, wait=settings.compare.lock_wait, what="bisect"):
        line = first_parent_line(config.root, good, bad)
        line = (replace(line[0], ref=good), *line[1:-1], replace(line[-1], ref=bad))
        return _Group(config, globs, line, settings, say).run()
