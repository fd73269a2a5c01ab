"""The decision procedure of `perfctl compare`, on synthetic data.

The simulations mimic FIELD-NOTES' noise floor: a per-process random level
(memory layout, CPU placement), a slow random-walk drift of the machine shared
by both sides through ABBA interleaving, and 3 values per process.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from perfctl import stats
from perfctl.model import IMPROVED, INCONCLUSIVE, NO_CHANGE, REGRESSED, WITHIN_NOISE

Processes = list[tuple[float, ...]]
FALSE_VERDICTS = (REGRESSED, IMPROVED)


def simulate(
    rng: np.random.Generator, n: int, *, shift: float = 0.0, cv: float = 0.04
) -> tuple[Processes, Processes]:
    """n base and n head processes run ABBA; ``cv`` is that of process means."""
    slots = 2 * n
    is_base = np.isin(np.arange(slots) % 4, (0, 3))  # A B B A A B B A ...
    drift = np.cumsum(rng.normal(0.0, 0.002, slots))
    # 64% of the process-mean variance is between processes, 36% within.
    level = 1e-4 * np.exp(drift + rng.normal(0.0, 0.8 * cv, slots))
    level[~is_base] *= 1.0 + shift
    values = level[:, None] * np.exp(rng.normal(0.0, 0.6 * cv * math.sqrt(3), (slots, 3)))
    procs = [tuple(float(v) for v in row) for row in values]
    base = [p for p, b in zip(procs, is_base, strict=True) if b]
    head = [p for p, b in zip(procs, is_base, strict=True) if not b]
    return base, head


def verdict_of(base: Processes, head: Processes, seed: int = 0) -> str:
    """The verdict for one regime compared alone (so p_adjusted = p)."""
    change = stats.compare_sides(base, head, seed=seed)
    return stats.decide(
        change,
        change.p_value,
        threshold=0.02,
        alpha=0.05,
        base_cv=stats.summarize(base, seed=seed).cv,
        head_cv=stats.summarize(head, seed=seed).cv,
    )[0]


def change(
    mid: float, low: float, high: float, p: float = 0.001, n: int | None = 20
) -> stats.Change:
    return stats.Change(mid, low, high, p, n, n)


# --- reduction and summaries -------------------------------------------------


def test_process_means_reduce_each_process_and_drop_empty_ones() -> None:
    means = stats.process_means([(1.0, 3.0), (), (2.0, 2.0, 5.0)])
    assert means.tolist() == [2.0, 3.0]


def test_summarize_reports_median_iqr_ci_and_cv_of_process_means() -> None:
    procs = [(v, v) for v in (1.0, 2.0, 3.0, 4.0, 5.0)]
    s = stats.summarize(procs, baseline_median=2.0)
    assert (s.median_s, s.q1_s, s.q3_s) == (3.0, 2.0, 4.0)
    assert s.ci_low_s <= s.median_s <= s.ci_high_s
    assert 1.0 <= s.ci_low_s and s.ci_high_s <= 5.0
    assert s.cv == pytest.approx(np.std([1, 2, 3, 4, 5], ddof=1) / 3.0)
    assert s.n_processes == 5
    assert s.baseline_ratio == 1.5


def test_summarize_without_baseline_and_with_one_process() -> None:
    s = stats.summarize([(2.0, 4.0)])
    assert (s.median_s, s.cv, s.n_processes, s.baseline_ratio) == (3.0, 0.0, 1, None)


def test_empty_sides_are_refused() -> None:
    with pytest.raises(ValueError, match="head: no process produced a value"):
        stats.compare_sides([(1.0,)], [()])
    with pytest.raises(ValueError):
        stats.summarize([])


# --- compare_sides -------------------------------------------------------------


def test_known_slowdown_is_regressed() -> None:
    base, head = simulate(np.random.default_rng(1), 20, shift=0.10, cv=0.03)
    c = stats.compare_sides(base, head)
    assert 0.06 < c.change < 0.14
    assert 0.02 < c.ci_low < c.change < c.ci_high
    assert c.p_value < 0.001
    assert (c.n_base, c.n_head) == (20, 20)
    assert verdict_of(base, head) == REGRESSED


def test_known_speedup_is_improved() -> None:
    base, head = simulate(np.random.default_rng(2), 20, shift=-0.10, cv=0.03)
    assert verdict_of(base, head) == IMPROVED


def test_change_is_relative_change_of_medians() -> None:
    base = [(1.0,), (2.0,), (3.0,)]
    head = [(2.0, 4.0), (6.0,), (4.0,)]
    assert stats.compare_sides(base, head).change == pytest.approx(1.0)


def test_compare_sides_is_deterministic_for_a_seed() -> None:
    base, head = simulate(np.random.default_rng(3), 15)
    assert stats.compare_sides(base, head, seed=7) == stats.compare_sides(base, head, seed=7)
    np.random.seed(99)  # the global numpy state must not matter
    assert stats.compare_sides(base, head, seed=7) == stats.compare_sides(base, head, seed=7)
    assert stats.summarize(base, seed=7) == stats.summarize(base, seed=7)


def test_higher_confidence_gives_a_wider_interval() -> None:
    base, head = simulate(np.random.default_rng(4), 15)
    narrow = stats.compare_sides(base, head, confidence=0.80)
    wide = stats.compare_sides(base, head, confidence=0.99)
    assert wide.ci_low < narrow.ci_low < narrow.ci_high < wide.ci_high


def test_small_samples_use_the_exact_mann_whitney_distribution() -> None:
    # 4 vs 4 wholly separated: exact two-sided p = 2 / C(8, 4).
    c = stats.compare_sides([(1.0,), (1.1,), (1.2,), (1.3,)], [(2.0,), (2.1,), (2.2,), (2.3,)])
    assert c.p_value == pytest.approx(2 / 70)


# --- Benjamini-Hochberg ------------------------------------------------------------


def test_benjamini_hochberg_matches_a_hand_computed_example() -> None:
    # Sorted p: .005 .01 .03 .04 .20, m = 5 -> p*m/rank: .025 .025 .05 .05 .20;
    # step-up minimum from the top leaves them as they are.
    adjusted = stats.benjamini_hochberg([0.01, 0.04, 0.03, 0.005, 0.20])
    assert adjusted == pytest.approx([0.025, 0.05, 0.05, 0.025, 0.20])


def test_benjamini_hochberg_is_monotone_and_capped() -> None:
    # p * m / rank, then a running minimum from the largest p down, capped at 1.
    assert stats.benjamini_hochberg([0.01, 0.03, 0.028]) == pytest.approx([0.03] * 3)
    assert stats.benjamini_hochberg([0.02, 0.5, 0.9]) == pytest.approx([0.06, 0.75, 0.9])
    assert stats.benjamini_hochberg([0.9, 0.95]) == pytest.approx([0.95, 0.95])
    assert stats.benjamini_hochberg([0.6, 1.0, 0.7]) == pytest.approx([1.0, 1.0, 1.0])


def test_benjamini_hochberg_edge_cases() -> None:
    assert stats.benjamini_hochberg([]) == []
    assert stats.benjamini_hochberg([0.03]) == [0.03]
    out = stats.benjamini_hochberg([0.01, float("nan"), 0.04])
    assert out[0] == pytest.approx(0.02) and math.isnan(out[1]) and out[2] == pytest.approx(0.04)


# --- decide ------------------------------------------------------------------------


def decide(
    c: stats.Change, p_adj: float = 0.001, cvs: tuple[float, float] = (0.03, 0.03)
) -> tuple[str, str]:
    return stats.decide(c, p_adj, threshold=0.02, alpha=0.05, base_cv=cvs[0], head_cv=cvs[1])


def test_regressed_and_improved_need_significance_and_the_ci_beyond_the_band() -> None:
    assert decide(change(0.05, 0.03, 0.07)) == (
        REGRESSED,
        "slower: +5.0% [+3.0%, +7.0%] beyond the 2% noise band (adjusted p=0.001)",
    )
    assert decide(change(-0.05, -0.07, -0.03))[0] == IMPROVED


def test_significant_but_within_the_noise_band() -> None:
    assert decide(change(0.013, 0.004, 0.025)) == (
        WITHIN_NOISE,
        "significant but within the 2% noise band (+1.3% [+0.4%, +2.5%])",
    )
    assert decide(change(0.03, 0.02, 0.04))[0] == WITHIN_NOISE  # ci_low on the edge
    assert decide(change(-0.01, -0.015, -0.005))[0] == WITHIN_NOISE


def test_not_significant_is_no_change() -> None:
    verdict, reason = decide(change(0.003, -0.019, 0.024), p_adj=0.62)
    assert verdict == NO_CHANGE
    assert reason == "no change detected (+0.3% [-1.9%, +2.4%], adjusted p=0.62)"


def test_too_noisy_is_inconclusive_not_no_change() -> None:
    verdict, reason = decide(change(0.01, -0.08, 0.10), p_adj=0.4, cvs=(0.04, 0.14))
    assert verdict == INCONCLUSIVE
    assert reason == "too noisy: head CV 14% (limit 10%); adjusted p=0.4"
    _, both = decide(change(0.01, -0.08, 0.10), p_adj=0.4, cvs=(0.12, 0.14))
    assert both.startswith("too noisy: base CV 12%, head CV 14%")


def test_noisy_sides_need_a_stricter_level() -> None:
    wide = change(0.30, 0.10, 0.50)
    assert decide(wide, p_adj=0.03, cvs=(0.15, 0.15))[0] == INCONCLUSIVE
    assert decide(wide, p_adj=0.03, cvs=(0.05, 0.05))[0] == REGRESSED
    assert decide(wide, p_adj=0.001, cvs=(0.15, 0.15))[0] == REGRESSED


def test_too_few_processes_is_inconclusive() -> None:
    c = stats.Change(0.5, 0.4, 0.6, 0.001, 2, 10)
    assert decide(c) == (
        INCONCLUSIVE,
        "too few processes: base 2, head 10 (need at least 3 per side)",
    )
    unknown = stats.Change(0.5, 0.4, 0.6, 0.001)  # rebuilt from a record without counts
    assert decide(unknown)[0] == REGRESSED


def test_beyond_the_band_but_not_significant_is_inconclusive() -> None:
    # 3 vs 3 processes can never reach p < 0.05 with a rank test.
    base = [(1.0,), (1.01,), (1.02,)]
    head = [(1.30,), (1.31,), (1.32,)]
    c = stats.compare_sides(base, head)
    assert c.p_value == pytest.approx(0.1)
    verdict, reason = decide(c, p_adj=c.p_value)
    assert verdict == INCONCLUSIVE and reason.endswith("run more processes")


def test_too_few_processes_from_real_sides() -> None:
    verdict = verdict_of([(1.0, 1.0), (1.1, 1.1)], [(1.0,), (1.0,), (1.1,)])
    assert verdict == INCONCLUSIVE


# --- is_clear ----------------------------------------------------------------------


def test_is_clear_inside_or_well_beyond_the_band() -> None:
    assert stats.is_clear(change(0.0, -0.01, 0.01, p=0.9), threshold=0.02)
    assert stats.is_clear(change(0.10, 0.08, 0.12), threshold=0.02)
    assert stats.is_clear(change(-0.10, -0.12, -0.08), threshold=0.02)


def test_is_clear_not_while_the_answer_could_change() -> None:
    assert not stats.is_clear(change(0.02, 0.01, 0.03), threshold=0.02)  # straddles the edge
    assert not stats.is_clear(change(0.0, -0.03, 0.03, p=0.9), threshold=0.02)  # too wide
    assert not stats.is_clear(change(0.10, 0.08, 0.12, p=0.2), threshold=0.02)  # not significant
    assert not stats.is_clear(change(0.10, 0.08, 0.12, n=2), threshold=0.02)  # too few
    # Beyond at 95% but not once widened for repeated looks: 0.05 - 1.43 * 0.025 < 0.02.
    assert not stats.is_clear(change(0.05, 0.025, 0.075), threshold=0.02)


# --- simulations -------------------------------------------------------------------


def test_aa_false_verdicts_stay_below_two_percent() -> None:
    rng = np.random.default_rng(2026)
    verdicts = [verdict_of(*simulate(rng, 10, cv=0.04), seed=i) for i in range(200)]
    false_rate = sum(v in FALSE_VERDICTS for v in verdicts) / len(verdicts)
    assert false_rate <= 0.02
    assert verdicts.count(NO_CHANGE) / len(verdicts) >= 0.85


def test_five_percent_slowdown_is_found_with_60_processes_at_3_percent_cv() -> None:
    rng = np.random.default_rng(5)
    verdicts = [verdict_of(*simulate(rng, 60, shift=0.05, cv=0.03), seed=i) for i in range(200)]
    assert verdicts.count(REGRESSED) / len(verdicts) >= 0.95


def sequential_verdict(base: Processes, head: Processes, seed: int) -> tuple[str, int]:
    """The runner's schedule: 10 rounds, then one more until clear or 30."""
    for n in range(10, len(base) + 1):
        if stats.is_clear(stats.compare_sides(base[:n], head[:n], seed=seed), threshold=0.02):
            break
    return verdict_of(base[:n], head[:n], seed=seed), n


