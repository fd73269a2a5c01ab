"""Paired analysis of interleaved rounds: Wilcoxon signed-rank on per-round log ratios.

Every round of ``perfctl compare`` runs one base and one head process next to
each other in time (ABBA). Whatever the two neighbours share (another job on
the machine, a frequency step, a noisy hour) moves both alike, so the ratio
head/base *within a round* carries less of that noise than the two sides'
process means taken apart. This module analyses exactly those ratios, as
Chromium's Pinpoint/CABE does:

* one number per round, ``d = log(head_mean / base_mean)``;
* the change is the Hodges-Lehmann estimate of the paired shift: the median of
  the Walsh averages ``(d_i + d_j) / 2, i <= j``, back on the ratio scale;
* its confidence interval is Tukey's interval, which inverts the Wilcoxon
  signed-rank test, so (without ties) the CI excludes 0 exactly when p < 0.05,
  the same consistency the unpaired Moses interval has;
* the p-value is the two-sided Wilcoxon signed-rank test (exact null
  distribution up to ``EXACT_MAX_PAIRS`` pairs without ties or zeros, else the
  normal approximation with tie and continuity correction).

The result is a :class:`~perfctl.stats.decision.Change`, so the verdict rules
of :func:`~perfctl.stats.decision.decide` apply unchanged; ``n_base`` and
``n_head`` are both the number of pairs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from perfctl.stats.decision import Change
from perfctl.stats.ranks import average_ranks, normal_isf
from perfctl.stats.summary import process_means

# scipy computes the exact signed-rank distribution up to 50 pairs; the same
# bound keeps the p-value and the interval on one null distribution.
EXACT_MAX_PAIRS = 50


def pair_log_ratios(
    base_processes: Sequence[Sequence[float]], head_processes: Sequence[Sequence[float]]
) -> np.ndarray:
    """``log(head_mean / base_mean)`` per round; rounds missing a side are dropped.

    ``base_processes[i]`` and ``head_processes[i]`` must be the two processes of
    round ``i`` (the interleaved schedule keeps that order).
    """
    pairs = [(b, h) for b, h in zip(base_processes, head_processes, strict=False) if b and h]
    if not pairs:
        raise ValueError("no round has a value on both sides")
    base = process_means([b for b, _ in pairs])
    head = process_means([h for _, h in pairs])
    if np.any(base <= 0) or np.any(head <= 0):
        raise ValueError("process means must be positive")
    return np.log(head) - np.log(base)


@functools.lru_cache(maxsize=64)
def _signed_rank_null_cdf(n: int) -> np.ndarray:
    """P(T+ <= t), t = 0..n(n+1)/2, for the signed-rank statistic without ties (exact;
    read-only, cached: every sequential look of a regime asks for the same sizes)."""
    # The counts are the coefficients of prod_{i=1..n} (1 + q^i).
    total = n * (n + 1) // 2
    counts = np.zeros(total + 1)
    counts[0] = 1.0
    for i in range(1, n + 1):
        counts[i:] = counts[i:] + counts[: total + 1 - i].copy()
    cdf = np.cumsum(counts) / counts.sum()
    cdf.flags.writeable = False
    return cdf


def _exact(d: np.ndarray) -> bool:
    magnitudes = np.abs(d)
    no_ties = np.unique(magnitudes).size == magnitudes.size
    return d.size <= EXACT_MAX_PAIRS and no_ties and not np.any(d == 0)


def _tukey_rank(d: np.ndarray, confidence: float, exact: bool) -> int:
    """The k of Tukey's interval [w_(k), w_(N+1-k)] of the sorted Walsh averages."""
    n = d.size
    tail = (1.0 - confidence) / 2.0
    if exact:
        # k - 1 = the largest t with P(T+ <= t) <= tail.
        k = int(np.searchsorted(_signed_rank_null_cdf(n), tail * (1.0 + 1e-9), side="right"))
    else:
        _, t = np.unique(np.abs(d[d != 0]), return_counts=True)
        var = n * (n + 1) * (2 * n + 1) / 24.0 - float(np.sum(t**3 - t)) / 48.0
        k = math.floor(n * (n + 1) / 4.0 + 0.5 - normal_isf(tail) * math.sqrt(var))
    # Too few pairs for any interval at this confidence (5 pairs at 95%):
    # the full range, which can never exclude a change either.
    return max(k, 1)


def _wilcoxon_p(d: np.ndarray, exact: bool) -> float:
    """Two-sided Wilcoxon signed-rank p, as scipy's ``wilcoxon`` gives it (zeros dropped;
    ``exact``: the exact null distribution, else the normal approximation with tie and
    continuity correction). Computed here because importing ``scipy.stats`` took ~0.9 s
    in the middle of a comparison's first sequential look (benchmarks/README.md)."""
    nonzero = d[d != 0]
    n = nonzero.size
    if n == 0:
        return 1.0
    ranks, ties = average_ranks(np.abs(nonzero))
    r_plus = float(ranks[nonzero > 0].sum())
    if exact:
        cdf = _signed_rank_null_cdf(n)
        low = float(cdf[math.ceil(r_plus)])  # P(T+ <= t)
        above = math.floor(r_plus)
        high = 1.0 - float(cdf[above - 1]) if above > 0 else 1.0  # P(T+ >= t)
        return min(1.0, 2.0 * min(low, high))
    variance = (n * (n + 1) * (2 * n + 1) - float(np.sum(ties**3 - ties)) / 2.0) / 24.0
    if not variance > 0:
        return 1.0
    se = math.sqrt(variance)
    z = (r_plus - n * (n + 1) / 4.0) / se
    z -= math.copysign(0.5, z) / se if z else 0.0  # continuity, toward 0
    return min(1.0, max(0.0, math.erfc(abs(z) / math.sqrt(2.0))))


def compare_paired(
    base_processes: Sequence[Sequence[float]],
    head_processes: Sequence[Sequence[float]],
    *,
    confidence: float = 0.95,
) -> Change:
    """Hodges-Lehmann paired change, Tukey's CI and the Wilcoxon signed-rank p."""
    d = pair_log_ratios(base_processes, head_processes)
    walsh = np.add.outer(d, d)[np.triu_indices(d.size)] / 2.0
    walsh.sort()
    exact = _exact(d)
    k = _tukey_rank(d, confidence, exact)
    low, high = walsh[k - 1], walsh[walsh.size - k]
    return Change(
        math.expm1(float(np.median(walsh))),
        math.expm1(float(low)),
        math.expm1(float(high)),
        _wilcoxon_p(d, exact),
        int(d.size),
        int(d.size),
    )


def ratio_cv(
    base_processes: Sequence[Sequence[float]], head_processes: Sequence[Sequence[float]]
) -> float:
    """The spread of the per-round ratios (std of the log ratios, ~ CV): the paired noise."""
    d = pair_log_ratios(base_processes, head_processes)
    return float(np.std(d, ddof=1)) if d.size > 1 else 0.0
