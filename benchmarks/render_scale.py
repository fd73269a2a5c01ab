"""How long `perfctl report` takes to render at scale, and how big the files get.

Goals (issue): a 50-regime comparison of 2 refs in < 3 s, and a history of
500 runs x 50 regimes in < 10 s. Data is synthetic (seeded), shaped like real
runs: 20 processes x 3 values per regime and side, 10 families.

    python benchmarks/render_scale.py [--regimes 50] [--runs 500] [--repeat 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from perfctl.model import (
    IMPROVED,
    NO_CHANGE,
    OK,
    REGRESSED,
    WITHIN_NOISE,
    Comparison,
    Machine,
    RefInfo,
    RegimeComparison,
    RegimeResult,
    Run,
    SideStats,
)
from perfctl.render.html_report import render_comparison, render_history

MACHINE = Machine("bench", "Synthetic CPU", 2, 8 * 2**30, "6.1.0", "performance", "3.11.7")
PROCESSES, VALUES, FAMILIES = 20, 3, 10


def _processes(rng: random.Random, median: float) -> tuple[tuple[float, ...], ...]:
    return tuple(
        tuple(rng.gauss(median, median * 0.04) for _ in range(VALUES)) for _ in range(PROCESSES)
    )


def _side(median: float) -> SideStats:
    return SideStats(
        median, median * 0.98, median * 1.02, median * 0.97, median * 1.03, 0.04, PROCESSES
    )


def make_comparison(regimes: int, seed: int = 1) -> Comparison:
    """A comparison of ``regimes`` regimes with every raw value stored."""
    rng = random.Random(seed)
    rows = []
    for i in range(regimes):
        base = 10 ** rng.uniform(-7, -2)
        factor = rng.choice((0.8, 0.99, 1.0, 1.01, 1.25))
        verdict = {0.8: IMPROVED, 1.25: REGRESSED, 1.0: NO_CHANGE}.get(factor, WITHIN_NOISE)
        rows.append(
            RegimeComparison(
                f"regime_{i}[size={2 ** (i % 12)}]",
                f"family_{i % FAMILIES}",
                verdict,
                base=_side(base),
                head=_side(base * factor),
                change=factor - 1,
                ci_low=factor - 1.02,
                ci_high=factor - 0.98,
                p_adjusted=0.01,
                base_values=_processes(rng, base),
                head_values=_processes(rng, base * factor),
                base_order=tuple(range(0, 2 * PROCESSES, 2)),
                head_order=tuple(range(1, 2 * PROCESSES, 2)),
            )
        )
    return Comparison(
        "bench",
        "2026-01-01T00:00:00+00:00",
        RefInfo("main", "a" * 40, "base"),
        RefInfo("feature", "b" * 40, "head"),
        MACHINE,
        tuple(rows),
    )


def make_runs(runs: int, regimes: int, seed: int = 2) -> list[Run]:
    """``runs`` stored runs of one machine, newest first, each measuring every regime."""
    rng = random.Random(seed)
    bases = [10 ** rng.uniform(-7, -2) for _ in range(regimes)]
    out = []
    for i in range(runs):
        drift = 1.0 + 0.2 * (i // 100)  # a step every 100 commits
        results = tuple(
            RegimeResult(
                f"regime_{j}", f"family_{j % FAMILIES}", OK, processes=_processes(rng, b * drift)
            )
            for j, b in enumerate(bases)
        )
        day, minute = divmod(i, 24 * 60)
        date = f"2026-01-{1 + day:02d}T{minute // 60:02d}:{minute % 60:02d}:00+00:00"
        out.append(
            Run(
                f"run{i:04d}",
                "bench",
                RefInfo("main", f"{i:040x}", f"commit {i}", date),
                MACHINE,
                date,
                status="complete",
                results=results,
            )
        )
    return out[::-1]


def _time(fn: Callable[[], Path], repeat: int) -> tuple[float, float, int]:
    times = []
    size = 0
    for _ in range(repeat):
        start = time.perf_counter()
        path = fn()
        times.append(time.perf_counter() - start)
        size = path.stat().st_size
    return statistics.median(times), min(times), size


def main(argv: list[str] | None = None) -> int:
    """Render both reports ``--repeat`` times and print median/min time and file size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regimes", type=int, default=50)
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    c = make_comparison(args.regimes)
    runs = make_runs(args.runs, args.regimes)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        cases: list[tuple[str, float, Callable[[], Path]]] = [
            (
                f"comparison {args.regimes} regimes x 2 refs",
                3.0,
                lambda: render_comparison(c, project_root=out, out=out / "c.html"),
            ),
            (
                f"comparison {args.regimes} x 2, --cdn",
                3.0,
                lambda: render_comparison(
                    c, project_root=out, out=out / "cdn.html", plotly_js="cdn"
                ),
            ),
            (
                f"history {args.runs} runs x {args.regimes} regimes",
                10.0,
                lambda: render_history(runs, out=out / "h.html"),
            ),
        ]
        print(f"{'case':44} {'median s':>9} {'min s':>7} {'size MB':>8}  goal")
        ok = True
        for name, goal, fn in cases:
            median, best, size = _time(fn, args.repeat)
            ok &= median < goal
            mark = "ok" if median < goal else "MISSED"
            print(f"{name:44} {median:9.2f} {best:7.2f} {size / 1e6:8.2f}  < {goal:.0f} s {mark}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
