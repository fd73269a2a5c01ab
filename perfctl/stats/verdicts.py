"""From measured results of both refs to one RegimeComparison per regime.

The statistics live in :mod:`perfctl.stats.decision`; this stage applies them across
all regimes of a comparison: per-side summaries with baseline ratios, one
test per regime, Benjamini–Hochberg within each family, then verdicts (each on
its regime's own noise band where head declares one, :mod:`perfctl.stats.band`).

Two families: the regimes a comparison is about, and the *reference* regimes that
another measured regime names as its ``baseline=`` (measured for the Slowdown
column). References are usually unchanged code; pooled with the rest they would
only dilute the correction (five quiet baselines among ten regimes halve the
adjusted significance of a real change), so they are corrected among themselves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from perfctl.model import (
    FAILED,
    INCONCLUSIVE,
    OK,
    ON_CPU_CLOCKS,
    SKIPPED,
    RegimeComparison,
    RegimeResult,
    SideStats,
)
from perfctl.stats.band import band_of, declared

if TYPE_CHECKING:
    from perfctl.stats.decision import Change


def _baseline_median(
    results: Mapping[str, Mapping[str, RegimeResult]],
    side: str,
    baseline: str | None,
    seed: int,
    clock: str = "wall",
) -> float | None:
    from perfctl.stats import decision as stats

    other = results.get(baseline or "", {}).get(side)
    if other is None or other.status != OK or not other.processes:
        return None
    if not comparable_clocks(clock, other.clock):
        return None
    return stats.summarize(other.processes, seed=seed).median_s


def comparable_clocks(a: str, b: str) -> bool:
    """Whether values on clocks ``a`` and ``b`` may be set side by side (baseline ratio,
    crossover): equal, or neither an on-CPU clock (device against wall is the point);
    an on-CPU value against another clock's would show the load, not the code."""
    return a == b or (a not in ON_CPU_CLOCKS and b not in ON_CPU_CLOCKS)


def _side_stats(
    results: Mapping[str, Mapping[str, RegimeResult]], name: str, side: str, seed: int
) -> SideStats | None:
    from perfctl.stats import decision as stats

    r = results[name][side]
    if r.status != OK or not r.processes:
        return None
    base_med = _baseline_median(results, side, r.baseline, seed, r.clock)
    return stats.summarize(r.processes, baseline_median=base_med, seed=seed)


def _test(b: RegimeResult, h: RegimeResult, pairing: str, seed: int) -> tuple[Change, float | None]:
    """The change test for one regime, and the paired spread when it replaces the CVs."""
    from perfctl.stats import counters, paired
    from perfctl.stats import decision as stats

    if b.unit != "s":
        # Counters (instructions, blocks): a t interval, as 3 processes a side must do.
        return counters.compare_counts(b.processes, h.processes), None
    if pairing == "same-process":
        change = paired.compare_paired(b.processes, h.processes)
        return change, paired.ratio_cv(b.processes, h.processes)
    return stats.compare_sides(b.processes, h.processes, seed=seed), None


def _unmeasured(
    name: str, b: RegimeResult, h: RegimeResult, common: dict[str, Any]
) -> RegimeComparison:
    if b.unit != h.unit and b.status == OK and h.status == OK:
        reason = f"base measured {b.unit}, head {h.unit}: not comparable"
        return RegimeComparison(name=name, verdict=FAILED, reason=reason, **common)
    if b.clock != h.clock and b.status == OK and h.status == OK:
        # Device time against wall time is no change at all.
        why = f"not comparable: base timed on the {b.clock} clock, head on the {h.clock} clock"
        return RegimeComparison(name=name, verdict=FAILED, reason=why, **common)
    failed = [(s, r) for s, r in (("base", b), ("head", h)) if r.status == FAILED]
    if failed:
        reason = "; ".join(f"{s}: {r.reason}" for s, r in failed)
        return RegimeComparison(name=name, verdict=FAILED, reason=reason, **common)
    skipped = [r.reason for r in (b, h) if r.status == SKIPPED and r.reason]
    return RegimeComparison(
        name=name, verdict=SKIPPED, reason=skipped[0] if skipped else "", **common
    )


