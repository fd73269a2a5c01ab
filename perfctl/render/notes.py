"""Notes under a run or comparison table: computed crossovers and which clock timed what.

Every figure comes from the stored record: a comparison's head-side summaries
(what ``stats`` computed), or a run's summaries via :func:`perfctl.render.tables.result_stats`'s
source, :func:`perfctl.stats.decision.summarize`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from perfctl.model import OK, Comparison, Run
from perfctl.stats.band import own_band
from perfctl.stats.crossover import Crossover, Point, crossovers


def comparison_crossovers(c: Comparison) -> list[Crossover]:
    """Crossovers of the head side (the code as it is after the change)."""
    from perfctl.stats.verdicts import comparable_clocks

    rows = {r.name: r for r in c.regimes if r.head is not None}
    points = []
    for r in c.regimes:
        base_name = r.baseline or ""
        base_row = rows.get(base_name)
        if r.head is None or base_row is None or base_row.head is None:
            continue
        if not comparable_clocks(r.clock, base_row.clock):
            continue
        base = base_row.head
        h = r.head
        points.append(
            Point(r.name, base_name, h.median_s, h.ci_low_s, h.ci_high_s,
                  base.median_s, base.ci_low_s, base.ci_high_s)
        )  # fmt: skip
    return crossovers(points)


def run_crossovers(run: Run) -> list[Crossover]:
    """Crossovers of one run's regimes against their baselines."""
    from perfctl.stats.decision import summarize

    stats = {
        r.name: summarize(r.processes) for r in run.results if r.status == OK and any(r.processes)
    }
    points = []
    for r in run.results:
        base_name = r.baseline or ""
        s, b = stats.get(r.name), stats.get(base_name)
        if s is None or b is None:
            continue
        points.append(
            Point(r.name, base_name, s.median_s, s.ci_low_s, s.ci_high_s,
                  b.median_s, b.ci_low_s, b.ci_high_s)
        )  # fmt: skip
    return crossovers(points)


def clock_note(names: Iterable[tuple[str, str]]) -> str | None:
    """Which regimes were timed on the device rather than the wall clock, if any."""
    device = sorted(n for n, clock in names if clock == "device")
    if not device:
        return None
    return (
        f"Timed on the device (CUDA events, the work itself): {_few(device)}; "
        "their host wall time per op is the host_us metric (host ≫ device: launch-bound)."
    )


def pairing_note(rows: Iterable[tuple[str, str]]) -> str | None:
    """Which regimes were measured with both refs in one worker process, when some were
    and some were not (``--pairing auto`` chooses per regime)."""
    rows = list(rows)  # read twice
    paired = sorted(n for n, how in rows if how == "same-process")
    apart = sorted(n for n, how in rows if how == "process")
    if not paired or not apart:
        return None  # one way for all: the table's caption says which
    return (
        f"Both refs in every worker process (same-process pairing): {_few(paired)}; "
        f"in separate worker processes (they start processes, or cannot share one): "
        f"{_few(apart)}."
    )


def own_bands(c: Comparison) -> str:
    """The regimes judged on a noise band of their own (``@regime(threshold=)``) other than
    the comparison's, ``pipe ±10%, …``; ``""`` when there are none."""
    own = sorted(
        (r.name, band)
        for r in c.regimes
        if (band := own_band(r.threshold, c.threshold)) is not None
    )
    return _few([f"{name} ±{band * 100:g}%" for name, band in own])


def band_note(c: Comparison) -> str | None:
    """Which regimes were judged on a noise band of their own, if any."""
    shown = own_bands(c)
    if not shown:
        return None
    return f"Noise bands of their own (declared by the regime, in place of ±{c.threshold * 100:g}%): {shown}."


# What a value means under compare's --clock (settings "clock"), when it is not wall time.
TIMERS = {
    "cpu": "the timing thread's CPU time (--clock cpu): time it sat preempted is not "
    "counted, and neither is waiting on a child process, I/O, a lock or the GPU",
    "busy": "wall time less the time the timing thread waited for a CPU (--clock busy): "
    "time it sat preempted is not counted; waiting on a child process, I/O or a lock is",
}


def timer_notes(c: Comparison) -> list[str]:
    """What the values of each row time when ``--clock`` chose something other than wall
    time (under ``--pairing auto``, the regimes measured in one process only)."""
    out = []
    measured = [r for r in c.regimes if r.base_values or r.head_values]
    older = c.settings.get("pairing") == "same-process"  # rows said "wall" before
    for clock, said in TIMERS.items():
        names = sorted(r.name for r in measured if r.clock == clock)
        if names and len(names) == len(measured):
            out.append(f"Values are {said}.")
        elif names:
            out.append(f"Values of {_few(names)} are {said}; the others' are timed as usual.")
        elif older and c.settings.get("clock") == clock and measured:
            out.append(f"Values are {said}.")  # a record older than each row's clock
    return out


