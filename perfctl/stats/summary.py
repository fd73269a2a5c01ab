"""One side's summary: the process means, their median, IQR, bootstrap CI and CV.

The process is the unit (see stats/decision.py): every figure here is taken
over per-process means, never over pooled values.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from perfctl.model import SideStats

Processes = Sequence[Sequence[float]]


# Bootstrap resamples for summarize's CI of the median: small Monte-Carlo jitter.
RESAMPLES = 5000


def process_means(processes: Processes) -> np.ndarray:
    """One number per worker process: the mean of its values (empty ones dropped)."""
    # A process with no values (it crashed before its first value) says
    # nothing about speed; dropping it keeps the others usable.
    return np.array([math.fsum(p) / len(p) for p in processes if len(p) > 0], dtype=float)


def process_cv(processes: Processes) -> float:
    """The CV of the process means: what ``summarize`` reports and ``decide`` judges."""
    return _cv(process_means(processes))


def _means_of(processes: Processes, side: str) -> np.ndarray:
    means = process_means(processes)
    if means.size == 0:
        raise ValueError(f"{side}: no process produced a value")
    return means


def _bootstrap_medians(x: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    # One (resamples, n) index matrix: vectorised, no Python loop per resample.
    idx = rng.integers(0, x.size, size=(resamples, x.size))
    return np.median(x[idx], axis=1)


def _percentile_interval(draws: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(draws, [tail, 1.0 - tail])
    return float(low), float(high)


def _cv(x: np.ndarray) -> float:
    # One process (or a counter's mean of 0) cannot show relative spread; 0.0 keeps
    # records JSON-clean, and the n_min rule of decide() refuses one-process sides anyway.
    if x.size < 2 or np.mean(x) == 0:
        return 0.0
    return float(np.std(x, ddof=1) / np.mean(x))


def summarize(
    processes: Processes, *, baseline_median: float | None = None, seed: int = 0
) -> SideStats:
    """Median, IQR, bootstrap 95% CI of the median and CV of the process means."""
    x = _means_of(processes, "summarize")
    boot = _bootstrap_medians(x, np.random.default_rng(seed), RESAMPLES)
    ci_low, ci_high = _percentile_interval(boot, 0.95)
    q1, median, q3 = (float(q) for q in np.quantile(x, [0.25, 0.5, 0.75]))
    ratio = median / baseline_median if baseline_median else None
    return SideStats(median, q1, q3, ci_low, ci_high, _cv(x), int(x.size), ratio)


@dataclass(frozen=True)
class Interval:
    """A run's median per op over its process means, and the interval shown around it."""

    median: float
    low: float
    high: float
    method: str  # "95% CI" (order statistics) or "range" (under 6 processes)


def median_interval(processes: Processes) -> Interval | None:
    """The history chart's figure for one stored run: the median of the process means with a
    distribution-free 95% CI of it (order statistics), or their range under 6 processes.

    Not :func:`summarize`'s bootstrap: a history holds thousands of run × regime points and
    5,000 resamples each would take a minute to draw; the run table and every comparison
    use :func:`summarize`. None when no process produced a value.
    """
    units = sorted(process_means(processes))
    if not units:
        return None
    n = len(units)
    if n < 6:
        return Interval(statistics.median(units), units[0], units[-1], "range")
    # The normal approximation to the binomial count of values below the median.
    half = 1.96 * math.sqrt(n) / 2
    lo = max(1, math.floor(n / 2 - half))
    hi = min(n, math.ceil(n / 2 + half) + 1)
    return Interval(statistics.median(units), units[lo - 1], units[hi - 1], "95% CI")
