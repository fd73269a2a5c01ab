"""The measured pairs of one bisection, shared by every regime it follows.

A pair (base, commit) is measured with ``compare``'s machinery, interleaved on one
machine, and kept as each regime's rows and stored comparison ids. Every comparison
measures all regimes still being bisected, so a commit measured for one regime's search
costs nothing when another regime's search reaches it; each regime is still judged
only by its own rows. A stored comparison of exactly that pair (same machine, same
measure, measured as one interleaved comparison) seeds the pair.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from perfctl.config import Config
from perfctl.errors import BuildError, UsageError
from perfctl.jobs.compare import CompareSettings, Progress, compare_refs
from perfctl.model import (
    FAILED,
    IMPROVED,
    NO_CHANGE,
    REGRESSED,
    SKIPPED,
    Comparison,
    Notice,
    RefInfo,
    RegimeComparison,
)
from perfctl.regimes.discovery import glob_hits
from perfctl.stats.band import band_of
from perfctl.stats.bisection import (
    Likeness,
    Slowdown,
    Step,
    StepKind,
    classify,
    pooled,
    verified,
)

Judge = Callable[[RegimeComparison], Likeness]


@dataclass
class Pair:
    """Every regime's rows (and the comparisons they came from) for one (base, commit)."""

    rows: dict[str, list[RegimeComparison]] = field(default_factory=dict)
    ids: dict[str, list[str]] = field(default_factory=dict)
    broken: str = ""  # why the commit cannot be measured (it does not build)
    unbilled: float = 0.0  # seconds spent measuring, not yet counted in a step

    def bill(self) -> float:
        """The seconds not yet counted; the first step that uses them counts them."""
        seconds, self.unbilled = self.unbilled, 0.0
        return round(seconds, 2)

    def add(self, c: Comparison, names: Sequence[str], measured_only: bool = False) -> None:
        """Keep the rows of ``names`` from one comparison (``measured_only``: those with values)."""
        for r in c.regimes:
            if r.name in names and (r.base_values or not measured_only):
                self.rows.setdefault(r.name, []).append(r)
                self.ids.setdefault(r.name, []).append(c.id)