def references(results: Mapping[str, Mapping[str, RegimeResult]]) -> set[str]:
    """Measured regimes that another measured regime names as its ``baseline=``."""
    named = {r.baseline for sides in results.values() for r in sides.values() if r.baseline}
    return {n for n in results if n in named}


def adjust(pvalues: Mapping[str, float], reference: set[str]) -> dict[str, float]:
    """Benjamini–Hochberg within each family: the references apart from the rest."""
    from perfctl.stats import decision as stats

    out: dict[str, float] = {}
    for family in (
        [n for n in pvalues if n not in reference],
        [n for n in pvalues if n in reference],
    ):
        adjusted = stats.benjamini_hochberg([pvalues[n] for n in family])
        out.update(zip(family, adjusted, strict=True))
    return out


def _shape_note(row: RegimeComparison) -> str:
    """Why the data are noisy, when their shape says so (two groups, a drift)."""
    from perfctl.stats import shape

    notes = []
    for side, values, order in (
        ("base", row.base_values, row.base_order),
        ("head", row.head_values, row.head_order),
    ):
        found = shape.describe(values, order)
        if found:
            notes.append(f"{side}: {found}")
    return "; " + "; ".join(notes) if notes else ""


def _common(
    results: Mapping[str, Mapping[str, RegimeResult]], name: str, seed: int
) -> dict[str, Any]:
    """The fields of a regime's row that do not depend on the verdict."""
    b, h = results[name]["base"], results[name]["head"]
    unit = b.unit if b.status == OK else h.unit
    return dict(
        family=b.family or h.family,
        description=b.description or h.description,
        base_status=b.status,
        head_status=h.status,
        base_values=b.processes,
        head_values=h.processes,
        base_order=b.order,
        head_order=h.order,
        baseline=b.baseline or h.baseline,
        metrics_base=b.metrics,
        metrics_head=h.metrics,
        clock=h.clock if h.status == OK else b.clock,
        base=_side_stats(results, name, "base", seed),
        head=_side_stats(results, name, "head", seed),
        unit=unit,
        max_peak=h.max_peak,
        over_limit=over_limit(h),
        # A declared band is for time; counters keep theirs (--measure instructions: 0.5%).
        threshold=declared(h.threshold) if unit == "s" else None,
        seconds=max(b.seconds, h.seconds),
    )


def sides_of(rows: Sequence[RegimeComparison]) -> dict[str, RegimeResult]:
    """The base and head results that rows of one regime were decided from, to decide again.

    One row (a shard's, for ``merge``) or several of the same pair (a bisection step's
    comparisons, pooled: their processes joined, the first row's metrics). Unit, clock
    and head's ``max_peak`` travel with the values, so counters keep their own test,
    and a limit is still checked.
    """
    first = rows[0]
    ways = {r.pairing for r in rows}  # rows measured differently are never paired
    common: dict[str, Any] = dict(
        pairing=ways.pop() if len(ways) == 1 else "process",
        name=first.name,
        family=first.family,
        description=first.description,
        baseline=first.baseline,
        unit=first.unit,
        clock=first.clock,
        seconds=round(sum(r.seconds for r in rows), 2),  # pooled: all of their time
    )
    return {
        "base": RegimeResult(
            status=first.base_status,
            processes=tuple(p for r in rows for p in r.base_values),
            order=tuple(o for r in rows for o in r.base_order),
            metrics=first.metrics_base,
            reason=first.reason if first.base_status != OK else "",
            **common,
        ),
        "head": RegimeResult(
            status=first.head_status,
            processes=tuple(p for r in rows for p in r.head_values),
            order=tuple(o for r in rows for o in r.head_order),
            metrics=first.metrics_head,
            reason=first.reason if first.head_status != OK else "",
            max_peak=first.max_peak,
            threshold=first.threshold,
            **common,
        ),
    }


