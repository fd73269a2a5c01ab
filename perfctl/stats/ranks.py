"""Mann-Whitney U's large-sample p-value without scipy's per-call overhead.

The sequential stopping rule looks after every round, so a comparison calls the
rank test dozens of times per regime; scipy's ``mannwhitneyu`` spends about
three quarters of each call validating and broadcasting its inputs. This is the
same statistic (average ranks for ties, tie-corrected variance, continuity
correction, two-sided) that ``mannwhitneyu(method="asymptotic")`` computes;
the exact small-sample p comes from the same null distribution the Moses
interval uses. ``tests/test_stats.py`` checks both against scipy. Keeping
``scipy.stats`` out also keeps ~0.7 s of imports out of every command that
decides a verdict.
"""

from __future__ import annotations

import functools
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


@functools.lru_cache(maxsize=256)
def u_null_cdf(m: int, n: int) -> np.ndarray:
    """P(U <= u), u = 0..mn, for Mann-Whitney U without ties (exact; read-only, cached).

    The p-value and the Moses interval of every sequential look ask for the same
    sizes, so each (m, n) is computed once.
    """
    # The counts are the coefficients of the Gaussian binomial [m+n, m]_q =
    # prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i): multiply by (1 - q^(n+i)),
    # then divide by (1 - q^i), a running sum at stride i. Used only when one
    # side has <= 8 processes, so m is small; floats keep large n from overflowing.
    m, n = min(m, n), max(m, n)
    counts = np.zeros(m * n + 1)
    counts[0] = 1.0
    for i in range(1, m + 1):
        counts[n + i :] -= counts[: counts.size - n - i].copy()
        for r in range(i):
            counts[r::i] = np.cumsum(counts[r::i])
    cdf = np.cumsum(counts) / counts.sum()
    cdf.flags.writeable = False  # shared by every caller through the cache
    return cdf


def mann_whitney_exact(base: np.ndarray, head: np.ndarray) -> float:
    """Two-sided p of Mann-Whitney U from its exact null distribution (samples without ties)."""
    m, n = base.size, head.size
    ranks, _ = average_ranks(np.concatenate((base, head)))
    u1 = float(ranks[:m].sum()) - m * (m + 1) / 2.0
    # The distribution is symmetric: P(U >= max(U1, U2)) = P(U <= min(U1, U2)).
    smaller = round(min(u1, m * n - u1))
    return min(1.0, 2.0 * float(u_null_cdf(m, n)[smaller]))


def normal_isf(tail: float) -> float:
    """The standard normal quantile with ``tail`` above it (scipy's ``norm.isf``)."""
    from statistics import NormalDist

    return NormalDist().inv_cdf(1.0 - tail)
