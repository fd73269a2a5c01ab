"""Several signals of one pair of refs, side by side: one verdict per signal per regime.

``compare --measure time,instructions,memory`` measures each signal in its own
processes (never one under the other's instrumentation) and stores one
Comparison per signal; this module lines their verdicts up by regime and says,
for a regime that only some signals flag, which ones. Nothing is re-decided
here: each cell is the stored verdict of its own comparison.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from perfctl.model import IMPROVED, REGRESSED, Comparison, RegimeComparison, Verdict
from perfctl.stats.band import own_band

FLAGS = (REGRESSED, IMPROVED)


@dataclass(frozen=True)
class SignalCell:
    """One signal's verdict and change for one regime."""

    measure: str
    verdict: Verdict
    change: float | None
    unit: str
    band: float | None = None  # the regime's own noise band, where it is not the column's


@dataclass(frozen=True)
class SignalRow:
    """One regime across the signals (``None`` where a signal did not have it)."""

    name: str
    cells: tuple[SignalCell | None, ...]

    @property
    def flagged(self) -> tuple[SignalCell, ...]:
        """The signals that found a change (regressed or improved)."""
        return tuple(c for c in self.cells if c is not None and c.verdict in FLAGS)

    def note(self) -> str | None:
        """Which signals flag the regime, when not all of them agree; else None."""
        flagged = self.flagged
        present = [c for c in self.cells if c is not None]
        if not flagged or (len(flagged) == len(present) and _same(flagged)):
            return None
        if not _same(flagged):
            told = ", ".join(f"{c.measure} {c.verdict}" for c in flagged)
            return f"{self.name}: the signals disagree: {told}"
        rest = ", ".join(f"{c.measure}: {c.verdict}" for c in present if c not in flagged)
        which = " and ".join(c.measure for c in flagged)
        return f"{self.name}: {flagged[0].verdict} by {which} only ({rest})"


def _same(cells: Sequence[SignalCell]) -> bool:
    return len({c.verdict for c in cells}) == 1


def measure_of(c: Comparison) -> str:
    """The signal a stored comparison measured (``time`` unless it says otherwise)."""
    return str(c.settings.get("measure") or "time")


def _cell(c: Comparison, r: RegimeComparison) -> SignalCell:
    own = own_band(r.threshold, c.threshold)
    return SignalCell(measure_of(c), r.verdict, r.change, r.unit, own)


def side_by_side(comparisons: Sequence[Comparison]) -> tuple[SignalRow, ...]:
    """Every regime of any signal, in first-seen order, with each signal's cell."""
    names: dict[str, None] = {}  # first-seen order, without a quadratic membership test
    by_signal = []
    for c in comparisons:
        rows = {r.name: r for r in c.sorted_regimes()}
        names.update(dict.fromkeys(rows))
        by_signal.append((c, rows))
    return tuple(
        SignalRow(n, tuple(_cell(c, rows[n]) if n in rows else None for c, rows in by_signal))
        for n in names
    )


def notes(rows: Sequence[SignalRow]) -> list[str]:
    """One line per regime flagged by some signals but not all (or flagged both ways)."""
    return [n for r in rows if (n := r.note()) is not None]
