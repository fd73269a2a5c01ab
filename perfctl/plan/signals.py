"""Counter signals beside a plan's wall time: instructions and memory, side by side.

A plan's figures, targets and guards are wall time, so a phase is judged on its
time comparison only. A stored `--measure instructions` or `--measure memory`
comparison of exactly the phase's two commits adds a column to the phase's
result table (its change and verdict per regime), so a reader sees whether the
count moved with the time: shown, never judged. `plan update --signals
instructions,memory` measures the missing ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from perfctl.model import Comparison, RefInfo, RegimeComparison
from perfctl.plan.spec import PLANNED, PlanSpec
from perfctl.render.escape import md_escape
from perfctl.stats.signals import measure_of

if TYPE_CHECKING:
    from perfctl.jobs.compare import CompareSettings

COUNTERS = ("instructions", "memory")


def exact(c: Comparison, before: RefInfo, after: RefInfo) -> bool:
    """Whether ``c`` compares exactly these two commits, neither side dirty."""
    return (c.base.sha, c.head.sha) == (before.sha, after.sha) and not (
        c.base.dirty or c.head.dirty
    )


def stored_signals(
    comparisons: Sequence[Comparison], before: RefInfo | None, after: RefInfo | None
) -> tuple[Comparison, ...]:
    """The newest measured counter comparison of these commits, per counter signal."""
    if before is None or after is None:
        return ()
    out = []
    for m in COUNTERS:
        found = next(
            (
                c
                for c in comparisons
                if measure_of(c) == m and c.measured and exact(c, before, after)
            ),
            None,
        )
        out += [found] if found is not None else []
    return tuple(out)


def heading(c: Comparison) -> str:
    """The column heading of one signal: ``Instructions/op (±0.5%)``."""
    unit = "Instructions/op" if measure_of(c) == "instructions" else "Blocks/op"
    return f"{unit} (±{c.threshold * 100:g}%)"


def cell(c: Comparison, name: str) -> str:
    """A regime's change and verdict in one signal, or ``—`` when it was not measured."""
    rc: RegimeComparison | None = next((r for r in c.regimes if r.name == name), None)
    if rc is None:
        return "—"
    change = f"{rc.change * 100:+.1f}% " if rc.change is not None else ""
    return md_escape(f"{change}{rc.verdict}")


def shas(refs: tuple[RefInfo | None, RefInfo | None]) -> tuple[str, ...]:
    """The shas of a phase's resolved refs."""
    return tuple(r.sha for r in refs if r is not None)


def lacking_signals(
    spec: PlanSpec,
    refs: dict[str, tuple[RefInfo | None, RefInfo | None]],
    beside: dict[str, tuple[Comparison, ...]],
    signals: Sequence[CompareSettings],
) -> list[tuple[str, CompareSettings]]:
    """(phase, settings) of each asked-for signal a started phase has no comparison of."""
    return [
        (p.id, s)
        for p in spec.phases
        if p.status != PLANNED and None not in refs[p.id]
        for s in signals
        if s.schedule.measure not in {measure_of(c) for c in beside[p.id]}
    ]