def test_sequential_sampling_keeps_aa_false_verdicts_below_two_percent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(stats, "RESAMPLES", 1000)  # the stopping rule, not CI precision
    rng = np.random.default_rng(11)
    runs = [sequential_verdict(*simulate(rng, 30, cv=0.06), seed=i) for i in range(100)]
    assert sum(v in FALSE_VERDICTS for v, _ in runs) / len(runs) <= 0.02


def test_sequential_sampling_stops_early_on_a_large_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(stats, "RESAMPLES", 1000)
    rng = np.random.default_rng(12)
    runs = [sequential_verdict(*simulate(rng, 30, shift=0.2, cv=0.03), seed=i) for i in range(20)]
    assert all(v == REGRESSED and n == 10 for v, n in runs)


# --- change points -----------------------------------------------------------------


def noisy_series(rng: np.random.Generator, levels: list[tuple[int, float]]) -> list[float]:
    """Medians with 1% log-normal noise; ``levels`` is (length, level) per segment."""
    y = np.concatenate([np.full(n, level) for n, level in levels])
    return (y * np.exp(rng.normal(0.0, 0.01, y.size))).tolist()


def test_change_points_find_a_step_in_noise() -> None:
    for seed in range(10):
        series = noisy_series(np.random.default_rng(seed), [(15, 1.0), (15, 1.06)])
        points = stats.change_points(series)
        assert len(points) == 1 and abs(points[0] - 15) <= 1, (seed, points)


