"""Paired analysis (Wilcoxon signed-rank, Hodges-Lehmann, Tukey CI) and shape detection."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perfctl.model import NO_CHANGE
from perfctl.stats import decision, paired, shape


def _procs(means: np.ndarray) -> list[list[float]]:
    return [[float(m)] * 3 for m in means]


def test_null_distribution_matches_scipy_exact_p() -> None:
    from scipy import stats as sps  # here: its 0.5 s import would be every worker's

    rng = np.random.default_rng(1)
    d = rng.normal(0.01, 0.02, size=12)
    cdf = paired._signed_rank_null_cdf(12)
    t_plus = float(np.sum(sps.rankdata(np.abs(d))[d > 0]))
    lower = min(t_plus, 12 * 13 / 2 - t_plus)
    expected = float(sps.wilcoxon(d, method="exact").pvalue)
    assert min(1.0, 2 * cdf[int(lower)]) == pytest.approx(expected, rel=1e-9)


def _samples() -> list[np.ndarray]:
    """Pairs as the paired test meets them: few and many, shifted or not, with ties and
    zeros (identical values on both sides), and one value alone."""
    rng = np.random.default_rng(7)
    out = []
    for n in (1, 2, 5, 11, 12, 30, 50, 51, 80):
        for shift in (0.0, 0.01, 0.05):
            out.append(rng.normal(shift, 0.02, size=n))
            out.append(np.round(rng.normal(shift, 0.02, size=n), 2))  # ties and zeros
    out += [np.array([0.0, 0.0, 0.01]), np.array([0.01, -0.01, 0.01, 0.02])]
    return out


def test_signed_rank_p_is_scipys_without_importing_it() -> None:
    from scipy import stats as sps  # only here: perfctl computes the p itself

    for d in _samples():
        exact = paired._exact(d)
        if np.all(d == 0):
            continue
        method = "exact" if exact else "approx"
        kwargs = {} if exact else {"correction": True}
        expected = float(sps.wilcoxon(d, alternative="two-sided", method=method, **kwargs).pvalue)
        assert paired._wilcoxon_p(d, exact) == pytest.approx(expected, rel=1e-9, abs=1e-15), d
    assert paired._wilcoxon_p(np.zeros(4), False) == 1.0


@pytest.mark.parametrize("n", [6, 12, 30, 70])
def test_ci_excludes_zero_exactly_when_p_below_alpha(n: int) -> None:
    rng = np.random.default_rng(n)
    for trial in range(200):
        base = rng.lognormal(0, 0.05, size=n)
        head = base * np.exp(rng.normal(0.01 * (trial % 5), 0.03, size=n))
        c = paired.compare_paired(_procs(base), _procs(head))
        excludes = c.ci_low > 0 or c.ci_high < 0
        if abs(c.p_value - 0.05) > 1e-3:  # the boundary itself is a matter of ties
            assert excludes == (c.p_value < 0.05), (trial, c)


def test_shared_noise_cancels_in_pairs() -> None:
    # Each round's two neighbouring processes share a slowdown (the machine's
    # state at that moment, CV ~30%); the paired analysis sees the true +5%,
    # the unpaired one cannot tell it from that noise.
    from perfctl.stats import decision

    rng = np.random.default_rng(7)
    shared = rng.lognormal(0, 0.3, 30)
    base = 100e-9 * shared * np.exp(rng.normal(0, 0.01, 30))
    head = 105e-9 * shared * np.exp(rng.normal(0, 0.01, 30))
    p = paired.compare_paired(_procs(base), _procs(head))
    u = decision.compare_sides(_procs(base), _procs(head))
    assert 0.03 < p.ci_low and p.ci_high < 0.07 and p.p_value < 1e-4
    assert u.ci_low < 0 < u.ci_high  # unpaired: the bimodal noise hides it
    assert paired.ratio_cv(_procs(base), _procs(head)) < 0.03


def test_coverage_is_nominal_by_simulation() -> None:
    rng = np.random.default_rng(3)
    covered = 0
    trials = 400
    for _ in range(trials):
        base = rng.lognormal(0, 0.05, size=20)
        head = base * 1.03 * np.exp(rng.normal(0, 0.04, size=20))
        c = paired.compare_paired(_procs(base), _procs(head))
        covered += c.ci_low <= 0.03 <= c.ci_high
    assert covered / trials >= 0.92


def stop_paired(
    d: np.ndarray, inside_widening: float, band: float = 0.02
) -> tuple[str, int, decision.Change]:
    """compare's stopping rule over the pair log ratios ``d`` (first look at 10 pairs, then
    one more pair a look, up to all of them) and the verdict it ends with: (verdict, pairs
    used, change). benchmarks/inside_stop.py and stop_resample.py replay it at scale."""
    for n in range(10, d.size + 1):
        c = paired.compare_paired([[1.0]] * n, [[math.exp(x)] for x in d[:n]])
        if decision.is_clear(c, threshold=band, inside_widening=inside_widening):
            break
    sd = float(np.std(d[:n], ddof=1))
    verdict, _ = decision.decide(c, c.p_value, threshold=band, alpha=0.05, base_cv=sd, head_cv=sd)
    return str(verdict), n, c


def paired_run(
    rng: np.random.Generator,
    shift: float,
    spread: float,
    last: int,
    inside_widening: float,
    band: float = 0.02,
) -> tuple[str, int, decision.Change]:
    """:func:`stop_paired` on ``last`` pair log ratios drawn normal about ``log(1 + shift)``
    with SD ``spread``, judged on ``band``."""
    d = math.log1p(shift) + rng.normal(0.0, spread, size=last)
    return stop_paired(d, inside_widening, band)


def test_an_early_stop_inside_the_band_keeps_a_change_at_its_edge_honest() -> None:
    # Looking after every pair, the plain interval wanders below a true +2% at some
    # look far more often than its 2.5% at a fixed size; judged widened 1.3x, the inside
    # stop comes near that 2.5% (benchmarks/inside_stop.py: 7.3% against 3.3% in 1,000
    # runs). These 300 seeds: 19 plain, 10 guarded.
    def below_the_edge(seed: int, widening: float) -> bool:
        verdict, _, c = paired_run(np.random.default_rng(seed), 0.02, 0.035, 37, widening)
        return verdict == NO_CHANGE and c.ci_high < 0.02

    trials = 300
    guarded = sum(below_the_edge(i, decision.INSIDE_WIDENING) for i in range(trials))
    plain = sum(below_the_edge(i, 1.0) for i in range(trials))
    assert guarded <= 13 < plain, (guarded, plain)


def test_too_few_pairs_give_the_full_range_and_no_significance() -> None:
    c = paired.compare_paired(_procs(np.array([1.0, 1.0, 1.0])), _procs(np.array([2, 2.1, 2.2])))
    assert c.p_value > 0.05 and c.ci_low == pytest.approx(1.0) and c.n_base == 3


def test_rounds_missing_a_side_are_dropped() -> None:
    d = paired.pair_log_ratios([[1.0], [], [1.0]], [[2.0], [3.0], []])
    assert d.tolist() == [math.log(2.0)]
    with pytest.raises(ValueError, match="no round"):
        paired.pair_log_ratios([[]], [[1.0]])


def test_bimodal_process_means_are_named() -> None:
    rng = np.random.default_rng(0)
    means = np.concatenate([rng.normal(88, 1.5, 12), rng.normal(170, 3, 8)]) * 1e-9
    found = shape.bimodal(means.tolist())
    assert found is not None and found.n_low == 12 and found.n_high == 8
    assert 85e-9 < found.low < 91e-9 and 160e-9 < found.high < 180e-9
    assert "two groups, 88" in found.describe() and "ns (12)" in found.describe()


@pytest.mark.parametrize(
    "means",
    [
        np.random.default_rng(1).normal(100, 5, 40),  # unimodal noise
        np.concatenate([np.random.default_rng(2).normal(100, 1, 39), [300.0]]),  # one straggler
        np.random.default_rng(3).lognormal(0, 0.3, 40),  # a long tail, not two modes
    ],
)
def test_no_false_bimodality(means: np.ndarray) -> None:
    assert shape.bimodal(means.tolist()) is None


def test_drift_is_found_and_noise_is_not() -> None:
    rng = np.random.default_rng(5)
    rising = 100 * (1 + 0.01 * np.arange(30)) + rng.normal(0, 0.5, 30)
    assert (found := shape.drift(rising.tolist())) is not None and found.rho > 0.8
    assert "rose" in found.describe()
    assert shape.drift(rng.normal(100, 1, 30).tolist()) is None


def test_an_inconclusive_reason_names_two_groups_of_process_means() -> None:
    from perfctl.model import OK, RegimeResult
    from perfctl.stats import verdicts

    rng = np.random.default_rng(11)

    def side(scale: float) -> RegimeResult:
        fast = rng.normal(88e-9, 1e-9, 12) * scale
        slow = rng.normal(170e-9, 3e-9, 8) * scale
        means = rng.permutation(np.concatenate([fast, slow]))
        procs = tuple((float(m), float(m) * 1.01, float(m) * 0.99) for m in means)
        return RegimeResult(
            name="r", family="f", status=OK, processes=procs, order=tuple(range(20))
        )

    row = verdicts.decide_all(
        {"r": {"base": side(1.0), "head": side(1.0)}}, threshold=0.02, alpha=0.05
    )[0]
    assert row.verdict == "inconclusive"
    assert "base: process means fall into two groups, 88" in row.reason
    assert "another job likely shared the CPU" in row.reason


def test_a_drift_over_the_schedule_is_named() -> None:
    rng = np.random.default_rng(4)
    means = 100e-9 * (1 + 0.02 * np.arange(20)) * np.exp(rng.normal(0, 0.005, 20))
    note = shape.describe([(float(m),) for m in means], list(range(20)))
    assert note is not None and "rose steadily" in note


@pytest.mark.parametrize(
    ("base", "head", "default", "expected"),
    [
        ("same-process", "same-process", "process", "same-process"),  # the results say
        ("", "", "same-process", "same-process"),  # older records: the comparison's setting
        ("", "", "auto", "process"),
        ("same-process", "process", "same-process", "process"),  # never pair a stranger
        ("same-process", "", "process", "process"),
    ],
)
def test_each_row_is_analysed_the_way_it_was_measured(
    base: str, head: str, default: str, expected: str
) -> None:
    from perfctl.model import OK, RegimeResult
    from perfctl.stats import verdicts

    rng = np.random.default_rng(3)
    means = 1e-3 * rng.lognormal(0.0, 0.2, 10)
    sides = {
        side: RegimeResult("work", "f", OK, processes=tuple((m * k,) for m in means), pairing=how)
        for side, k, how in (("base", 1.0, base), ("head", 1.05, head))
    }
    (row,) = verdicts.decide_all({"work": sides}, threshold=0.02, alpha=0.05, pairing=default)
    assert row.pairing == expected
    # Paired, the +5% in every process is plain; unpaired, 20% process noise hides it.
    assert (row.verdict == "regressed") == (expected == "same-process")
