"""The decision procedure of ``perfctl compare`` (change points of a history: stats/history.py).

Why it looks like this (see "How perfctl decides" in the README for the user-facing story):

* **The process is the unit of replication.** Values inside one worker process
  share its memory layout, hash seed and CPU placement, so they are not
  independent; pooling them (as pyperf's t-test and asv do) understates the
  noise and produces the A/A false alarms recorded in FIELD-NOTES. Every test
  here first reduces each process to one number, the mean of its values.
* **Base and head run interleaved (ABBA)**, so slow drift of the machine hits
  both sides alike and cancels instead of masquerading as a change.
* **The change is a Hodges-Lehmann shift.** Its estimate is the median of all
  head/base ratios of process means (a shift of the log means), and its
  confidence interval is the Moses interval, which inverts the Mann-Whitney U
  test. It is ~95% as efficient as the mean for normal noise (the median of
  each side, used before, is 64%), as robust to a stray process as a rank test,
  exact and distribution-free, and consistent with the p-value: the 95% CI
  excludes 0 exactly when p < 0.05.
* **Two-step verdict, as criterion.rs does**: a rank test says whether there is
  any difference at all (Mann-Whitney U, Benjamini-Hochberg-corrected across
  regimes); the confidence interval of the change then has to lie wholly
  beyond the noise band before we call it a change.
* **Noise gets its own verdict.** When nothing is significant and either side
  is too noisy, "no change" would be a claim we cannot back; we say
  "inconclusive", which warns and never fails a build. A noisy side must also
  reach alpha/10 to be significant, because a band dwarfed by the noise no
  longer filters out chance results (on a band below 2%, from five times the band
  on: :mod:`perfctl.stats.band`). The reasons' wording: stats/reasons.py.
* **Sequential sampling** stops once :func:`is_clear` (an early stop on a change
  needs p < alpha/50, alpha/100 below a 2% band, Haybittle-Peto, and a widened CI
  beyond the band, and a p
  that the verdict's own level, alpha or alpha/10, still accepts after the
  correction for the regimes compared, :func:`look_level`; one inside the band, a
  widened CI inside it).

Rates (A/A false verdicts, power) are simulated in tests/test_stats.py. A change
is ``head/base - 1``: a slower head is positive. numpy loads at module top (scipy.stats
never: ranks.py computes both Mann-Whitney p-values); the CLI never imports this
module at start-up.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from perfctl.model import (
    INCONCLUSIVE,
    Verdict,
)
from perfctl.stats import reasons
from perfctl.stats.band import DEFAULT_BAND, narrow, proportional, scaled
from perfctl.stats.change import Change as Change  # re-exported: callers use decision
from perfctl.stats.ranks import (
    mann_whitney_asymptotic,
    mann_whitney_exact,
    normal_isf,
    u_null_cdf,
)
from perfctl.stats.summary import Processes as Processes
from perfctl.stats.summary import _means_of
from perfctl.stats.summary import process_means as process_means
from perfctl.stats.summary import summarize as summarize  # re-exported: callers use decision

# A side noisier than max_cv must reach alpha / 10 to count as significant. With
# alpha / 5 the final test alone spent the 1% that A/A false verdicts may reach,
# and the early looks came on top: 1.1% and 1.4% at CV 15% and 25% (10,000
# simulated 10 -> 60 round runs each); alpha / 10 reads 0.8% and 0.9%
# (benchmarks/README.md, "The noisy side's rate at 10,000 runs").
NOISY_ALPHA_DIVISOR = 10.0
MAX_CV = 0.10  # decide()'s default max_cv; `perfctl run`'s table flags a regime above it

# Stopping early on a change needs p < alpha / 50 (0.001 at the default alpha):
# a Haybittle-Peto boundary. Under A/A, the band alone stops nothing once the
# CI is narrow, so the risk of looking after every round sits in the early,
# wide looks, and most of all in noisy data the band cannot filter; a strict
# level there keeps 10 -> 100 round schedules at <= 1.0% false verdicts at
# CV 12-25% with a noisy side at alpha / 10 (1.7% at alpha / 5; simulated), where
# the final analysis keeps its full alpha.
LOOK_ALPHA_DIVISOR = 50.0
# ... and alpha / 100 on a band narrower than 2% (the ±1% default): the narrower band
# lets more of the early looks' chance results through, and at alpha / 50 A/A false
# verdicts on ±1% read 1.1-1.3% at process CVs of 8-12% (10 -> 80 rounds, simulated;
# with NOISY_ALPHA_DIVISOR applied from five times the band too, 0.7-0.9%).
NARROW_LOOK_ALPHA_DIVISOR = 100.0

# ... and the CI, widened by this factor about the estimate, wholly beyond the
# band. This guards the band edge: a true +2% change ends "regressed" in 5-6%
# of 10 -> 60 round runs at CV 3-5% (2.5% at a fixed size, 8-10% with no
# widening), while a true +5% change keeps most of its early stops.
LOOK_WIDENING = 1.2

# ... and an early stop *inside* the band on the CI widened by this factor about the
# estimate. A 95% interval misses a change at the band's edge in 2.5% of runs at a
# fixed size, but looked at after every round it wanders below the edge at some look
# far more often: a paired +2.0% change at a ratio spread of 3.5% was stopped as
# "no change" with an interval excluding +2% in 7.3% of 10 -> 37 pair runs with the
# plain interval, 3.3% at 1.3x (2.6% at 1.4x), for a median of 30 pairs instead of 22
# under A/A (benchmarks/inside_stop.py; the noisy-machine cells saw 4 of 26). The
# futility stop and the final verdict keep the plain interval (a 95% floor of 2.5%).
INSIDE_WIDENING = 1.3

# Futility stop: after FUTILITY_MIN_N processes a side, a raw p above FUTILITY_P with
# the CI inside +/-FUTILITY_BOUND (the change the defaults are powered for; scaled with
# a wider band) ends sampling as "no change", not the time budget, on a noisy machine.
FUTILITY_MIN_N = 30
FUTILITY_P = 0.2
FUTILITY_BOUND = 0.05


def _log_means(processes: Processes, side: str) -> np.ndarray:
    x = _means_of(processes, side)
    if np.any(x <= 0) or not np.all(np.isfinite(x)):
        raise ValueError(f"{side}: process means must be positive and finite")
    return np.log(x)


def _has_ties(base: np.ndarray, head: np.ndarray) -> bool:
    pooled = np.concatenate((base, head))
    return bool(np.unique(pooled).size < pooled.size)


def _exact_method(base: np.ndarray, head: np.ndarray) -> bool:
    # scipy's own "auto" rule, spelled out so the p-value and the interval
    # always come from the same null distribution, whatever the scipy version.
    return min(base.size, head.size) <= 8 and not _has_ties(base, head)


def _mann_whitney(base: np.ndarray, head: np.ndarray, exact: bool) -> float:
    # Rank-based, so one pathological process cannot drive the p-value.
    if not exact:
        return mann_whitney_asymptotic(base, head)  # same statistic as scipy's, faster
    return mann_whitney_exact(base, head)


def _moses_rank(base: np.ndarray, head: np.ndarray, confidence: float, exact: bool) -> int:
    """The k of the Moses interval [d_(k), d_(mn+1-k)] of the sorted differences.

    The interval is the set of shifts the two-sided Mann-Whitney test at level
    1 - confidence does not reject, so (without ties) it excludes 0 exactly when
    p < 1 - confidence: it uses the same exact or continuity-corrected normal
    distribution, with the same tie correction, as :func:`_mann_whitney`.
    """
    m, n = base.size, head.size
    tail = (1.0 - confidence) / 2.0
    if exact:
        # k - 1 = the largest u with P(U <= u) <= tail.
        k = int(np.searchsorted(u_null_cdf(m, n), tail * (1.0 + 1e-9), side="right"))
    else:
        _, t = np.unique(np.concatenate((base, head)), return_counts=True)
        size = m + n
        ties = float(np.sum(t**3 - t)) / (size * (size - 1))
        sd = math.sqrt(m * n / 12.0 * (size + 1 - ties))
        k = math.floor(m * n / 2.0 + 0.5 - normal_isf(tail) * sd)
    # Too few processes for any interval at this confidence (3 vs 3 at 95%):
    # fall back to the full range of the differences. Such a sample can never
    # be significant either, so it can never be a change.
    return max(k, 1)


def compare_sides(
    base_processes: Processes,
    head_processes: Processes,
    *,
    seed: int = 0,
    confidence: float = 0.95,
) -> Change:
    """Hodges-Lehmann change of log process means, its Moses CI, and a Mann-Whitney p.

    ``seed`` is accepted for compatibility and ignored: the interval is exact
    and distribution-free, with nothing random to seed.
    """
    del seed
    base = _log_means(base_processes, "base")
    head = _log_means(head_processes, "head")
    # All m*n pairwise log ratios head/base; 60 x 60 is 3,600 numbers.
    diffs = np.sort(np.subtract.outer(head, base), axis=None)
    exact = _exact_method(base, head)
    k = _moses_rank(base, head, confidence, exact)
    low, high = diffs[k - 1], diffs[diffs.size - k]
    shift = float(np.median(diffs))
    return Change(
        math.expm1(shift),
        math.expm1(float(low)),
        math.expm1(float(high)),
        _mann_whitney(base, head, exact),
        int(base.size),
        int(head.size),
    )


def benjamini_hochberg(pvalues: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values, in input order (NaN stays NaN)."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.size, np.nan)
    valid = np.flatnonzero(~np.isnan(p))
    order = valid[np.argsort(p[valid], kind="stable")]
    scaled = p[order] * order.size / np.arange(1, order.size + 1)
    # Step-up: each adjusted p is the smallest scaled p at its rank or above.
    out[order] = np.minimum(np.minimum.accumulate(scaled[::-1])[::-1], 1.0)
    return [float(v) for v in out]


def decide(
    change: Change,
    p_adjusted: float,
    *,
    threshold: float,
    alpha: float,
    base_cv: float,
    head_cv: float,
    max_cv: float = MAX_CV,
    n_min: int = 3,
) -> tuple[Verdict, str]:
    """The (verdict, reason) for one regime; see the module and README for the rules.

    - Too few processes on a side: INCONCLUSIVE; a CV or a rank test from two
      processes is meaningless.
    - ``p_adjusted < alpha`` and the CI wholly beyond +threshold (-threshold):
      REGRESSED (IMPROVED). Both steps are needed: significance alone flags
      0.3% shifts nobody can act on, the band alone trusts a lucky interval.
    - Significant otherwise: WITHIN_NOISE (real but smaller than the band, or
      straddling its edge).
    - A side's CV above ``max_cv`` (scaled up with a band wider than 2%,
      :mod:`perfctl.stats.band`): significance needs ``alpha / 10``, because
      noise that dwarfs the band leaves the test alone to stop false alarms;
      short of that, INCONCLUSIVE ("too noisy"), as a missing signal in that
      much noise is no evidence of absence.
    - On a band narrower than 2%, a side's CV above ``max_cv`` scaled down to it
      (five times the band) also needs ``alpha / 10``; a p between that and
      ``alpha`` is INCONCLUSIVE, a larger one is judged as below.
    - Not significant yet the CI wholly beyond the band: INCONCLUSIVE.
    - Otherwise NO_CHANGE.
    """
    few = reasons.too_few(change, n_min)
    if few:
        return INCONCLUSIVE, few
    noisy = reasons.too_noisy(base_cv, head_cv, scaled(max_cv, threshold))  # set for the 2% band
    # When noise dwarfs the band, the band stops filtering chance results and
    # the test alone decides; a stricter level keeps A/A false verdicts <= 1%.
    dwarfed = _dwarfed(base_cv, head_cv, threshold, max_cv)  # includes every noisy side
    level = alpha / NOISY_ALPHA_DIVISOR if dwarfed else alpha
    if p_adjusted < level:
        return reasons.significant(change, p_adjusted, threshold)
    if dwarfed and not noisy and p_adjusted < alpha:
        return INCONCLUSIVE, reasons.dwarfed(dwarfed, p_adjusted, threshold, level)
    return reasons.not_significant(change, p_adjusted, threshold, noisy, alpha, level)


def _dwarfed(base_cv: float, head_cv: float, threshold: float, max_cv: float) -> str:
    """The sides whose CV asks alpha / 10 on the ``threshold`` band: over ``max_cv``
    scaled to it both ways (so over the "too noisy" limit too); empty when neither."""
    return reasons.noisy_sides(base_cv, head_cv, proportional(max_cv, threshold))


def is_noisy(base_cv: float, head_cv: float, threshold: float = DEFAULT_BAND) -> bool:
    """Whether decide() asks ``alpha / 10`` of these CVs on the ``threshold`` band: a CV
    above MAX_CV, scaled up to a wider band and down to a narrower one."""
    return bool(_dwarfed(base_cv, head_cv, threshold, MAX_CV))


def look_level(
    alpha: float, *, family: int = 1, noisy: bool = False, band: float = DEFAULT_BAND
) -> float:
    """The raw p an early stop on a change needs: ``alpha / LOOK_ALPHA_DIVISOR`` (``alpha /
    NARROW_LOOK_ALPHA_DIVISOR`` on a ``band`` below 2%), and also the verdict's own level
    (``alpha``, or ``alpha / NOISY_ALPHA_DIVISOR`` in noisy data) after a Bonferroni
    correction for the ``family`` regimes compared (Benjamini-Hochberg never adjusts
    more), so that a change sampling stopped on is not then left inconclusive by the
    correction (on ±2%: noisy data among more than 5 regimes, quiet data among more
    than 50; below 2%: more than 10 and 100)."""
    final = alpha / NOISY_ALPHA_DIVISOR if noisy else alpha
    look = NARROW_LOOK_ALPHA_DIVISOR if narrow(band) else LOOK_ALPHA_DIVISOR
    return min(alpha / look, final / max(family, 1))


def is_clear(
    change: Change,
    *,
    threshold: float,
    alpha: float = 0.05,
    n_min: int = 3,
    futility: bool = True,
    family: int = 1,
    noisy: bool = False,
    inside_widening: float = INSIDE_WIDENING,
) -> bool:
    """Whether more rounds would not change the answer, so sampling can stop.

    True once the CI, widened by ``inside_widening`` about the estimate, lies
    wholly inside the noise band; or once the CI widened by ``LOOK_WIDENING``
    lies wholly beyond it with a raw p below :func:`look_level` (0.001 on ±2%, 0.0005
    below it, less in noisy data among more than five or ten regimes); or at the
    futility stop. The runner looks after every round, and stopping at the first lucky look would
    multiply wrong answers: false verdicts under A/A (simulated 10 -> 60 rounds:
    up to 3.6% with the plain 95% CI and p < alpha, <= 1.0% with these guards and
    a noisy side at alpha / 10), and "no change" with an interval that excludes
    a change at the band's edge (see ``INSIDE_WIDENING``).
    """
    if any(n is not None and n < n_min for n in (change.n_base, change.n_head)):
        return False
    low, high = _widened(change, inside_widening)
    if -threshold < low and high < threshold:
        return True
    if futility and _futile(change, scaled(FUTILITY_BOUND, threshold)):
        return True
    low, high = _widened(change, LOOK_WIDENING)
    beyond = low > threshold or high < -threshold
    level = look_level(alpha, family=family, noisy=noisy, band=threshold)
    return beyond and change.p_value < level


def _widened(change: Change, factor: float) -> tuple[float, float]:
    """The CI stretched by ``factor`` about the estimate (each side keeps its skew)."""
    low = change.change - factor * (change.change - change.ci_low)
    return low, change.change + factor * (change.ci_high - change.change)


def _futile(change: Change, bound: float) -> bool:
    """Whether more rounds are very unlikely to turn up a change beyond ``bound``."""
    if change.n_base is None or change.n_head is None:
        return False
    return (
        min(change.n_base, change.n_head) >= FUTILITY_MIN_N
        and change.p_value > FUTILITY_P
        and -bound < change.ci_low
        and change.ci_high < bound
    )
