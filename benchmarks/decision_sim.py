"""Simulate two questions about compare's decision rule on one process model.

``baselines``: does counting ``baseline=`` reference regimes in Benjamini–Hochberg
dilute real changes? Each simulated comparison has 5 regimes under study (one with a
true change) and 5 unchanged, quiet reference regimes; the real per-family correction
(``perfctl.stats.verdicts.adjust``) is replayed pooled (one family, the old rule) and
with the references as their own family (the rule perfctl uses).

``cv-boundary``: does the ``max_cv`` limit (10%: above it significance needs α/10) let
false "regressed"/"improved" through more often than α says when the sample CV lands
just under the limit? A/A comparisons at true CVs around 10%, bucketed by the larger
sample CV of the two sides, fixed size or sequential (10 → 80 rounds).

Both replay the real decision code (``compare_sides``, ``is_clear``, ``decide``) on the
ABBA process model that ``tests/test_stats.py`` asserts against. Usage::

    python benchmarks/decision_sim.py baselines --trials 2000
    python benchmarks/decision_sim.py cv-boundary --trials 2000 --sizes 10 30 seq
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from perfctl.model import IMPROVED, REGRESSED
from perfctl.stats import decision as stats
from perfctl.stats import verdicts

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.test_stats import cv_of, simulate  # noqa: E402

CHANGED = (REGRESSED, IMPROVED)
THRESHOLD, ALPHA = 0.02, 0.05


def wilson(k: int, n: int) -> str:
    """A 95% Wilson interval, as text."""
    if n == 0:
        return "—"
    z, p = 1.96, k / n
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return f"{max(mid - half, 0):.1%}–{min(mid + half, 1):.1%}"


# --- baselines in Benjamini–Hochberg ------------------------------------------------------


def _verdicts(tested: dict[str, tuple[stats.Change, float]], reference: set[str]) -> dict[str, str]:
    adjusted = verdicts.adjust({n: c.p_value for n, (c, _) in tested.items()}, reference)
    return {
        n: stats.decide(c, adjusted[n], threshold=THRESHOLD, alpha=ALPHA, base_cv=cv, head_cv=cv)[0]
        for n, (c, cv) in tested.items()
    }


def baselines_cell(
    rng: np.random.Generator, shift: float, cv: float, n: int, trials: int
) -> dict[str, tuple[int, int]]:
    """(found, any false verdict) counts per rule over ``trials`` comparisons."""
    refs = {f"ref{i}" for i in range(5)}
    out = {"pooled": (0, 0), "families": (0, 0)}
    for _ in range(trials):
        tested: dict[str, tuple[stats.Change, float]] = {}
        for i in range(5):
            b, h = simulate(rng, n, shift=shift if i == 0 else 0.0, cv=cv)
            tested[f"sys{i}"] = (stats.compare_sides(b, h), max(cv_of(b), cv_of(h)))
        for name in refs:  # in-process references: quiet and unchanged
            b, h = simulate(rng, n, cv=0.02)
            tested[name] = (stats.compare_sides(b, h), max(cv_of(b), cv_of(h)))
        want = REGRESSED if shift > 0 else IMPROVED
        for rule, reference in (("pooled", set()), ("families", refs)):
            v = _verdicts(tested, reference)
            found, false = out[rule]
            wrong = any(v[k] in CHANGED for k in v if k != "sys0")
            out[rule] = (found + (v["sys0"] == want), false + wrong)
    return out


def run_baselines(args: argparse.Namespace) -> None:
    """The table for the baselines study."""
    print("| true change | CV | processes | found: pooled → families | any false verdict |")
    print("|---|---:|---:|---|---|")
    for shift, cv, n in ((-0.25, 0.20, 10), (-0.10, 0.08, 10), (0.05, 0.04, 20), (0.0, 0.05, 10)):
        cell = baselines_cell(np.random.default_rng(args.seed), shift, cv, n, args.trials)
        (fp, wp), (ff, wf) = cell["pooled"], cell["families"]
        t = args.trials
        print(
            f"| {shift:+.0%} | {cv:.0%} | {n} | {fp / t:.1%} → {ff / t:.1%} | "
            f"{wp / t:.1%} → {wf / t:.1%} |",
            flush=True,
        )


# --- the max_cv boundary ---------------------------------------------------------------------


def aa_verdict(rng: np.random.Generator, cv: float, size: str) -> tuple[str, float]:
    """One A/A comparison: (verdict, the larger sample CV of the two sides)."""
    last = 80 if size == "seq" else int(size)
    base, head = simulate(rng, last, cv=cv)
    n = 10 if size == "seq" else last
    change = stats.compare_sides(base[:n], head[:n])
    while n < last and not stats.is_clear(change, threshold=THRESHOLD):
        n += 1
        change = stats.compare_sides(base[:n], head[:n])
    cvs = cv_of(base[:n]), cv_of(head[:n])
    verdict, _ = stats.decide(
        change, change.p_value, threshold=THRESHOLD, alpha=ALPHA, base_cv=cvs[0], head_cv=cvs[1]
    )
    return verdict, max(cvs)


BUCKETS: tuple[tuple[float, float], ...] = (
    (0.0, 0.08),
    (0.08, 0.09),
    (0.09, 0.095),
    (0.095, 0.10),
    (0.10, 0.105),
    (0.105, 0.11),
)
BUCKETS += ((0.11, 0.12), (0.12, 1.0))


def run_cv_boundary(args: argparse.Namespace) -> None:
    """The table for the CV-boundary study: false verdicts per sample-CV bucket."""
    for size in args.sizes:
        rng = np.random.default_rng(args.seed)
        seen: list[tuple[str, float]] = []
        for cv in args.cv:
            seen += [aa_verdict(rng, cv, size) for _ in range(args.trials)]
        label = "sequential 10 → 80" if size == "seq" else f"fixed {size} vs {size}"
        print(f"\n{label}, true CV {', '.join(f'{c:.1%}' for c in args.cv)}:\n")
        print("| larger sample CV | comparisons | false verdicts | 95% interval |")
        print("|---|---:|---:|---|")
        for low, high in BUCKETS:
            got = [v for v, c in seen if low <= c < high]
            k = sum(v in CHANGED for v in got)
            share = f"{k / len(got):.2%}" if got else "—"
            print(f"| {low:.1%}–{high:.1%} | {len(got)} | {share} | {wilson(k, len(got))} |")
        total = sum(v in CHANGED for v, _ in seen)
        print(f"| all | {len(seen)} | {total / len(seen):.2%} | {wilson(total, len(seen))} |")


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the study and its sizes, print its markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", choices=("baselines", "cv-boundary"))
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cv", type=float, nargs="+", default=[0.09, 0.095, 0.10, 0.105, 0.11])
    parser.add_argument("--sizes", nargs="+", default=["10", "30"])
    args = parser.parse_args(argv)
    started = time.monotonic()
    (run_baselines if args.study == "baselines" else run_cv_boundary)(args)
    print(f"\n{args.trials} trials per cell, {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