PEAK = "peak_traced_bytes"  # the memory worker's figure a max_peak limit is checked on


def over_limit(h: RegimeResult) -> str:
    """Why head's measured peak is over its declared ``max_peak``, or ``""``.

    Only ``--measure memory`` records the peak (the median over processes of the
    traced peak during the timed loops); otherwise there is nothing to check.
    """
    peak = h.metrics.get(PEAK)
    if h.max_peak is None or peak is None or peak <= h.max_peak:
        return ""
    return f"peak traced memory {_size(peak)} is over max_peak {_size(h.max_peak)}"


def _size(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def decide_all(
    results: Mapping[str, Mapping[str, RegimeResult]],
    *,
    threshold: float,
    alpha: float,
    seed: int = 0,
    pairing: str = "process",
) -> list[RegimeComparison]:
    """One RegimeComparison per regime, with BH-adjusted p-values and verdicts.

    Where process *i* of each side ran in one worker process (both results say
    ``pairing="same-process"``; ``pairing`` stands in for records older than the
    field), the change comes from the paired analysis of the per-process ratios
    (:mod:`perfctl.stats.paired`) and their spread is the noise judged.
    """
    rows: dict[str, RegimeComparison] = {}
    tested: dict[str, Change] = {}
    noise: dict[str, float] = {}  # paired: the spread of the ratios, for both sides
    for name, sides in results.items():
        b, h = sides["base"], sides["head"]
        common = _common(results, name, seed)
        if not _comparable(b, h):
            rows[name] = _unmeasured(name, b, h, common)
            continue
        how = measured_pairing(b, h, pairing)
        tested[name], spread = _test(b, h, how, seed)
        if spread is not None:
            noise[name] = spread
        rows[name] = RegimeComparison(
            name=name, verdict=INCONCLUSIVE, pairing=how, **common
        )  # decided below
    adjusted = adjust({n: c.p_value for n, c in tested.items()}, references(results))
    for name, change in tested.items():
        band = band_of(rows[name].threshold, threshold)  # a regime's own band wins
        rows[name] = _decided(
            rows[name], change, adjusted[name], noise.get(name), threshold=band, alpha=alpha
        )
    return list(rows.values())


def measured_pairing(b: RegimeResult, h: RegimeResult, default: str = "process") -> str:
    """How the two sides' values were measured together: "same-process" only when both
    say so (``default`` for results that do not say), else "process"."""
    sides = {b.pairing or default, h.pairing or default}
    return "same-process" if sides == {"same-process"} else "process"


def _comparable(b: RegimeResult, h: RegimeResult) -> bool:
    """Both sides measured, in the same unit on the same clock: a test can decide them."""
    return (
        b.status == OK
        and h.status == OK
        and bool(b.processes)
        and bool(h.processes)
        and b.unit == h.unit
        and b.clock == h.clock
    )


def _decided(
    row: RegimeComparison,
    change: Change,
    p_adjusted: float,
    paired_spread: float | None,
    *,
    threshold: float,
    alpha: float,
) -> RegimeComparison:
    """The row with its verdict: the decision rule on the change, its BH p and the noise."""
    from dataclasses import replace

    from perfctl.stats import decision as stats

    assert row.base is not None and row.head is not None
    verdict, reason = stats.decide(
        change,
        p_adjusted,
        threshold=threshold,
        alpha=alpha,
        base_cv=row.base.cv if paired_spread is None else paired_spread,
        head_cv=row.head.cv if paired_spread is None else paired_spread,
    )
    if verdict == INCONCLUSIVE:
        reason += _shape_note(row)
    return replace(
        row,
        verdict=verdict,
        reason=reason,
        change=change.change,
        ci_low=change.ci_low,
        ci_high=change.ci_high,
        p_value=change.p_value,
        p_adjusted=p_adjusted,
    )
