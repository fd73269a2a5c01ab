"""Can a clock remove the two-process regime's noise between processes?

The noisy-machine benchmark's ``pipe`` regime (a line to a child process and back)
misses its A/A target under load in separate processes, and same-process pairing
is not sound for it (a ref's process-wide changes cancel; see the README's "real
changes under each pairing"). The issue's other lever is to time only what the
regime did: subtract the time it sat waiting for a CPU. This script measures, per
worker process,

* ``wall``: ``perf_counter`` per round trip (what perfctl times);
* ``wall - waits``: wall minus the run-queue delay of the parent *and* the child
  (``/proc/<pid>/task/*/schedstat``, field 2);
* ``cpu``: the on-CPU time of both (schedstat field 1);

and reports the spread (CV) of the process means on each. Neither sum is a clock
perfctl could offer: the two processes do not strictly take turns (a woken child
waits in the run queue while its parent still runs, and both may run at once on two
CPUs), so the waits overlap work and the CPU times overlap each other; the first
undercounts (it can go negative when both share one CPU), the second can exceed wall.
They are upper bounds on what any such clock could remove: if even on-CPU time
spreads like wall time between processes, the spread is slower *execution* in some
processes, which no accounting of waiting removes. Each condition runs with
nothing else started (``quiet``) or one CPU-bound competitor (``hog``), in the
placements asked for (``--placements``):

* ``unpinned``: where the scheduler puts them;
* ``pinned``: parent and child pinned together to one CPU, alternating CPUs across
  processes;
* ``pairs``: the same, but two consecutive processes share a CPU (the two sides of an
  ABBA round would): if what spreads the process means were the CPU or the moment,
  the log ratio of the two would spread less than two independent means (SD about
  sqrt(2) x CV);
* ``fixed``: ``pairs`` with the memory layout fixed (``setarch -R``: no address space
  randomization; ``PYTHONHASHSEED=0``), to see whether the spread is the layout;
* ``shared``: ``pairs`` without address space randomization, each pair of processes
  given one random layout of its own (a random hash seed and a random amount of
  environment, which moves the stack), the same for both: the layout still varies
  from pair to pair, as a confidence interval needs, but the two sides of a pair
  share it, so their ratio could cancel it.

Each row also gives the spread of the three values *inside* a process (median CV), and
the SD of the log ratio of consecutive processes (1-2, 3-4, ...).

Usage:
    python benchmarks/pipe_clocks.py --processes 16 --trips 4000
    python benchmarks/pipe_clocks.py --processes 24 --placements pinned,pairs,fixed,shared
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any

ECHO = (
    "import sys\nfor line in iter(sys.stdin.buffer.readline, b''):\n"
    "    sys.stdout.buffer.write(line)\n    sys.stdout.buffer.flush()\n"
)
CLOCKS = ("wall", "wall - waits", "cpu")


def _sched(pid: int) -> tuple[int, int]:
    """Nanoseconds on a CPU and waiting for one, summed over the process's threads."""
    run = wait = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/schedstat", encoding="ascii") as fh:
            on, waited, _ = fh.read().split()
        run, wait = run + int(on), wait + int(waited)
    return run, wait


