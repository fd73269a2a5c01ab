"""Simulate compare's sequential sampling: false verdicts, power and rounds used.

Replays the real decision code (``perfctl.stats.decision.compare_sides``, ``is_clear``,
``decide``) on simulated ABBA process means, so a change to the stopping rule
can be judged before it ships. Usage::

    python benchmarks/sequential_sim.py --trials 400

Each cell prints the share of regressed/improved/other verdicts and the mean
number of rounds; ``--futility 0`` switches the futility stop off, and
``--look-divisor`` / ``--noisy-divisor`` try other levels for the early stop on a
change and for a noisy side; ``--inside-widening`` another widening for the early stop
inside the band (1.0: the rule before that stop was guarded); ``--band 0.10`` judges
on a regime's own ±10% band, its "too noisy" limit and futility bound scaled with it;
``--split`` splits "other" into `no change`, `inconclusive` and `within noise`;
``--slow-share 0.3 --slow-factor 3`` makes each process, independently, three times
slower with probability 0.3 (the bimodal process means of a worker that shared its CPU,
or whose child ran on the other one), on top of the model's own spread.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from perfctl.model import IMPROVED, INCONCLUSIVE, NO_CHANGE, REGRESSED, WITHIN_NOISE
from perfctl.stats import decision as stats

# The process model is the one tests/test_stats.py asserts against: one model, two uses.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.test_stats import cv_of, simulate  # noqa: E402

SPLIT = (NO_CHANGE, INCONCLUSIVE, WITHIN_NOISE)  # --split: what "other" holds


def _slowed(
    rng: np.random.Generator, processes: list[tuple[float, ...]], share: float, factor: float
) -> list[tuple[float, ...]]:
    """Each process, with probability ``share``, ``factor`` times slower as a whole."""
    return [tuple(v * factor for v in p) if rng.random() < share else p for p in processes]


def one_run(
    rng: np.random.Generator,
    shift: float,
    cv: float,
    first: int,
    last: int,
    futility: bool,
    inside_widening: float = stats.INSIDE_WIDENING,
    band: float = 0.02,
    slow: tuple[float, float] = (0.0, 1.0),
) -> tuple[str, int]:
    """One sequential comparison: (verdict, rounds used)."""
    base, head = simulate(rng, last, shift=shift, cv=cv)
    if slow[0] > 0:
        base, head = _slowed(rng, base, *slow), _slowed(rng, head, *slow)
    n = first
    while True:
        change = stats.compare_sides(base[:n], head[:n])
        noisy = stats.is_noisy(cv_of(base[:n]), cv_of(head[:n]), band)  # the runner's noisy side
        clear = stats.is_clear(
            change, threshold=band, futility=futility, inside_widening=inside_widening, noisy=noisy
        )
        if n >= last or clear:
            break
        n += 1
    verdict, _ = stats.decide(
        change,
        change.p_value,
        threshold=band,
        alpha=0.05,
        base_cv=cv_of(base[:n]),
        head_cv=cv_of(head[:n]),
    )
    return verdict, n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--max-rounds", type=int, default=80)
    parser.add_argument("--cv", type=float, nargs="+", default=[0.03, 0.05, 0.07, 0.10])
    parser.add_argument("--shift", type=float, nargs="+", default=[0.0, 0.03, 0.05, 0.10])
    parser.add_argument("--futility", type=int, choices=(0, 1), nargs="+", default=[0, 1])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--split",
        action="store_true",
        help="split 'other' into no change / inconclusive / within noise",
    )
    parser.add_argument(
        "--band", type=float, default=0.02,
        help="the noise band judged on (a regime's own, @regime(threshold=)); limits scale "
        "up from 0.02; the default, 0.02, is the band benchmarks/README.md's figures were "
        "simulated at (compare's default is 0.01)",
    )  # fmt: skip
    parser.add_argument("--futility-p", type=float, default=stats.FUTILITY_P)
    parser.add_argument("--futility-bound", type=float, default=stats.FUTILITY_BOUND)
    parser.add_argument("--futility-min-n", type=int, default=stats.FUTILITY_MIN_N)
    parser.add_argument(
        "--look-divisor", type=float, default=stats.LOOK_ALPHA_DIVISOR,
        help="an early stop on a change needs p < alpha / this",
    )  # fmt: skip
    parser.add_argument(
        "--noisy-divisor", type=float, default=stats.NOISY_ALPHA_DIVISOR,
        help="a side noisier than max_cv needs p < alpha / this",
    )  # fmt: skip
    parser.add_argument(
        "--inside-widening", type=float, default=stats.INSIDE_WIDENING,
        help="an early stop inside the band judges the CI widened this much (1.0: before)",
    )  # fmt: skip
    parser.add_argument(
        "--slow-share", type=float, default=0.0,
        help="each process, independently, is slow as a whole with this probability",
    )  # fmt: skip
    parser.add_argument("--slow-factor", type=float, default=3.0, help="how much slower")
    args = parser.parse_args()
    if not 0 <= args.slow_share <= 1 or not args.slow_factor > 0:  # also refuses nan
        parser.error("--slow-share is a probability (0 to 1), --slow-factor above 0")
    # Candidate rules are tried by setting the module's constants.
    stats.FUTILITY_P = args.futility_p
    stats.FUTILITY_BOUND = args.futility_bound
    stats.FUTILITY_MIN_N = args.futility_min_n
    stats.LOOK_ALPHA_DIVISOR = args.look_divisor
    stats.NOISY_ALPHA_DIVISOR = args.noisy_divisor
    other = "no change | inconclusive | within noise" if args.split else "other"
    print(f"| futility | CV | true change | regressed | improved | {other} | mean rounds |")
    print("|---|---:|---:|---:|---:|" + "---:|" * (3 if args.split else 1) + "---:|")
    started = time.monotonic()
    for fut in args.futility:
        for cv in args.cv:
            for shift in args.shift:
                rng = np.random.default_rng(args.seed)
                runs = [
                    one_run(
                        rng,
                        shift,
                        cv,
                        args.rounds,
                        args.max_rounds,
                        bool(fut),
                        args.inside_widening,
                        args.band,
                        (args.slow_share, args.slow_factor),
                    )
                    for _ in range(args.trials)
                ]
                reg = sum(v == REGRESSED for v, _ in runs) / len(runs)
                imp = sum(v == IMPROVED for v, _ in runs) / len(runs)
                rounds = sum(n for _, n in runs) / len(runs)
                rest = [f"{1 - reg - imp:.1%}"]
                if args.split:
                    rest = [f"{sum(v == w for v, _ in runs) / len(runs):.1%}" for w in SPLIT]
                print(
                    f"| {'on' if fut else 'off'} | {cv:.0%} | {shift:+.0%} | {reg:.1%} | "
                    f"{imp:.1%} | {' | '.join(rest)} | {rounds:.1f} |",
                    flush=True,
                )
    print(f"\n{args.trials} trials per cell, {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
