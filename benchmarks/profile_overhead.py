"""Overhead of `perfctl profile`: ops/s of a CPU-bound regime with and without py-spy.

Both sides run the very same profile worker (``perfctl/measure/workers/profile.py``)
looping the same regime for ``--duration`` seconds; the profiled side runs it
as py-spy's child, exactly as ``perfctl profile`` does. Each round runs every
side once, in alternating order (ABBA), so drift and neighbours' load hit the
sides alike. The overhead is the median over rounds of ``1 - profiled/plain``
within the round, for three clocks: wall (what a user feels on a quiet
machine), busy = wall less the time the loop sat runnable waiting for a CPU
(Linux schedstat: what a user feels, with a busy machine's share taken out; it
still counts py-spy's pauses of the process), and CPU time of the worker
(blind to the pauses). Prints a Markdown table.

Usage: python benchmarks/profile_overhead.py [--duration 3] [--repeats 7] [--rates 100,1000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from perfctl.profile import pyspy, recording

REGIMES = """
from perfctl import regime


@regime(ops=1)
def cpu_bound():
    def run():
        t = 0
        for i in range(20000):
            t += i * i
        return t

    return run
"""


def _worker(regimes: Path, duration: float, status: Path) -> list[str]:
    return [
        sys.executable,
        str(recording.WORKER),
        str(regimes),
        "cpu_bound",
        str(duration),
        str(status),
    ]


def _ops_per_s(status: Path) -> tuple[float, float, float]:
    data = json.loads(status.read_text())
    if not data["ok"]:
        raise SystemExit(f"the regime failed: {data['error']}")
    ops, elapsed = data["ops"], data["elapsed_s"]
    return ops / elapsed, ops / (elapsed - data["wait_s"]), ops / data["cpu_s"]


def run_once(
    tmp: Path, regimes: Path, duration: float, rate: int | None
) -> tuple[float, float, float]:
    """(wall, busy, CPU) ops/s of one run, under py-spy at ``rate`` Hz (None: plain)."""
    status = tmp / "status.json"
    status.unlink(missing_ok=True)
    worker = _worker(regimes, duration, status)
    if rate is None:
        # A session of its own, as py-spy's child gets: with autogroup scheduling
        # the session decides the CPU share on a busy machine.
        subprocess.run(worker, check=True, cwd=tmp, start_new_session=True)
    else:
        settings = pyspy.RecordSettings(duration=duration, rate=rate)
        argv = pyspy.command(pyspy.find_py_spy(), tmp / "p.json", settings, worker)
        pyspy.record(
            argv, cwd=tmp, env=dict(os.environ), log_path=tmp / "log", timeout_s=duration + 60
        )
    return _ops_per_s(status)


Results = dict[int | None, list[tuple[float, float, float]]]
COLUMNS = ("wall", "busy", "CPU")


def measure(duration: float, repeats: int, rates: list[int]) -> Results:
    """(wall, busy, CPU) ops/s per side (None = unprofiled) and round."""
    sides: list[int | None] = [None, *rates]
    results: Results = {side: [] for side in sides}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        regimes = tmp / "regimes.py"
        regimes.write_text(REGIMES)
        for i in range(repeats):
            for side in sides if i % 2 == 0 else sides[::-1]:
                results[side].append(run_once(tmp, regimes, duration, side))
    return results


def _overhead(results: Results, side: int, column: int) -> str:
    ratios = [1 - p[column] / b[column] for p, b in zip(results[side], results[None], strict=True)]
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return f"{statistics.median(ratios):+.1%} (IQR {q[0]:+.1%} to {q[2]:+.1%})"


def format_table(results: Results) -> list[str]:
    """Markdown rows: side, then median ops/s and overhead for wall, busy and CPU time."""
    head = " | ".join(f"{c} ops/s | overhead ({c})" for c in COLUMNS)
    lines = [f"| side | {head} |", "|---|" + "---:|" * 2 * len(COLUMNS)]
    for side, runs in results.items():
        cells = []
        for col in range(len(COLUMNS)):
            median = statistics.median(r[col] for r in runs)
            overhead = "—" if side is None else _overhead(results, side, col)
            cells.append(f"{median:,.0f} | {overhead}")
        label = "unprofiled" if side is None else f"py-spy at {side} Hz"
        lines.append(f"| {label} | {' | '.join(cells)} |")
    return lines


def main() -> None:
    """Parse options, measure, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--rates", default="100,1000")
    args = parser.parse_args()
    rates = [int(r) for r in args.rates.split(",") if r]
    results = measure(args.duration, args.repeats, rates)
    print(
        f"{args.repeats} runs of {args.duration:g} s per side, interleaved; "
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs\n"
    )
    print("\n".join(format_table(results)))


if __name__ == "__main__":
    main()