def time_line(c: Comparison) -> str | None:
    """How long measuring took, in all and per regime (longest first), for a measured
    comparison whose rows say (``RegimeComparison.seconds``); None otherwise."""
    timed = sorted(((r.seconds, r.name) for r in c.regimes if r.seconds > 0), key=_longest)
    if not c.measured or not timed:
        return None
    each = _few([f"{name} {duration(s)}" for s, name in timed])
    return f"Measuring took {duration(sum(s for s, _ in timed))}: {each}."


def _longest(row: tuple[float, str]) -> tuple[float, str]:
    return -row[0], row[1]


def duration(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``: wall time for people."""
    whole = round(seconds)
    return f"{whole} s" if whole < 60 else f"{whole // 60} min {whole % 60:02d} s"


def _few(names: list[str]) -> str:
    return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")


CLOCK_MOVED = 0.10  # an SM clock change beyond this during a regime is worth a warning


def sm_clock_notes(named: Iterable[tuple[str, dict[str, float]]]) -> list[str]:
    """A warning per regime whose GPU SM clock moved while it was measured."""
    out = []
    for name, metrics in named:
        start, end = metrics.get("sm_mhz_start"), metrics.get("sm_mhz_end")
        if start and end and abs(end - start) / start > CLOCK_MOVED:
            out.append(
                f"Warning: the GPU's SM clock moved {start:.0f} → {end:.0f} MHz while "
                f"measuring {name} (boost or throttling): its device times may not compare"
            )
    return out


def comparison_notes(c: Comparison, *, paths: bool = False, root: Path | None = None) -> list[str]:
    """Lines to print under a comparison's table (``paths``: name artefact files too;
    ``root``: what relative artefact paths are relative to, e.g. a CI artefacts folder)."""
    lines = [f"Crossover: {x.sentence()}" for x in comparison_crossovers(c)]
    note = clock_note((r.name, r.clock) for r in c.regimes)
    pairs = pairing_note((r.name, r.pairing) for r in c.regimes)
    band = band_note(c)
    sides = [(f"{r.name} ({side})", m) for r in c.regimes
             for side, m in (("base", r.metrics_base), ("head", r.metrics_head))]  # fmt: skip
    return (
        lines
        + ([note] if note else [])
        + ([pairs] if pairs else [])
        + ([band] if band else [])
        + timer_notes(c)
        + placement_notes(c)
        + sm_clock_notes(sides)
        + instruction_notes(c, paths=paths, root=root)
    )


def placement_notes(c: Comparison) -> list[str]:
    """Where the workers ran, when ``--affinity`` chose it."""
    return _pinned(c.settings, " of both refs")


def pinned_to(settings: dict[str, Any]) -> str:
    """Where a record's timed workers ran: ``CPU 0-1 (--affinity)``, or '' when they
    were not pinned (perfctl pins only where --affinity or the config asks)."""
    from perfctl.measure.machine import format_cpus

    cpus = settings.get("affinity") or ()
    return f"CPU {format_cpus(cpus)} (--affinity)" if cpus else ""


def _pinned(settings: dict[str, Any], whose: str) -> list[str]:
    placed = pinned_to(settings)
    return [f"Placement: every worker{whose} was pinned to {placed}."] if placed else []


def instruction_notes(c: Comparison, *, paths: bool = False, root: Path | None = None) -> list[str]:
    """Where the instructions moved in each regime whose instruction count changed.

    Read from the diff `--measure instructions` linked to the comparison; ``paths``
    adds where its flame graph is (the terminal; a comment links artefacts apart).
    """
    from perfctl.model import IMPROVED, REGRESSED
    from perfctl.profile.instruction_records import format_moves, load_diff

    out: list[str] = []
    for r in c.regimes:
        found = r.artifacts.get("instructions_functions")
        if not found or r.verdict not in (IMPROVED, REGRESSED):
            continue
        where_file = Path(found) if Path(found).is_absolute() or root is None else root / found
        try:
            d = load_diff(where_file)
        except (OSError, ValueError, KeyError, TypeError):
            continue  # moved or damaged: the verdict stands without the view
        where = f"; flame graph: {where_file.with_name('diff.svg')}" if paths else ""
        out.append(
            f"Where the instructions moved in {r.name} (self instructions/op, "
            f"{d.before_total:,.0f} → {d.after_total:,.0f} in all{where}):"
        )
        out += [f"  {line}" for line in format_moves(d)]
    return out


def run_notes(run: Run) -> list[str]:
    """Lines to print under a run's table."""
    lines = [f"Crossover: {x.sentence()}" for x in run_crossovers(run)]
    note = clock_note((r.name, r.clock) for r in run.results)
    return (
        lines
        + ([note] if note else [])
        + sm_clock_notes((r.name, r.metrics) for r in run.results)
        + _pinned(run.settings, "")
    )