class Pairs:
    """Measures pairs on demand and remembers them for the whole bisection."""

    def __init__(
        self, config: Config, attempts: int, fresh: bool, say: Progress, measure: str
    ) -> None:
        self.config, self.attempts, self.fresh, self.say = config, attempts, fresh, say
        self.measure_kind = measure
        self.left_out: set[str] = set()  # stored comparisons said not to pool
        # Which machine measured each comparison seen (id, hostname): a record names them.
        self.machine_of: dict[str, tuple[str, str]] = {}
        # Keyed by (verify?, base, commit): a verification measures anew (with more
        # rounds when timing), even when its pair is a search step's (the culprit right
        # after GOOD).
        self.pairs: dict[tuple[bool, str, str], Pair] = {}

    def step(
        self,
        kind: StepKind,
        base: RefInfo,
        commit: RefInfo,
        name: str,
        judge: Judge,
        cs: CompareSettings,
        names: Sequence[str],
        attempts: int | None = None,
    ) -> Step:
        """``name``'s step for the pair: measured (with ``names``) until judged or out of
        attempts (``attempts``, else the bisection's)."""
        pair = self.pair(base, commit, kind, cs, names)
        limit = attempts or self.attempts
        while not pair.broken and (
            name not in pair.rows
            or (
                judge(_pool(pair.rows[name], cs)) == Likeness.UNKNOWN
                and len(pair.ids[name]) < limit
            )
        ):
            seed = len(pair.ids.get(name, ()))
            c = self.attempt(
                kind, base, commit, names, replace(cs, schedule=replace(cs.schedule, seed=seed))
            )
            if isinstance(c, str):
                pair.broken = c
                break
            self.note(c)
            pair.add(c, names)
            if name not in pair.rows:
                raise UsageError(
                    f"comparison {c.id} has no regime `{name}`", "check the --regime names"
                )
        if pair.broken:
            return Step(
                kind, base, commit, Likeness.SKIPPED, seconds=pair.bill(), reason=pair.broken
            )
        row = _pool(pair.rows[name], cs)
        ids = tuple(pair.ids[name])
        return make_step(kind, base, commit, judge(row), row, pair.bill(), ids)

    def seed(self, base: RefInfo, commit: RefInfo, c: Comparison, names: Sequence[str]) -> None:
        """Start the pair from a comparison already in hand."""
        pair = self.pairs.setdefault(_key(StepKind.CONFIRM, base, commit), Pair())
        self.note(c)
        pair.add(c, names)

    def resume(
        self,
        kind: StepKind,
        base: RefInfo,
        commit: RefInfo,
        ids: Sequence[str],
        names: Sequence[str],
        cs: CompareSettings,
    ) -> None:
        """Add a reused step's stored comparisons to the pair, those it does not hold yet
        (one no longer in the store, or measured unlike ``cs``, is left out)."""
        from perfctl.errors import StoreError
        from perfctl.store.local import open_store

        pair = self.pairs.setdefault(_key(kind, base, commit), Pair())
        held = {cid for got in pair.ids.values() for cid in got}
        ids = [cid for cid in ids if cid not in held]
        if not ids:
            return
        store = open_store(self.config.state_dir, self.config.store_url)
        for cid in ids:
            try:
                c = store.load_comparison(cid)
            except StoreError:
                continue
            self.note(c)
            why = self._unpoolable(c, cs)  # a second look pools only processes alike
            if not why:
                pair.add(c, names, measured_only=True)
            elif cid not in self.left_out:
                self.left_out.add(cid)
                self.say(Notice(f"not pooling stored comparison {cid}: {why}"))

    def pair(
        self,
        base: RefInfo,
        commit: RefInfo,
        kind: StepKind,
        cs: CompareSettings,
        names: Sequence[str],
    ) -> Pair:
        """The pair as measured so far (seeded from the store the first time, but a
        verification never: it measures its pair anew, with more rounds when timing)."""
        key = _key(kind, base, commit)
        if key not in self.pairs:
            self.pairs[key] = Pair()
            held = functools.partial(_holds_values, names)
            stored = None if kind == StepKind.VERIFY else self.stored(base, commit, cs, held)
            if stored is not None:
                self.say(
                    f"reusing stored comparison {stored.id} of {base.short} and {commit.short}"
                )
                self.note(stored)
                self.pairs[key].add(stored, names, measured_only=True)
        return self.pairs[key]

    def attempt(
        self,
        kind: StepKind,
        base: RefInfo,
        commit: RefInfo,
        names: Sequence[str],
        cs: CompareSettings,
    ) -> Comparison | str:
        """One stored comparison of the pair, or why ``commit`` cannot be built."""
        self.say(f"{kind}: {commit.short} {commit.subject[:50]} vs {base.short}")
        started = time.monotonic()
        try:
            return compare_refs(
                self.config,
                base.sha,
                commit.sha,
                regimes=list(names),
                settings=cs,
                progress=self.say,
            )
        except BuildError as exc:
            if kind == StepKind.CONFIRM:
                raise  # GOOD or BAD itself: nothing to bisect
            log = exc.message.partition("build log: ")[2]
            return f"does not build (build log: {log})" if log else f"does not build: {exc.message}"
        finally:  # billed to the pair, so the step that first uses it shows the time
            key = _key(kind, base, commit)
            self.pairs.setdefault(key, Pair()).unbilled += time.monotonic() - started

    @functools.cached_property
    def here(self) -> str:
        """This machine's fingerprint id (read once: a call runs on one machine)."""
        from perfctl.measure.machine import fingerprint

        return fingerprint().id

    def note(self, c: Comparison) -> None:
        """Remember which machine measured ``c``."""
        self.machine_of[c.id] = (c.machine.id, c.machine.hostname)

    def machines(self, steps: Sequence[Step]) -> dict[str, str]:
        """The machines (id → hostname) that measured these steps' comparisons; those not
        seen in this call are read from the store (one that is gone names none)."""
        from perfctl.errors import StoreError
        from perfctl.store.local import open_store

        ids = [cid for s in steps for cid in s.comparisons]
        unseen = [cid for cid in dict.fromkeys(ids) if cid not in self.machine_of]
        if unseen:
            store = open_store(self.config.state_dir, self.config.store_url)
            for cid in unseen:
                try:
                    self.note(store.load_comparison(cid))
                except StoreError:
                    continue
        return dict(self.machine_of[cid] for cid in ids if cid in self.machine_of)

    def stored(
        self,
        base: RefInfo,
        commit: RefInfo,
        cs: CompareSettings,
        wanted: Callable[[Comparison], bool],
    ) -> Comparison | None:
        """The newest stored comparison of exactly these commits that this call may pool
        (measured here the same way: signal, clock, pairing and placement as ``cs``) and
        that is ``wanted``; a newer one that is not (recomputed, another runner's in a
        shared store, of other regimes) does not hide it."""
        from perfctl.store.local import open_store

        if self.fresh:
            return None
        store = open_store(self.config.state_dir, self.config.store_url)
        for c in store.comparisons_between(base.sha, commit.sha):  # clean, newest first
            if not self._unpoolable(c, cs) and wanted(c):
                return c
        return None

    def _unpoolable(self, c: Comparison, cs: CompareSettings) -> str:
        """Why ``c``'s processes may not join this call's ("" when they may): they must be
        interleaved as one, of this signal, measured alike and on a machine with this
        one's fingerprint (a shared store holds other runners' comparisons too)."""
        if not c.measured or c.settings.get("merged_from"):
            return "recomputed or merged, not measured interleaved as one"
        if c.settings.get("measure", "time") != self.measure_kind:
            # another signal: instructions are no evidence about time
            return f"it measured {c.settings.get('measure', 'time')}"
        if not measured_alike(c, cs):
            return "measured otherwise (clock, pairing or --affinity)"
        if c.machine.id != self.here:
            host = f"{c.machine.hostname}, " if c.machine.hostname else ""
            return f"measured on another machine ({host}id {c.machine.id})"
        return ""


