"""What the process means look like: two groups (bimodal) or a drift over the schedule.

On a busy machine the mean of a whole worker process depends on whether it
shared its core with another job: within one process the values agree within
a few percent, but the process means fall into two groups (FIELD-NOTES: one
~100 ns call measured ~88 ns or ~170 ns, nothing between). A verdict reason
that names that shape tells the user *why* a result is inconclusive and what
would fix it, where a bare CV does not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from perfctl.stats.ranks import average_ranks

# Each group must hold at least this share of the processes (and 3 of them):
# one slow straggler is an outlier, not a second mode.
MIN_GROUP_SHARE = 0.2
# The gap between the groups' medians must exceed this many times the spread
# inside the groups (median absolute deviation on the log scale, scaled to a
# standard deviation): well-separated modes, not a long tail.
MIN_SEPARATION = 4.0
# ... and be at least this large on the ratio scale: two groups 1% apart are
# not what makes a comparison inconclusive.
MIN_RATIO = 1.10
# Drift: a Spearman correlation of the process means with their position in
# the schedule, significant at this level.
DRIFT_ALPHA = 0.01
MIN_PROCESSES = 8


@dataclass(frozen=True)
class Bimodal:
    """Process means that fall into two groups: their medians and sizes."""

    low: float
    high: float
    n_low: int
    n_high: int

    def describe(self) -> str:
        """A verdict-reason fragment (the medians are seconds per operation)."""
        return (
            f"process means fall into two groups, {seconds(self.low)} ({self.n_low}) and "
            f"{seconds(self.high)} ({self.n_high}): another job likely shared the CPU"
        )


@dataclass(frozen=True)
class Drift:
    """Process means that move steadily over the schedule (Spearman rho and p)."""

    rho: float
    p_value: float

    def describe(self) -> str:
        """A verdict-reason fragment."""
        way = "rose" if self.rho > 0 else "fell"
        return f"process means {way} steadily during the run (Spearman rho {self.rho:+.2f})"


def seconds(x: float) -> str:
    """A time per operation with its unit (3 significant digits)."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if x >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x / 1e-9:.3g} ns"


def describe(processes: Sequence[Sequence[float]], order: Sequence[int]) -> str | None:
    """What the process means of one side look like, when it explains noise; else None."""
    kept = [(o, sum(p) / len(p)) for o, p in zip(order, processes, strict=False) if p]
    means = [m for _, m in kept] or [sum(p) / len(p) for p in processes if p]
    found = bimodal(means)
    if found is not None:
        return found.describe()
    if len(order) == len(processes):
        # ``order`` holds each process's position in the interleaved schedule.
        trend = drift([m for _, m in sorted(kept)])
        if trend is not None:
            return trend.describe()
    return None


def _robust_sd(x: np.ndarray) -> float:
    # 1.4826 x MAD estimates a standard deviation for normal noise.
    return float(1.4826 * np.median(np.abs(x - np.median(x)))) if x.size else 0.0


def bimodal(means: Sequence[float]) -> Bimodal | None:
    """Two well-separated groups of process means, or None.

    Splits the sorted log means at their widest gap (the 1-D two-cluster split
    that matters for "shared a core or not") and keeps the split only when both
    groups are large enough and far apart relative to their own spread.
    """
    x = np.sort(np.log(np.asarray(means, dtype=float)))
    if x.size < MIN_PROCESSES or not np.all(np.isfinite(x)):
        return None
    smallest = max(3, math.ceil(MIN_GROUP_SHARE * x.size))
    gaps = np.diff(x)[smallest - 1 : x.size - smallest]
    if gaps.size == 0:
        return None
    cut = smallest + int(np.argmax(gaps))
    low, high = x[:cut], x[cut:]
    spread = max(_robust_sd(low), _robust_sd(high), 1e-4)
    distance = float(np.median(high) - np.median(low))
    if distance < MIN_SEPARATION * spread or math.exp(distance) < MIN_RATIO:
        return None
    return Bimodal(
        math.exp(float(np.median(low))), math.exp(float(np.median(high))), low.size, high.size
    )


def drift(means_in_schedule_order: Sequence[float]) -> Drift | None:
    """A monotonic trend of the process means over the schedule, or None."""
    y = np.asarray(means_in_schedule_order, dtype=float)
    if y.size < MIN_PROCESSES or np.unique(y).size < 3:
        return None
    rho, p = spearman_against_order(y)
    if math.isnan(p) or p >= DRIFT_ALPHA:
        return None
    return Drift(rho, p)


def spearman_against_order(y: np.ndarray) -> tuple[float, float]:
    """Spearman's rho of ``y`` against 0, 1, 2…, and its two-sided p (scipy's t form)."""
    from scipy import special  # the t tail, without scipy.stats' imports

    n = y.size
    ranks, _ = average_ranks(y)
    rho = float(np.corrcoef(np.arange(n, dtype=float), ranks)[0, 1])
    if abs(rho) >= 1.0:
        return rho, 0.0
    t = rho * math.sqrt((n - 2) / ((1.0 - rho) * (1.0 + rho)))
    return rho, float(2 * special.stdtr(n - 2, -abs(t)))
