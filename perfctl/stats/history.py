"""Change points of a stored history: where a regime's median shifts level.

Used by the history report's flags; kept apart from the decision rule of
``perfctl compare`` (stats/decision.py), which judges one interleaved comparison.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

# Log-scale noise below 0.1% is below what any benchmark resolves; without a
# floor a noise-free series would make every rounding error a change point.
_SIGMA_FLOOR = 1e-3

# Default change-point penalty, in units of the noise variance times ln(n).
# Calibrated by simulation (Gaussian and t4 noise): flat series get a false
# change point in <= 5% of cases at 6 points and ~0% from 50; a mid-series
# 4-sigma step is found ~80% of the time in 10 points and ~99% from 20.
_PENALTY_PER_LOG_N = 5.0

# E|d| over the smallest 80% of |d| for d ~ N(0, 2 sigma^2), in units of sigma:
# sqrt(2) * 2 * (pdf(0) - pdf(ppf(0.9))) / 0.8.
_TRIMMED_ABS_DIFF = math.sqrt(2.0) * 0.55861

_CLIP_SIGMAS = 4.0


def _noise_sigma(y: np.ndarray) -> float:
    # Successive differences cancel the level, so a shift moves one difference
    # only; dropping the largest 20% removes it, and a trimmed mean is far
    # steadier than the MAD on the 5-20 points a history often has.
    d = np.sort(np.abs(np.diff(y)))
    kept = d[: max(1, math.ceil(0.8 * d.size))]
    return max(float(kept.mean()) / _TRIMMED_ABS_DIFF, _SIGMA_FLOOR)


def _clip_outliers(y: np.ndarray, sigma: float) -> np.ndarray:
    # One bad run (a busy CI host) must not become a two-point "segment": clip
    # to 4 sigma around a running median of 5, which follows real steps.
    half = 2
    windows = sliding_window_view(np.pad(y, half, mode="edge"), 2 * half + 1)
    centre = np.median(windows, axis=1)
    return np.clip(y, centre - _CLIP_SIGMAS * sigma, centre + _CLIP_SIGMAS * sigma)


def _segment_costs(s1: np.ndarray, s2: np.ndarray, starts: np.ndarray, end: int) -> np.ndarray:
    # Sum of squared deviations from the segment mean, from prefix sums.
    n = end - starts
    total = s1[end] - s1[starts]
    return s2[end] - s2[starts] - total * total / n


def _optimal_partition(y: np.ndarray, min_size: int, beta: float) -> list[int]:
    # Exact penalised segmentation (the search PELT prunes); O(n^2) but
    # vectorised per end point, and history series are short.
    s1 = np.concatenate(([0.0], np.cumsum(y)))
    s2 = np.concatenate(([0.0], np.cumsum(y * y)))
    best = np.full(y.size + 1, np.inf)
    best[0] = -beta
    last = np.zeros(y.size + 1, dtype=int)
    for end in range(min_size, y.size + 1):
        starts = np.arange(0, end - min_size + 1)
        costs = best[starts] + _segment_costs(s1, s2, starts, end) + beta
        k = int(np.argmin(costs))
        last[end], best[end] = starts[k], costs[k]
    return _backtrack(last)


def _backtrack(last: np.ndarray) -> list[int]:
    points: list[int] = []
    end = last.size - 1
    while end > 0:
        end = int(last[end])
        points.append(end)
    return sorted(p for p in points if p > 0)


def change_points(
    medians: Sequence[float], *, min_size: int = 2, penalty: float | None = None
) -> list[int]:
    """Indices where a level shift starts in a time series of medians.

    Optimal partitioning of the log medians under squared error, each extra
    segment costing ``penalty`` times the noise variance (robustly estimated);
    ``penalty`` defaults to 5 ln(n). Points beyond 4 sigma of a running median
    are clipped first, so single bad runs do not mark shifts. Logs make a 5%
    step the same size at 1 µs and at 1 s; scaling by the noise makes the
    penalty unit-free.
    """
    values = np.asarray(medians, dtype=float)
    if np.any(values <= 0) or not np.all(np.isfinite(values)):
        raise ValueError("change_points needs positive, finite medians")
    if values.size < 2 * max(min_size, 1):
        return []
    y = np.log(values)
    y = y - y.mean()  # centring keeps the prefix sums of squares accurate
    sigma = _noise_sigma(y)
    scale = _PENALTY_PER_LOG_N * math.log(y.size) if penalty is None else penalty
    return _optimal_partition(_clip_outliers(y, sigma), max(min_size, 1), scale * sigma**2)
