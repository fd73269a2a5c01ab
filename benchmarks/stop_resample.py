"""Replay a noisy-machine cell's own per-pair ratios through compare's stopping rule.

``noisy_machine.py`` records each comparison's id; the comparisons themselves (with
every process's values) stay in the benchmark project's store. For the ``work``
regime measured in one process per pair (``--pairing auto``), this script reads each
comparison's per-pair log ratios ``log(head / base)`` and asks two things:

1. **Is there noise a comparison's own interval cannot see?** Over the first ``k``
   pairs of every comparison (a fixed size no larger than the first look, 10 pairs,
   so early stopping selects nothing), the
   spread of the comparisons' mean ratios is set against the standard error each
   comparison's own pairs imply; and the lag-1 autocorrelation of the ratios inside
   a comparison (near ``-1/n`` when the pairs are independent, as the signed-rank
   test assumes).
2. **What would a guard on the early "inside the band" stop buy, and cost?** Runs are
   simulated by drawing pairs (with replacement) from one comparison's own ratios,
   re-centred on the cell's mean ratio for that head (the mean of all its pairs;
   each comparison keeps its own spread, and its mean is not counted twice), and
   stopping with perfctl's own rule
   (``perfctl.stats.paired.compare_paired``, ``decision.is_clear``, ``decide``) from
   10 pairs to ``--last`` pairs, for each ``--widen`` factor: an early stop inside
   the ±2% band then needs the interval, widened by that factor about its estimate,
   inside the band (perfctl's rule: 1.3 since the stop's honesty was guarded; 1.0
   before, the rule the cells it reads ran under).

It reports, per factor: A/A ``no change`` and the median pairs it took, +2% called
``no change`` with an interval excluding +2% (the issue's honesty miss) or
``regressed``, and +5% found. The verdict uses the raw p-value: the real run's
Benjamini-Hochberg step across ``work`` and ``pipe`` can only be stricter, so alarms
are if anything overstated. Nothing is measured here: it reads a cell already run.

Usage:
    python benchmarks/stop_resample.py /tmp/perfctl-bench/noisy-20261126-232833.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from perfctl.model import IMPROVED, NO_CHANGE, REGRESSED
from perfctl.stats import decision
from perfctl.stats.paired import pair_log_ratios

# The stopping rule's replay is tests/test_paired.py's (inside_stop.py uses it too).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.test_paired import stop_paired  # noqa: E402

STORE = Path(tempfile.gettempdir()) / "perfctl-bench" / "noisy-work" / "project" / ".perfctl"
BAND = 0.02


def stored_comparisons(
    results: list[Path], store: Path, design: str, condition: str | None = None
) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(noisy_machine record, stored comparison) for every comparison of ``design`` (and
    ``condition``, if given) whose comparison is in the store."""
    for path in results:
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("design") != design or not rec.get("id"):
                continue
            if condition is not None and rec.get("condition") != condition:
                continue  # before the comparison file is read, not after
            comparison = store / "comparisons" / f"{rec['id']}.json"
            if comparison.exists():
                yield rec, json.loads(comparison.read_text())