def test_change_points_find_a_regression_and_its_fix() -> None:
    series = noisy_series(np.random.default_rng(1), [(10, 1.0), (8, 1.2), (10, 1.0)])
    assert stats.change_points(series) == [10, 18]


def test_change_points_find_nothing_in_flat_noise() -> None:
    hits = [
        stats.change_points(noisy_series(np.random.default_rng(s), [(40, 1.0)])) for s in range(50)
    ]
    assert sum(bool(h) for h in hits) <= 1


def test_change_points_ignore_a_single_bad_run() -> None:
    series = noisy_series(np.random.default_rng(3), [(30, 1.0)])
    series[12] *= 1.5
    series[13] *= 1.4
    assert stats.change_points(series) == []


def test_change_points_edge_cases() -> None:
    assert stats.change_points([]) == []
    assert stats.change_points([1.0, 2.0, 3.0]) == []  # shorter than two segments
    assert stats.change_points([1.0] * 10) == []
    assert stats.change_points([1.0, 1.0, 1.0, 2.0, 2.0, 2.0]) == [3]
    assert stats.change_points([1.0] * 4 + [1.1] * 4, min_size=5) == []
    # The penalty is in units of the noise variance: huge forbids any split,
    # tiny lets the noise itself be segmented.
    step = noisy_series(np.random.default_rng(4), [(10, 1.0), (10, 1.1)])
    assert stats.change_points(step) == [10]
    assert stats.change_points(step, penalty=1e6) == []
    assert len(stats.change_points(step, penalty=0.1)) > 1
    with pytest.raises(ValueError, match="positive"):
        stats.change_points([1.0, 0.0, 1.0, 1.0])