def measured_alike(c: Comparison, cs: CompareSettings) -> bool:
    """Whether ``c``'s processes can be pooled with ones measured with ``cs``: CPU time,
    same-process or pinned pairs cannot be pooled with other kinds."""
    return (
        c.settings.get("clock", "wall") == cs.schedule.clock
        and c.settings.get("pairing", "process") == cs.schedule.pairing
        # stored JSON gives a list: pinned and unpinned processes are not one sample
        and tuple(c.settings.get("affinity") or ()) == cs.schedule.affinity
    )


def _holds_values(names: Sequence[str], c: Comparison) -> bool:
    """Whether ``c`` holds measured values of one of ``names``."""
    return any(r.name in names and r.base_values for r in c.regimes)


def _key(kind: StepKind, base: RefInfo, commit: RefInfo) -> tuple[bool, str, str]:
    return (kind == StepKind.VERIFY, base.sha, commit.sha)


def _pool(rows: Sequence[RegimeComparison], cs: CompareSettings) -> RegimeComparison:
    return pooled(rows, threshold=cs.threshold, alpha=cs.alpha, pairing=cs.schedule.pairing)


def make_step(
    kind: StepKind,
    base: RefInfo,
    commit: RefInfo,
    likeness: Likeness,
    row: RegimeComparison,
    seconds: float,
    ids: tuple[str, ...],
) -> Step:
    """A finished step from the pooled row of its comparisons."""
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


def confirm_judge(row: RegimeComparison, band: float) -> Likeness:
    """BAD vs GOOD: only a regression starts a search. Measured again (unknown): an
    ``inconclusive`` or ``within noise`` verdict whose CI still reaches beyond ``band``
    (the noise band; the regime's own where it declares one), and a ``no change`` whose
    estimate is a slowdown beyond it."""
    band = band_of(row.threshold, band)
    if row.verdict == REGRESSED:
        return Likeness.BAD
    if row.verdict in (FAILED, SKIPPED):
        return Likeness.SKIPPED
    if row.verdict == NO_CHANGE:
        beyond = row.change is not None and row.change > band
    else:  # no slowdown beyond the band left possible: nothing to wait for
        beyond = row.verdict != IMPROVED and (row.ci_high is None or row.ci_high > band)
    return Likeness.UNKNOWN if beyond else Likeness.GOOD


def precise_judge(row: RegimeComparison, band: float) -> Likeness:
    """BAD vs GOOD measured again: done once the slowdown's CI is narrow against it."""
    found = confirm_judge(row, band)
    if found != Likeness.BAD or row.change is None or row.ci_low is None or row.ci_high is None:
        return found
    precise = Slowdown(row.change, row.ci_low, row.ci_high).precise
    return Likeness.BAD if precise else Likeness.UNKNOWN


def verify_judge(total: Slowdown) -> Judge:
    """Parent vs culprit: a regression carrying most of the slowdown, else not verified."""

    def judge(row: RegimeComparison) -> Likeness:
        if verified(row, total):
            return Likeness.BAD
        found = classify(row, total)
        return Likeness.UNKNOWN if found == Likeness.BAD else found

    return judge


def select_names(
    rows: Sequence[RegimeComparison], globs: Sequence[str], family: str | None
) -> list[str]:
    """The regimes ``--regime``/``--family`` name (a baseline dragged along does not count)."""
    rows = [r for r in rows if family is None or r.family == family]
    chosen: list[str] = []
    for g in globs or ("*",):
        hits = [r.name for r in glob_hits(rows, g)]
        chosen.extend(h for h in hits if h not in chosen)
    if not chosen:
        raise UsageError(
            f"--regime {' '.join(globs)} selects no measured regime",
            "list them with `perfctl list`",
        )
    return sorted(chosen)