def stored_row(comparison: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The stored row of regime ``name``, if it has values on both sides."""
    for r in comparison["regimes"]:
        if r["name"] == name and r.get("base_values") and r.get("head_values"):
            return dict(r)
    return None


def load_ratios(
    results: list[Path], store: Path, design: str, condition: str
) -> dict[str, list[np.ndarray]]:
    """Per head tag, each comparison's per-pair log ratios of the ``work`` regime."""
    out: dict[str, list[np.ndarray]] = {}
    for rec, comparison in stored_comparisons(results, store, design, condition):
        row = stored_row(comparison, "work")
        if row is None:
            continue
        if row.get("pairing") == "same-process":
            ratios = pair_log_ratios(row["base_values"], row["head_values"])
            out.setdefault(rec["head"], []).append(ratios)
    return out


def diagnostics(ratios: dict[str, list[np.ndarray]], k: int) -> list[str]:
    """Between-comparison spread at a fixed size against the within SE; autocorrelation."""
    lines = [
        "| head | comparisons | mean of first k | SD between comparisons | SE within | lag-1 autocorr. (iid ≈) |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for head, xs in sorted(ratios.items()):
        first = [x[:k] for x in xs if x.size >= k]
        means = [float(x.mean()) for x in first]
        se = float(np.median([x.std(ddof=1) for x in first])) / math.sqrt(k)
        acs = [_lag1(x) for x in xs if x.size >= 8]
        iid = float(np.mean([-1.0 / x.size for x in xs if x.size >= 8]))
        lines.append(
            f"| {head} | {len(first)} | {100 * np.mean(means):+.2f}% | "
            f"{100 * np.std(means, ddof=1):.2f}% | {100 * se:.2f}% | "
            f"{np.median(acs):+.2f} ({iid:+.2f}) |"
        )
    return lines


def _lag1(x: np.ndarray) -> float:
    y = x - x.mean()
    return float(np.sum(y[1:] * y[:-1]) / np.sum(y * y))


def one_run(
    rng: np.random.Generator, pool: np.ndarray, widen: float, last: int
) -> tuple[str, int, decision.Change]:
    """One simulated comparison of ``last`` pairs drawn from ``pool``, stopped by perfctl's
    rule with the inside stop's interval widened ``widen``-fold: (verdict, pairs, change)."""
    return stop_paired(rng.choice(pool, size=last, replace=True), widen)


def simulate(
    ratios: dict[str, list[np.ndarray]], widen: float, trials: int, last: int, seed: int
) -> dict[str, Any]:
    """The rates for one widening factor, pairs drawn from one comparison at a time."""
    rng = np.random.default_rng(seed)
    got: dict[str, Any] = {}
    for head, xs in ratios.items():
        grand = float(np.mean(np.concatenate(xs)))
        pools = [x - x.mean() + grand for x in xs if x.size >= 5]
        runs = [one_run(rng, pools[rng.integers(len(pools))], widen, last) for _ in range(trials)]
        got[head] = {
            "no change": sum(v == NO_CHANGE for v, _, _ in runs),
            "excluding +2%": sum(v == NO_CHANGE and c.ci_high < BAND for v, _, c in runs),
            "regressed": sum(v == REGRESSED for v, _, _ in runs),
            "alarm": sum(v in (REGRESSED, IMPROVED) for v, _, _ in runs),
            "pairs": float(np.median([n for _, n, _ in runs])),
        }
    return got


def cell_arguments(ap: argparse.ArgumentParser) -> None:
    """The arguments that name stored noisy-machine cells (replay_levers.py shares them)."""
    ap.add_argument("results", nargs="+", type=Path, help="noisy_machine.py JSONL files")
    ap.add_argument("--store", type=Path, default=STORE, help="the benchmark project's .perfctl")
    ap.add_argument("--design", default="auto")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cell_arguments(ap)
    ap.add_argument("--condition", default="hog", help="quiet, hog or bursty: one cell")
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument(
        "--last", type=int, default=37, help="pairs the 60 s budget holds (≈1.6 s each)"
    )
    ap.add_argument("--widen", default="1.0,1.3,1.5")
    ap.add_argument("--k", type=int, default=10, help="the fixed size for the diagnostics")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.k > 10:
        ap.error("--k must be at most 10 (the first look): beyond it, early stops select")
    ratios = load_ratios(args.results, args.store, args.design, args.condition)
    if not {"A2", "P2"} <= set(ratios):
        ap.error("no paired `work` rows of A→A2 and A→P2 in those results (design auto?)")
    print("\n".join(diagnostics(ratios, args.k)))
    print()
    t = args.trials
    print("| widen | A/A no change | A/A false | A/A pairs (median) | +2% no change excl. +2% "
          "| +2% regressed | +5% found |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|")
    for widen in (float(w) for w in args.widen.split(",")):
        g = simulate(ratios, widen, t, args.last, args.seed)
        p5 = f"{g['P5']['regressed']}/{t}" if "P5" in g else "–"
        print(
            f"| {widen:g} | {g['A2']['no change']}/{t} | {g['A2']['alarm']}/{t} | "
            f"{g['A2']['pairs']:.0f} | {g['P2']['excluding +2%']}/{t} | "
            f"{g['P2']['regressed']}/{t} | {p5} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
