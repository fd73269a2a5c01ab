"""Replay a noisy-machine cell's stored values to weigh two levers no setting offers.

``noisy_machine.py`` records each comparison's id; the comparisons (with every
process's values) stay in the benchmark project's store. This script measures nothing:
it reads a cell already run and asks two questions the issue left open.

1. **Would another statistic bring the two-process regime (``pipe``, measured in
   separate processes) within the 2% band?** No commit changes ``pipe``, so every
   comparison of it is A/A and any estimate's distance from zero is its error. For each
   statistic of the process means (today's Hodges–Lehmann estimate as stored, the mean,
   the median, low quantiles and the minimum: the fastest processes are the ones no
   other job slowed, so a "floor" might be steadier than the typical process) it
   reports the spread of the estimates between comparisons (SD) and the largest one.
   A 95% interval inside ±2% needs an SD of about 1% or less (2% / 1.96), before any
   correction for several regimes: a statistic whose A/A estimates spread more cannot
   give `no change` honestly, however it builds its interval.
2. **Would shorter rounds make the in-process regime (``work``, paired in one process)
   faster to decide?** A round is one duo process: 10 values a side of ``--min-time``
   (0.05 s), a warmup each, and a start-up cost. From each stored round the per-pair
   log ratio is computed from all its values and from the first half (the same span of
   time half as long rounds would cover), and the variance of the two is compared
   between rounds. Unchanged regimes stop when their interval is narrow enough, so
   their rounds scale with that variance; a clear change stops at the 11-round floor
   (the signed-rank test cannot reach p < 0.001 with fewer pairs). The projected time
   ratio is rounds × seconds per round, half against full, with the start-up cost
   taken as each cell's measured seconds per round less the values' time.
3. **And through the stopping rule?** ``--sequential`` replays runs round by round with
   perfctl's own rule (``compare_paired``, ``is_clear``, ``decide``; first look at 10
   rounds, the 60 s budget in seconds), drawing rounds with replacement from one
   comparison's own rounds (re-centred on the cell's mean ratio for that head, as
   ``stop_resample.py`` does) under three schedules: every round full (today), every
   round half as long, and the first 11 rounds half as long then full ones. A half
   round's ratio is that stored round's first half, its time the start-up plus half
   the values' time. It reports A/A ``no change`` and false verdicts, +5% found, +2%
   ``no change`` with an interval excluding +2%, and the median time per regime. It
   decides with the installed perfctl's rule (a noisy side at α/10 since 2026-11-27;
   the figures in benchmarks/README.md were taken at α/5).

Usage:
    python benchmarks/replay_levers.py /tmp/perfctl-bench/noisy-20261126-232833.jsonl \\
        /tmp/perfctl-bench/noisy-20261127-030630.jsonl --sequential 300
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
from stop_resample import cell_arguments, stored_comparisons, stored_row  # the same cells

from perfctl.model import IMPROVED, NO_CHANGE, REGRESSED
from perfctl.stats import decision
from perfctl.stats.paired import compare_paired, pair_log_ratios
from perfctl.stats.summary import process_means

BAND = 0.02
BUDGET = 60.0  # compare's default time budget per regime
FLOOR = 11  # the fewest pairs whose signed-rank p can fall below 0.001
VALUE_SECONDS = 22 * 0.05  # a duo round: (1 warmup + 10 values) a side × --min-time 0.05 s

STATISTICS: dict[str, Callable[[np.ndarray], float]] = {
    "mean": lambda x: float(np.mean(x)),
    "median": lambda x: float(np.median(x)),
    "25th percentile": lambda x: float(np.quantile(x, 0.25)),
    "10th percentile": lambda x: float(np.quantile(x, 0.10)),
    "5th percentile": lambda x: float(np.quantile(x, 0.05)),
    "minimum": lambda x: float(np.min(x)),
}


def pipe_table(results: list[Path], store: Path, design: str) -> list[str]:
    """Question 1: the A/A spread of each statistic of ``pipe``'s process means."""
    cells: dict[tuple[str, str], dict[str, list[float]]] = {}
    for rec, comparison in stored_comparisons(results, store, design):
        row = stored_row(comparison, "pipe")
        if row is None or row.get("pairing") != "process" or rec.get("changed") == "pipe":
            continue  # A→Q25 changes pipe: not an A/A comparison
        cell = cells.setdefault((rec["condition"], str(rec.get("perfctl", ""))[:7]), {})
        base, head = process_means(row["base_values"]), process_means(row["head_values"])
        cell.setdefault("today (HL, as stored)", []).append(math.log1p(row["change"]))
        cell.setdefault("today's CI half-width", []).append(
            (math.log1p(row["ci_high"]) - math.log1p(row["ci_low"])) / 2
        )
        for name, stat in STATISTICS.items():
            cell.setdefault(name, []).append(math.log(stat(head) / stat(base)))
    out = [
        "| condition (perfctl) | comparisons | statistic | A/A SD between comparisons | largest |error| |",
        "|---|---:|---|---:|---:|",
    ]
    for (condition, rev), stats in sorted(cells.items()):
        for name, xs in stats.items():
            a = 100 * np.array(xs)
            if name.endswith("half-width"):
                shown = f"median {np.median(a):.1f}% | –"
            else:
                shown = f"{np.std(a, ddof=1):.2f}% | {np.max(np.abs(a)):.1f}%"
            out.append(f"| {condition} ({rev}) | {len(xs)} | {name} | {shown} |")
    return out


Cell = tuple[str, str, str]  # condition, perfctl revision, head


