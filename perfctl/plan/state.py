"""The judged state of a plan's phases: what update.py decides and blocks.py writes."""

from __future__ import annotations

from dataclasses import dataclass

from perfctl.model import Comparison, RefInfo, RegimeComparison
from perfctl.plan.spec import Check, Phase


@dataclass(frozen=True)
class Row:
    """One regime row of a phase's result table."""

    name: str
    rc: RegimeComparison | None
    checks: tuple[Check, ...]
    primary: bool


@dataclass(frozen=True)
class PhaseState:
    """A phase with its resolved refs, its stored comparison and its judged rows."""

    phase: Phase
    status: str
    before: RefInfo | None
    after: RefInfo | None
    comparison: Comparison | None
    rows: tuple[Row, ...]
    note: str = ""  # why there are no results, when there are none
    # Counter comparisons of the same commits, shown beside the time (plan/signals.py).
    signals: tuple[Comparison, ...] = ()
