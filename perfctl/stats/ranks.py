"""Mann-Whitney U's large-sample p-value without scipy's per-call overhead.

The sequential stopping rule looks after every round, so a comparison calls the
rank test dozens of times per regime; scipy's ``mannwhitneyu`` spends about
three quarters of each call validating and broadcasting its inputs. This is the
same statistic (average ranks for ties, tie-corrected variance, continuity
correction, two-sided) that ``mannwhitneyu(method="asymptotic")`` computes;
``tests/test_stats.py`` checks that they agree. The exact small-sample test
stays with scipy.
"""

from __future__ import annotations

import math

import numpy as np


def average_ranks(pooled: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ranks 1..n with ties given their average rank, and the size of each tie group."""
    _, inverse, counts = np.unique(pooled, return_inverse=True, return_counts=True)
    upper = np.cumsum(counts)
    return (upper - (counts - 1) / 2.0)[inverse], counts


def mann_whitney_asymptotic(base: np.ndarray, head: np.ndarray) -> float:
    """Two-sided p of Mann-Whitney U, normal approximation with continuity correction."""
    m, n = base.size, head.size
    ranks, ties = average_ranks(np.concatenate((base, head)))
    u1 = float(ranks[:m].sum()) - m * (m + 1) / 2.0
    u = max(u1, m * n - u1)
    size = m + n
    tie_term = float(np.sum(ties.astype(float) ** 3 - ties)) / (size * (size - 1))
    variance = m * n / 12.0 * (size + 1 - tie_term)
    if not variance > 0:
        return 1.0  # every value tied: no evidence either way (scipy gives NaN)
    z = (u - m * n / 2.0 - 0.5) / math.sqrt(variance)
    return min(1.0, max(0.0, math.erfc(z / math.sqrt(2.0))))
