"""`perfctl bisect GOOD BAD --regime R …`: the commit that made each regime slower.

confirm (BAD vs GOOD, every selected regime: only a ``regressed`` one is searched;
its ends are measured again until the slowdown's CI is narrow against it) → for each
regressed regime, search the first-parent line (:mod:`perfctl.jobs.bisect_search`),
each step one commit measured interleaved against GOOD with ``compare``'s machinery
and judged like good / like bad / unknown / skipped (:mod:`perfctl.stats.bisection`)
→ verify the culprit against its parent (with more rounds, timing) → a culprit, or a
candidate range when the answer does not hold → with ``--profile``, py-spy's
differential of the two ends, and callgrind's when counting instructions
(:mod:`perfctl.jobs.bisect_profile`).
A step measures every regime still being searched (:mod:`perfctl.jobs.bisect_pairs`),
so searches that meet at a commit share its measurement. Every measurement is a
stored comparison; each regime's record is saved after each step, so a re-run
(after Ctrl-C, say) reuses what was finished.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import partial

from perfctl.config import Config
from perfctl.errors import RegimeFailed, StoreError, UsageError
from perfctl.jobs.bisect_pairs import (
    Pairs,
    confirm_judge,
    precise_judge,
    select_names,
)
from perfctl.jobs.bisect_search import BisectSettings as BisectSettings
from perfctl.jobs.bisect_search import Searcher
from perfctl.jobs.compare import Progress, facts_once
from perfctl.model import REGRESSED, Comparison, Notice, RefInfo
from perfctl.profile import PROFILE_SECONDS
from perfctl.render.bisect import change_text, machine_list
from perfctl.stats.bisection import (
    JUDGE,
    Bisection,
    Likeness,
    Outcome,
    ProfileLink,
    Slowdown,
    Step,
    StepKind,
)


class Group:
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
        self.resumed = False

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
        unheld = self.sharpen(confirms, bisectors)
        self.open = [n for n, s in confirms.items() if s.likeness == Likeness.BAD]
        done = {}
        for name, b in bisectors.items():
            step = confirms[name]
            if step.likeness == Likeness.SKIPPED:
                done[name] = b.finish(Outcome.FAILED, (), step.reason or "the regime failed")
            elif step.likeness != Likeness.BAD:
                prior, kept = b.prior_record, ""  # a re-run keeps the note it resumes
                if self.resumed and prior and prior.outcome == Outcome.NO_REGRESSION:
                    kept = prior.note
                done[name] = b.finish(Outcome.NO_REGRESSION, (), unheld.get(name, kept))
            else:
                done[name] = b.run(Slowdown.of(step, self.band(name, step)))
                self.open.remove(name)
        return tuple(self.profiled(b, done[n]) for n, b in bisectors.items())

    def band(self, name: str, confirm: Step) -> float:
        """``name``'s noise band as its ``confirm`` step's stored comparisons declare it
        (the comparison's ``--threshold`` where they declare none, or are gone)."""
        from perfctl.stats.band import band_of
        from perfctl.store.local import open_store

        default = self.settings.compare.threshold
        store = open_store(self.config.state_dir, self.config.store_url)
        for cid in confirm.comparisons:
            try:
                rows = [r for r in store.load_comparison(cid).regimes if r.name == name]
            except StoreError:
                continue
            if rows:
                return band_of(rows[0].threshold, default)
        return default

    def confirm(self) -> dict[str, Step]:
        """BAD vs GOOD for every selected regime (from the stored records when resumed)."""
        self.names = self.resumed_names()
        self.resumed = bool(self.names)  # the confirm steps are this call's own, resumed
        if self.names:
            for name in self.names:
                step = self.prior[name].of_kind(StepKind.CONFIRM)[0]
                self.say(f"confirm: {name} reused ({step.likeness})")
            return {n: self.prior[n].of_kind(StepKind.CONFIRM)[0] for n in self.names}
        good, bad = self.line[0], self.line[-1]
        names = self.names = self.selected(good, bad)
        cs = self.settings.compare
        judge = partial(confirm_judge, band=cs.threshold)
        return {
            n: self.pairs.step(StepKind.CONFIRM, good, bad, n, judge, cs, names[i:])
            for i, n in enumerate(names)
        }

    def sharpen(self, confirms: dict[str, Step], bisectors: dict[str, Searcher]) -> dict[str, str]:
        """Measure the ends again, pooled, up to ``attempts`` x ``verify_factor``
        comparisons, for each regime whose slowdown is loose (every step is weighed against
        it) or still unclear (``inconclusive``, ``within noise``): until it is regressed
        and precise, or clearly not. ``confirms`` and the records are updated; the notes
        of the regimes whose regression did not hold when measured again."""
        cs, good, bad = self.settings.compare, self.line[0], self.line[-1]
        limit = self.settings.attempts * self.settings.verify_factor
        sharp = partial(precise_judge, band=cs.threshold)
        loose = [
            n
            for n, s in confirms.items()
            if (
                s.likeness == Likeness.UNKNOWN
                or (s.likeness == Likeness.BAD and not Slowdown.of(s).precise)
            )
            and len(s.comparisons) < limit  # a resumed call's, measured again already
        ]
        unheld: dict[str, str] = {}
        for i, name in enumerate(loose):
            first = confirms[name]
            loose_one = first.likeness == Likeness.BAD
            what = "slowdown" if loose_one else "BAD vs GOOD"
            why = "loose" if loose_one else f"unclear ({first.verdict})"
            self.say(
                f"confirm: {name} {what} {change_text(first)} is {why}: measuring GOOD and BAD "
                "again, pooled"
            )
            # A resumed call starts the pair from the first confirmation's comparisons.
            self.pairs.resume(StepKind.CONFIRM, good, bad, first.comparisons, loose[i:], cs)
            step = self.pairs.step(StepKind.CONFIRM, good, bad, name, sharp, cs, loose[i:], limit)
            if step.verdict == REGRESSED:  # still loose after every attempt: searched all
                step = replace(step, likeness=Likeness.BAD, reason="")  # the same
            elif first.likeness == Likeness.BAD:
                unheld[name] = (
                    f"BAD vs GOOD read regressed at first ({change_text(first)}), but "
                    f"{step.verdict} when measured again and pooled ({change_text(step)})"
                )
            confirms[name] = replace(step, seconds=round(first.seconds + step.seconds, 2))
            bisectors[name].restart(confirms[name])
        return unheld

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
        asked = {"globs": list(self.globs), "family": family}

        def same(c: Comparison) -> bool:
            # Asked for this selection, all of it: a narrower one (or one shard of it,
            # which records the whole selection) would hide regimes.
            whole = not c.settings.get("shard")
            return whole and {k: c.settings.get(k) for k in asked} == asked

        c = self.pairs.stored(good, bad, self.settings.compare, same)
        if c is None:
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

    def bisector(self, name: str, confirm: Step) -> Searcher:
        """The regime's bisector, its record started with the confirm step."""
        from perfctl.store.bisects import bisection_id, load_bisection
        from perfctl.store.local import utcnow

        good, bad = self.line[0], self.line[-1]
        bid = bisection_id(good.sha, bad.sha, name, self.settings.measure)
        # The regime's own record, whichever call wrote it: its steps are reused.
        prior = None if self.settings.fresh else load_bisection(self.config.state_dir, bid)
        if prior is not None and prior.settings.get("judge") != JUDGE:
            self.say(
                Notice(
                    f"{name}: the stored bisection judged its steps by an earlier rule: judging them anew from their stored comparisons"
                )
            )
        elif prior is not None:
            self.say_machines(name, prior)
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
                "judge": JUDGE,  # how its steps are judged (older records: "halfway")
                "affinity": cpus,
                "regimes": list(self.globs),
                "family": self.settings.compare.family,
                "names": list(self.names),  # this call's selection, to resume it whole
            },
            group=self.id,
        )
        b = Searcher(self, record, prior)
        b.keep()
        return b

    def say_machines(self, name: str, prior: Bisection) -> None:
        """Say so when the stored record's steps, reused as they are, were measured on a
        machine with another fingerprint (a copied or shared ``.perfctl``, or this host
        since its kernel, governor, Python or GPU driver changed)."""
        here = self.pairs.here
        others = {i: h for i, h in self.pairs.machines(prior.steps).items() if i != here}
        if others:
            self.say(
                Notice(
                    f"{name}: reusing steps measured on another machine fingerprint: "
                    f"{machine_list(others)};"
                    " each step was measured interleaved on one machine, new ones are measured here"
                )
            )

    def profiled(self, b: Searcher, record: Bisection) -> Bisection:
        """The record with the differentials of its answer's two ends (never fatal):
        py-spy's, and with ``--measure instructions`` callgrind's.

        A differential of the same ends from an earlier run is kept, with or without --profile,
        unless --profile-duration asks for another length of py-spy's.
        """
        if record.outcome not in (Outcome.CULPRIT, Outcome.RANGE) or not record.candidates:
            return record
        ends = (self.line[self.line.index(record.candidates[0]) - 1], record.candidates[-1])
        kept = _kept_links(b.prior_record, ends)
        done = replace(  # resumed: profiled already
            record,
            profile=kept.get("profile", record.profile),
            callgrind=kept.get("callgrind", record.callgrind),
        )
        # Saved as it stands before each differential is taken: a stop keeps the others.
        b.adopt(done)
        if self.settings.profile and self._retake(kept.get("profile")):
            done = self._py_spy(b, done, ends, kept.get("profile"))
        counted = self.settings.compare.schedule.measure == "instructions"
        if self.settings.profile and counted and "callgrind" not in kept:
            from perfctl.jobs.bisect_profile import callgrind_ends

            link = callgrind_ends(self.config, done, ends, self.settings.compare, self.say)
            b.adopt(done := replace(done, callgrind=link))
        return done

    def _retake(self, stored: ProfileLink | None) -> bool:
        """Whether py-spy's differential is taken: none of these ends is stored, or
        --profile-duration asks for another length than the stored one's."""
        asked = self.settings.profile_duration
        return stored is None or (asked is not None and asked != _sampled(stored))

    def _py_spy(
        self,
        b: Searcher,
        done: Bisection,
        ends: tuple[RefInfo, RefInfo],
        stored: ProfileLink | None,
    ) -> Bisection:
        """``done`` with py-spy's differential of ``ends``, saved; a failed retake keeps
        the stored one (until a new one exists, a stop keeps it too)."""
        from perfctl.jobs.bisect_profile import profile_ends

        asked = self.settings.profile_duration
        seconds = PROFILE_SECONDS if asked is None else asked
        where = f"{done.regime} {ends[0].short} → {ends[1].short}"
        self.say(f"profile: {where} (py-spy, {seconds:g} s a ref)")
        link = profile_ends(
            self.config, done.regime, *ends, self.settings.compare.regimes, duration=seconds
        )
        if link.error and stored is not None:
            kept = _sampled(stored)
            self.say(f"profile: {where} not taken again ({link.error}); kept the {kept:g} s one")
            return done
        b.adopt(done := replace(done, profile=link))
        return done


def _sampled(link: ProfileLink) -> float:
    """The seconds a stored py-spy differential sampled each end (a record from before
    the length was kept: PROFILE_SECONDS, the only length there was)."""
    return link.seconds or PROFILE_SECONDS


def _kept_links(prior: Bisection | None, ends: tuple[RefInfo, RefInfo]) -> dict[str, ProfileLink]:
    """The stored record's differentials of exactly these ends (not those that failed)."""
    shas = (ends[0].sha, ends[1].sha)
    links = {"profile": prior.profile, "callgrind": prior.callgrind} if prior else {}
    return {
        name: link
        for name, link in links.items()
        if link and not link.error and (link.before.sha, link.after.sha) == shas
    }


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
        return Group(config, globs, line, settings, say).run()