def work_rounds(
    results: list[Path], store: Path, design: str
) -> dict[Cell, list[tuple[np.ndarray, np.ndarray, float]]]:
    """Per cell, each comparison's per-round log ratios (all values, first half) and
    its seconds per round, for the ``work`` regime paired in one process."""
    cells: dict[Cell, list[tuple[np.ndarray, np.ndarray, float]]] = {}
    for rec, comparison in stored_comparisons(results, store, design):
        row = stored_row(comparison, "work")
        if row is None or row.get("pairing") != "same-process":
            continue
        b, h = row["base_values"], row["head_values"]
        full = pair_log_ratios(b, h)
        # The first half of each side's values: the span a round half as long covers.
        cut = [min(len(x), len(y)) // 2 for x, y in zip(b, h, strict=True)]
        half = pair_log_ratios(
            [x[:n] for x, n in zip(b, cut, strict=True)],
            [y[:n] for y, n in zip(h, cut, strict=True)],
        )
        work = rec["rows"]["work"]
        if full.size < 3 or not work.get("seconds"):
            continue
        key = (rec["condition"], str(rec.get("perfctl", ""))[:7], rec["head"])
        per_round = work["seconds"] / work["processes"]
        cells.setdefault(key, []).append((full, half, per_round))
    return cells


def work_table(cells: dict[Cell, list[tuple[np.ndarray, np.ndarray, float]]]) -> list[str]:
    """Question 2: variance of a round's log ratio from half its values, and the time."""
    out = [
        "| condition (perfctl) | head | rounds | SD per round, full | half | variance half/full "
        "| s per round | projected time, half-length rounds: unchanged | clear change |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (condition, rev, head), comps in sorted(cells.items()):
        # Centred per comparison: what a comparison's own interval sees.
        full = np.concatenate([f - f.mean() for f, _, _ in comps])
        half = np.concatenate([h - h.mean() for _, h, _ in comps])
        var = float(np.var(half, ddof=1) / np.var(full, ddof=1))
        per_round = float(np.median([t for _, _, t in comps]))
        startup = max(per_round - VALUE_SECONDS, 0.0)
        shorter = (startup + VALUE_SECONDS / 2) / per_round
        out.append(
            f"| {condition} ({rev}) | {head} | {full.size} | "
            f"{100 * np.std(full, ddof=1):.2f}% | {100 * np.std(half, ddof=1):.2f}% | "
            f"{var:.2f} | {per_round:.2f} s | ×{var * shorter:.2f} | ×{shorter:.2f} |"
        )
    return out


SCHEDULES = {"full (today)": 0, "half": 10**6, f"half for {FLOOR}, then full": FLOOR}


def one_run(
    rng: np.random.Generator, full: np.ndarray, half: np.ndarray, per_round: float, short: int
) -> tuple[str, float, decision.Change]:
    """One replayed comparison: (verdict, seconds, change); rounds before ``short`` half."""
    startup = max(per_round - VALUE_SECONDS, 0.0)
    ratios: list[float] = []
    spent = 0.0
    while True:
        j = int(rng.integers(full.size))
        is_half = len(ratios) < short
        ratios.append(float(half[j] if is_half else full[j]))
        spent += startup + VALUE_SECONDS * (0.5 if is_half else 1.0)
        if len(ratios) < 10:
            continue
        change = compare_paired([(1.0,)] * len(ratios), [(math.exp(x),) for x in ratios])
        if spent >= BUDGET or decision.is_clear(change, threshold=BAND):
            break
    spread = float(np.std(ratios, ddof=1))
    verdict, _ = decision.decide(
        change, change.p_value, threshold=BAND, alpha=0.05, base_cv=spread, head_cv=spread
    )
    return str(verdict), spent, change


def sequential_table(
    cells: dict[Cell, list[tuple[np.ndarray, np.ndarray, float]]], trials: int, seed: int
) -> list[str]:
    """Question 3: each schedule through perfctl's stopping rule, per cell and head."""
    out = [
        "| condition (perfctl) | head | schedule | no change | regressed | improved "
        "| no change excluding +2% | median s |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for (condition, rev, head), comps in sorted(cells.items()):
        grand = float(np.mean(np.concatenate([f for f, _, _ in comps])))
        # Each comparison keeps its own spread, re-centred on the cell's mean ratio.
        pools = [(f - f.mean() + grand, h - f.mean() + grand, t) for f, h, t in comps]
        for name, short in SCHEDULES.items():
            rng = np.random.default_rng(seed)
            runs = [one_run(rng, *pools[rng.integers(len(pools))], short) for _ in range(trials)]
            count = {v: sum(r[0] == v for r in runs) for v in (NO_CHANGE, REGRESSED, IMPROVED)}
            # The honesty miss is +2%'s alone (an A/A interval should exclude +2%).
            excl = (
                f"{sum(v == NO_CHANGE and c.ci_high < BAND for v, _, c in runs)}/{trials}"
                if head == "P2"
                else "–"
            )
            out.append(
                f"| {condition} ({rev}) | {head} | {name} | {count[NO_CHANGE]}/{trials} | "
                f"{count[REGRESSED]}/{trials} | {count[IMPROVED]}/{trials} | "
                f"{excl} | {np.median([s for _, s, _ in runs]):.0f} s |"
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cell_arguments(ap)
    ap.add_argument(
        "--sequential",
        type=int,
        default=0,
        metavar="TRIALS",
        help="also replay the round schedules, TRIALS runs per cell and head",
    )
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    print("\n".join(pipe_table(args.results, args.store, args.design)))
    print()
    cells = work_rounds(args.results, args.store, args.design)
    print("\n".join(work_table(cells)))
    if args.sequential:
        print()
        print("\n".join(sequential_table(cells, args.sequential, args.seed)), flush=True)


if __name__ == "__main__":
    main()