def worker(trips: int, cpu: int | None) -> None:
    """One process: a child echoing lines; per clock, seconds per round trip (JSON)."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})  # the child inherits it: both on one CPU
    cmd = [sys.executable, "-c", ECHO]
    child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None

    def trip() -> None:
        child.stdin.write(b"ping\n")  # type: ignore[union-attr]
        child.stdin.flush()  # type: ignore[union-attr]
        child.stdout.readline()  # type: ignore[union-attr]

    for _ in range(200):  # warm-up
        trip()
    values = []
    for _ in range(3):
        (p0, pw0), (c0, cw0) = _sched(os.getpid()), _sched(child.pid)
        t0 = time.perf_counter()
        for _ in range(trips):
            trip()
        wall = time.perf_counter() - t0
        (p1, pw1), (c1, cw1) = _sched(os.getpid()), _sched(child.pid)
        waits = (pw1 - pw0 + cw1 - cw0) / 1e9
        on_cpu = (p1 - p0 + c1 - c0) / 1e9
        values.append([wall / trips, (wall - waits) / trips, on_cpu / trips])
    child.kill()
    child.wait()
    print(json.dumps(values))


PLACEMENTS = ("unpinned", "pinned", "pairs", "fixed", "shared")


def _cpu_for(placement: str, i: int, cpus: list[int]) -> int | None:
    if placement == "unpinned":
        return None
    slot = i if placement == "pinned" else i // 2  # pairs/fixed: two processes a CPU
    return cpus[slot % len(cpus)]


def cell(processes: int, trips: int, placement: str) -> dict[str, Any]:
    """Per clock, the process means (µs per round trip); the within-process CVs (%)."""
    cpus = sorted(os.sched_getaffinity(0))
    means: dict[str, list[float]] = {c: [] for c in CLOCKS}
    inside: list[float] = []
    env = None
    for i in range(processes):
        cmd = [sys.executable, __file__, "--worker", str(trips)]
        cpu = _cpu_for(placement, i, cpus)
        if cpu is not None:
            cmd += ["--cpu", str(cpu)]
        if placement == "fixed":
            cmd = ["setarch", "-R", *cmd]
            env = dict(os.environ, PYTHONHASHSEED="0")
        elif placement == "shared":
            cmd = ["setarch", "-R", *cmd]
            if i % 2 == 0:  # a new layout for each pair, kept for its second process
                rng = random.Random(i)
                pad = "x" * rng.randrange(0, 4096, 16)
                env = dict(os.environ, PYTHONHASHSEED=str(rng.randrange(1, 2**32 - 1)), PAD=pad)
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
        values = json.loads(out.stdout)
        for k, clock in enumerate(CLOCKS):
            means[clock].append(statistics.mean(v[k] for v in values) * 1e6)
        walls = [v[0] for v in values]
        inside.append(statistics.stdev(walls) / statistics.mean(walls) * 100)
    return {"means": means, "inside": inside}


def _pair_sd(xs: list[float]) -> float:
    """SD (%) of log(x[2k+1] / x[2k]): the spread of consecutive processes' ratio.

    NaN where a mean is not positive ("wall - waits" can go negative when both
    processes share one CPU) or fewer than two pairs are left.
    """
    pairs = [(xs[i], xs[i + 1]) for i in range(0, len(xs) - 1, 2)]
    logs = [math.log(b / a) for a, b in pairs if a > 0 and b > 0]
    return statistics.stdev(logs) * 100 if len(logs) > 1 and len(logs) == len(pairs) else math.nan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", type=int, default=16)
    ap.add_argument("--trips", type=int, default=4000, help="round trips per value")
    ap.add_argument("--conditions", default="quiet,hog")
    ap.add_argument("--placements", default="unpinned,pinned", help=", ".join(PLACEMENTS))
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--cpu", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        worker(args.worker, args.cpu)
        return
    placements = args.placements.split(",")
    unknown = sorted(set(placements) - set(PLACEMENTS))
    if unknown:
        ap.error(f"unknown placement {', '.join(unknown)} (choose from {', '.join(PLACEMENTS)})")
    if {"fixed", "shared"} & set(placements) and shutil.which("setarch") is None:
        ap.error("placements fixed and shared need setarch (util-linux)")
    if args.processes < 4:
        ap.error("--processes must be at least 4 (two pairs of process means)")
    print(
        "| condition | placement | clock | mean µs/trip | CV of process means "
        "| SD of consecutive ratios | CV inside a process | range |"
    )
    print("|---|---|---|---:|---:|---:|---:|---|")
    for condition in args.conditions.split(","):
        hog = None
        if condition == "hog":
            hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            for placement in placements:
                _print_cell(condition, placement, cell(args.processes, args.trips, placement))
        finally:
            if hog is not None:
                hog.kill()
                hog.wait()


def _print_cell(condition: str, placement: str, got: dict[str, Any]) -> None:
    load = os.getloadavg()[0]  # after measuring: the 1-minute average lags
    inside = statistics.median(got["inside"])
    for clock, xs in got["means"].items():
        cv = statistics.stdev(xs) / statistics.mean(xs) * 100
        within = f"{inside:.1f}%" if clock == "wall" else ""
        print(
            f"| {condition} (load {load:.1f}) | {placement} | {clock} | "
            f"{statistics.mean(xs):.1f} | {cv:.1f}% | {_pair_sd(xs):.1f}% | {within} | "
            f"{min(xs):.1f}–{max(xs):.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
