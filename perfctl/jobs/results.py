"""What one compared regime becomes: a RegimeResult per side, or the reason it was not measured."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from perfctl.caveats import Caveat, WarningKind
from perfctl.measure import runner
from perfctl.measure.interleave import SIDES, SideData
from perfctl.measure.machine import busy_warning
from perfctl.measure.quiet import Quiet
from perfctl.model import (
    OK,
    REGRESSED,
    Comparison,
    RegimeComparison,
    RegimeInfo,
    RegimeResult,
    Status,
)


def with_load(c: Comparison, readings: list[tuple[float | None, int | None]]) -> Comparison:
    """Record the load average around the measurement; warn when it competed for CPUs.

    ``readings`` are the executor's (load average, CPU count) pairs.
    """
    cpus = next((n for _, n in readings if n), None)
    warning = busy_warning([x for x, _ in readings], cpus)
    seen = [x for x, _ in readings if x is not None]
    span = [min(seen), max(seen)] if seen else None
    return replace(
        c,
        settings={**c.settings, "load_average": span},
        warnings=(*c.warnings, warning) if warning else c.warnings,
    )


def with_quiet(c: Comparison, quiet: Quiet) -> Comparison:
    """Record the seconds held for bursts to pass, and say so when any were."""
    warning = quiet.warning()
    return replace(
        c,
        settings={**c.settings, "burst_held": round(quiet.held, 1)},
        warnings=(*c.warnings, warning) if warning else c.warnings,
    )


def with_limits(c: Comparison) -> Comparison:
    """Warn about regimes over their ``max_peak``, or whose limit this measure cannot check."""
    over = [
        Caveat(f"{r.name}: {r.over_limit} (the regime's memory limit)", WarningKind.OVER_LIMIT)
        for r in c.regimes
        if r.over_limit
    ]
    declared = [r.name for r in c.regimes if r.max_peak is not None]
    unchecked = []
    if declared and c.settings.get("measure", "time") != "memory":
        unchecked = [
            Caveat(
                f"max_peak of {', '.join(declared[:5])}{' …' if len(declared) > 5 else ''} "
                "not checked: only --measure memory measures peak memory",
                WarningKind.LIMIT_NOT_CHECKED,
            )
        ]
    return replace(c, warnings=(*c.warnings, *over, *unchecked)) if over or unchecked else c


def with_confirmed(c: Comparison, rows: Mapping[str, RegimeComparison]) -> Comparison:
    """``c`` with the re-measured rows of ``--confirm`` in place of the regressed ones: a
    regression that did not hold says so in its reason; the comparison says it re-measured."""
    out = []
    for r in c.regimes:
        new = rows.get(r.name)
        if new is not None:  # it took both measurements' time
            new = replace(new, seconds=round(new.seconds + r.seconds, 2))
        if new is not None and new.verdict != REGRESSED:
            new = replace(new, reason=f"regression not confirmed on re-measure ({new.verdict})")
        out.append(new or r)
    said = Caveat(
        f"re-measured {len(rows)} flagged regime(s) with --confirm", WarningKind.CONFIRMED
    )
    return replace(c, regimes=tuple(out), warnings=(*c.warnings, said))


def unmeasurable(
    load_errors: dict[str, str], infos: dict[str, RegimeInfo | None], name: str
) -> dict[str, RegimeResult]:
    """Results for sides that cannot run this regime; empty if both can."""
    out: dict[str, RegimeResult] = {}
    for s in SIDES:
        info = infos[s]
        if info is None:
            reason = load_errors.get(s) or "regime not defined for this ref"
            out[s] = RegimeResult(name=name, family="", status=Status.FAILED, reason=reason)
        elif info.skip_reason:
            out[s] = RegimeResult(
                name=name,
                family=info.family,
                status=Status.SKIPPED,
                reason=info.skip_reason,
                ops=info.ops,
            )
    if not out:
        return {}
    for s in SIDES:
        if s not in out:
            info = infos[s]
            assert info is not None
            out[s] = RegimeResult(
                name=name,
                family=info.family,
                status=Status.SKIPPED,
                ops=info.ops,
                reason="not measured: the other ref cannot run it",
                baseline=info.baseline,
                description=info.description,
            )
    return out


def side_result(
    info: RegimeInfo, d: SideData, log: Path, tmp: Path, side: str, seconds: float = 0.0
) -> RegimeResult:
    """The stored result of one side of a measured regime (``seconds``: its measuring time)."""
    return RegimeResult(
        name=info.name,
        family=info.family,
        status=OK if d.ok else Status.SKIPPED if d.skipped else Status.FAILED,
        ops=info.ops,
        unit=d.unit,
        processes=tuple(d.processes),
        order=tuple(d.order),
        reason=d.reason,
        log_path=str(log),
        baseline=info.baseline,
        description=info.description,
        params=info.params,
        metrics=runner.read_metrics(tmp / f"{side}-metrics.jsonl"),
        loops=d.loops,
        clock=d.clock or info.clock,
        max_peak=info.max_peak,
        threshold=info.threshold,
        pairing=d.pairing,
        seconds=seconds,
    )
