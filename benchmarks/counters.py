"""`--measure instructions`: A/A spread, detection of a +1% change, and cost against wall time.

    python benchmarks/counters.py [--processes 6] [--splits 20]

Measures two regimes with the real counter worker under callgrind (one value =
two callgrind processes, N and 2N loops): ``base`` (a 2,000-step integer loop
per op) and ``plus1`` (2,020 steps: about 1% more instructions). Then:

1. A/A: the CV of ``base``'s values across its processes;
2. verdicts of ``--splits`` A/A comparisons (3 against 3 disjoint processes of
   ``base``) and of ``--splits`` base-vs-plus1 comparisons (3 processes a side,
   drawn from the measured ones), through perfctl's own decision
   (``stats/verdicts.decide_all``, band 0.5%): resampled, so the processes are
   re-used across comparisons (said in the output);
3. ``--measure memory`` (tracemalloc, no valgrind): blocks per op of ``keep5`` and
   ``keep6`` (regimes keeping 5, and 6, objects per op) in ``--processes`` processes
   each: exact to the object? and the verdicts of ``--splits`` keep5-vs-keep6
   comparisons (3 processes a side, resampled);
4. cost: seconds per counter value (two callgrind processes) against seconds per
   pyperf worker process (1 warmup + 3 values of ``--min-time`` 0.05, compare's
   default), both wall time of the whole process, start-up included.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from perfctl.measure import counters, runner
from perfctl.model import OK, RegimeInfo, RegimeResult
from perfctl.regimes import discovery
from perfctl.stats.verdicts import decide_all

REGIMES = """\
from perfctl import regime

def _loop(n):
    s = 0
    for i in range(n):
        s += i * i
    return s

@regime(family="cg", ops=1)
def base():
    return lambda: _loop(2000)

@regime(family="cg", ops=1)
def plus1():
    return lambda: _loop(2020)

@regime(family="mem", ops=1)
def keep5():
    kept = []
    return lambda: kept.extend([object() for _ in range(5)])

@regime(family="mem", ops=1)
def keep6():
    kept = []
    return lambda: kept.extend([object() for _ in range(6)])
"""


def _timed_sample(worker: runner.Worker, info: RegimeInfo, loops: int, tmp: Path) -> tuple:
    log = tmp / "log.txt"
    t0 = time.monotonic()
    got = counters.sample("instructions", worker, info, loops, tmp / f"s{time.time_ns()}", log)
    if not got.ok:
        sys.exit(f"counter process failed: {got.reason}")
    return got.value, time.monotonic() - t0


def _pyperf_seconds(worker: runner.Worker, info: RegimeInfo, tmp: Path) -> float:
    log = tmp / "pyperf.log"
    cal = runner.calibrate(worker, info, min_time=0.05, log=log, timeout=600)
    t0 = time.monotonic()
    runner.run_process(
        worker, info, loops=cal.loops, warmups=1, values=3, min_time=0.05,
        out=tmp / f"p{time.time_ns()}.json", metrics=tmp / "m.jsonl", log=log, timeout=600,
    )  # fmt: skip
    return time.monotonic() - t0


def _verdict(b: list[float], h: list[float]) -> str:
    res = {
        side: RegimeResult("r", "cg", OK, processes=tuple((v,) for v in vals), unit="x/op")
        for side, vals in (("base", b), ("head", h))
    }
    return decide_all({"r": res}, threshold=counters.BAND, alpha=0.05)[0].verdict


def _tally(pairs: list[tuple[list[float], list[float]]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for b, h in pairs:
        v = _verdict(b, h)
        out[str(v)] = out.get(str(v), 0) + 1
    return out


def _memory(worker: runner.Worker, infos: dict, loops: int, tmp: Path, args: argparse.Namespace,
            rng: random.Random) -> None:  # fmt: skip
    """Blocks per op of keep5/keep6: exact? and +1 object per op detected?"""
    got: dict[str, list[float]] = {"keep5": [], "keep6": []}
    for _ in range(args.processes):
        for name in got:
            s = counters.sample("memory", worker, infos[name], loops, tmp / f"m{time.time_ns()}",
                                tmp / "mem.log")  # fmt: skip
            if not s.ok:
                sys.exit(f"memory process failed: {s.reason}")
            got[name].append(s.value)
    print(f"memory: keep5 blocks/op {sorted(set(got['keep5']))}, keep6 {sorted(set(got['keep6']))}")
    pairs = [(rng.sample(got["keep5"], 3), rng.sample(got["keep6"], 3)) for _ in range(args.splits)]
    print(f"+1 object/op verdicts (3 vs 3, resampled): {_tally(pairs)}")


def main() -> None:
    """Measure and print the figures benchmarks/README.md quotes."""
    p = argparse.ArgumentParser()
    p.add_argument("--processes", type=int, default=6)
    p.add_argument("--splits", type=int, default=20)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="perfctl-cg-bench-") as d:
        tmp = Path(d)
        (tmp / "regimes.py").write_text(REGIMES)
        files = (tmp / "regimes.py",)
        infos = {i.name: i for i in discovery.probe(Path(sys.executable), list(files), cwd=tmp)}
        worker = runner.Worker(Path(sys.executable), tmp, {}, files)
        loops, why = counters.loops_for([worker], infos["base"], tmp / "cal.log", "instructions")
        print(f"load average {os.getloadavg()[0]:.1f}; N = {loops} loops; valgrind "
              f"{counters.require_valgrind()}")  # fmt: skip
        vals: dict[str, list[float]] = {"base": [], "plus1": []}
        secs: list[float] = []
        for _ in range(args.processes):
            for name in vals:  # alternate, so load drift hits both alike
                v, s = _timed_sample(worker, infos[name], loops, tmp)
                vals[name].append(v)
                secs.append(s)
        b, h = vals["base"], vals["plus1"]
        cv = statistics.stdev(b) / statistics.mean(b)
        print(f"base instructions/op: {sorted(b)}; A/A CV across processes {cv * 100:.4f}%")
        print(f"plus1/base: {statistics.mean(h) / statistics.mean(b) - 1:+.3%}")
        rng = random.Random(0)
        halves = list(itertools.combinations(range(len(b)), 3))
        aa = [([b[i] for i in c], [b[i] for i in range(len(b)) if i not in c]) for c in halves]
        aa = [x for x in aa if len(x[1]) >= 3][: args.splits]
        ab = [(rng.sample(b, 3), rng.sample(h, 3)) for _ in range(args.splits)]
        print(f"A/A verdicts (3 vs 3, resampled from {len(b)} processes): {_tally(aa)}")
        print(f"+1% verdicts (3 vs 3, resampled): {_tally(ab)}")
        mem_loops, _ = counters.loops_for([worker], infos["keep5"], tmp / "cal.log", "memory")
        _memory(worker, infos, mem_loops, tmp, args, rng)
        py = statistics.median(_pyperf_seconds(worker, infos["base"], tmp) for _ in range(3))
        cg = statistics.median(secs)
        print(f"cost: {cg:.2f} s per counter value vs {py:.2f} s per pyperf worker "
              f"process: {cg / py:.1f}x")  # fmt: skip


if __name__ == "__main__":
    main()
