"""Simulate the early stop *inside* the band: its honesty at the band's edge, and its cost.

``perfctl compare`` looks after every round and stops once the interval fits inside the
±2% band. A 95% interval misses a true change at the band's edge in 2.5% of runs at a
fixed size; looked at after every pair, it wanders below the edge at *some* look more
often, and the comparison then ends ``no change`` with an interval that excludes the
change (the issue's honesty miss). This replays perfctl's own rule
(``perfctl.stats.paired.compare_paired``, ``decision.is_clear``, ``decide``) on paired
log ratios drawn normal about the true shift, for each ``--widen`` factor (the inside
stop judged on the interval widened by it about its estimate; ``decision.INSIDE_WIDENING``
is perfctl's), and reports per factor:

* A/A: ``no change``, false verdicts, and the pairs it took (median and 75th percentile);
* for each true shift: ``no change`` with an interval excluding the shift (and which rule
  ended those runs: the inside stop, the futility stop, or the budget), and ``regressed``.

``--futility-p 0.2 0.5 1`` adds rows for other levels of the futility stop (perfctl's:
``decision.FUTILITY_P``; after 30 pairs, a raw p above it ends sampling ``no change``;
1 switches it off).

The model is tests/test_paired.py's (one model, two uses). Nothing is measured here.

Usage:
    python benchmarks/inside_stop.py --trials 1000 --spread 0.035
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from perfctl.model import IMPROVED, NO_CHANGE, REGRESSED
from perfctl.stats import decision

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.test_paired import paired_run  # noqa: E402


def cell(
    trials: int, shift: float, spread: float, last: int, widen: float, band: float = 0.02
) -> list[tuple]:
    """``trials`` runs of one true shift; each seeded by its index, so factors share draws."""
    return [
        paired_run(np.random.default_rng(i), shift, spread, last, widen, band)
        for i in range(trials)
    ]


def _stop(n: int, change: decision.Change, last: int, widen: float, band: float) -> str:
    """Which rule ended a `no change` run: the inside stop, the futility stop, or the budget
    (the last pair's look, whatever it would have said, is the budget's)."""
    if n == last:
        return "budget"
    inside = decision.is_clear(change, threshold=band, futility=False, inside_widening=widen)
    return "inside" if inside else "futility"


def row(args: argparse.Namespace, widen: float, futility_p: float) -> str:
    """One table row at futility level ``futility_p``; perfctl's own level is put back after."""
    kept = decision.FUTILITY_P
    decision.FUTILITY_P = futility_p  # read by decision.is_clear at every look
    try:
        return _row(args, widen, futility_p)
    finally:
        decision.FUTILITY_P = kept


def _row(args: argparse.Namespace, widen: float, futility_p: float) -> str:
    """One table row: A/A, then each shift's honesty miss and regressions."""
    t = args.trials
    aa = cell(t, 0.0, args.spread, args.last, widen, args.band)
    pairs = [n for _, n, _ in aa]
    out = [
        f"{widen:g}",
        f"{futility_p:g}",
        f"{sum(v == NO_CHANGE for v, _, _ in aa)}/{t}",
        f"{sum(v in (REGRESSED, IMPROVED) for v, _, _ in aa)}/{t}",
        f"{np.median(pairs):.0f} / {np.percentile(pairs, 75):.0f}",
    ]
    for shift in args.shifts:
        runs = cell(t, shift, args.spread, args.last, widen, args.band)
        missed = [(n, c) for v, n, c in runs if v == NO_CHANGE and c.ci_high < shift]
        ends = [_stop(n, c, args.last, widen, args.band) for n, c in missed]
        out.append(
            f"{len(missed)}/{t} ({100 * len(missed) / t:.1f}%; "
            + ", ".join(f"{ends.count(e)} {e}" for e in ("inside", "futility", "budget"))
            + f"), {sum(v == REGRESSED for v, _, _ in runs)}"
        )
    return "| " + " | ".join(out) + " |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--spread", type=float, default=0.035, help="SD of the pair log ratios")
    ap.add_argument("--last", type=int, default=37, help="pairs the 60 s budget holds")
    ap.add_argument("--shifts", type=float, nargs="+", default=[0.02, 0.023, 0.025])
    ap.add_argument("--widen", type=float, nargs="+", default=[1.0, 1.2, 1.3, 1.4])
    ap.add_argument(
        "--futility-p", type=float, nargs="+", default=[decision.FUTILITY_P],
        help="the raw p above which the futility stop (after 30 pairs) may end sampling",
    )  # fmt: skip
    ap.add_argument(
        "--band", type=float, default=0.02,
        help="the noise band judged on (0.02: the band the README's figures were simulated at)",
    )  # fmt: skip
    args = ap.parse_args()
    shifts = " | ".join(f"+{100 * s:g}%: no change excl. it, regressed" for s in args.shifts)
    print(f"band ±{100 * args.band:g}%, spread {100 * args.spread:g}%, 10 -> {args.last} pairs, "
          f"{args.trials} runs a cell; "
          f"perfctl's factor: {decision.INSIDE_WIDENING:g}")  # fmt: skip
    print(
        f"| widen | futility p | A/A no change | A/A false | A/A pairs (median / p75) | {shifts} |"
    )
    print("|---|---:|---:|---:|---:|" + "---:|" * len(args.shifts))
    for widen in args.widen:
        for futility_p in args.futility_p:
            print(row(args, widen, futility_p), flush=True)


if __name__ == "__main__":
    main()
