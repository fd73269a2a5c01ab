"""Interleaved measurement of one regime on two refs, process by process.

Each round runs one pyperf worker process per ref, in blocks of two rounds, ABBA
or BAAB, in pairs of one of each whose order the seed draws (or a seeded random
order per round), so drift of the machine hits both sides equally and a periodic
competitor does not keep to one side. The process is the unit of replication.
After ``rounds`` rounds the answer is checked with
:func:`perfctl.stats.decision.is_clear`; while it is not clear, more rounds are added
until ``max_rounds`` or the regime's time budget is reached (sequential sampling).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from perfctl.measure import procs, runner
from perfctl.measure.executor import PYPERF, Executor, Job, ProcessSpec
from perfctl.model import RegimeInfo
from perfctl.stats.band import DEFAULT_BAND

SIDES = ("base", "head")


@dataclass(frozen=True)
class Schedule:
    """How many processes to run and how long each is."""

    rounds: int = 10
    max_rounds: int = 80
    time_budget: float = 60.0
    values: int = 3
    warmups: int = 1
    min_time: float = 0.05
    order: str = "abba"  # or "random"
    # "process": each ref in its own worker processes; "same-process": both refs
    # in every worker process, timed alternately (measure/duo.py); "auto": chosen per
    # regime (duo.measure_auto).
    pairing: str = "auto"
    # "wall" (perf_counter), "cpu" (the timing thread's CPU time) or "busy" (wall less
    # the time that thread waited for a CPU); the last two same-process only.
    clock: str = "wall"
    seed: int = 0
    threshold: float = DEFAULT_BAND
    # "time" (pyperf wall time), or a counter: "instructions" (callgrind) or "memory"
    # (tracemalloc), one value per process, measured by measure/counters.py.
    measure: str = "time"
    # Seconds a round may be held while other work fills the CPUs (measure/quiet.py);
    # 0 measures into bursts.
    burst_wait: float = 0.0
    # CPUs every worker process of both sides is pinned to (--affinity); () leaves
    # placement to the operating system.
    affinity: tuple[int, ...] = ()


@dataclass
class SideData:
    """What one ref produced for one regime."""

    processes: list[tuple[float, ...]] = field(default_factory=list)
    order: list[int] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    ok: bool = True
    reason: str = ""
    loops: int = 0
    unit: str = "s"  # what the values count: seconds/op, instructions/op, blocks/op
    skipped: bool = False  # it cannot be measured this way (not a failure of the regime)
    pairing: str = "process"  # how the values were measured (RegimeResult.pairing)
    spawned: bool = False  # a watched duo worker saw another process (runner.Spawned)
    clock: str = ""  # what timed the values when not the regime's own clock (--clock)


def round_order(i: int, schedule: Schedule, rng: random.Random) -> tuple[str, str]:
    """Which side goes first in round ``i``.

    ``abba``: rounds come in blocks of two, ABBA or BAAB, and blocks in pairs of
    one of each, the pair's order drawn from the seed. A block cancels a linear
    drift exactly, as a fixed AB BA AB BA would; but a fixed alternation ties each
    side to its places in the block, so anything repeating with the block's period
    (a job busy 1 s, idle 1 s) can fall on one side block after block. Drawn, it
    falls on either side at random: noise the interval sees, not a shift
    (benchmarks/README.md, "Bursty"). Drawing pairs rather than single blocks
    keeps a run of one orientation to two blocks at most.
    """
    if schedule.order == "random":
        return ("base", "head") if rng.random() < 0.5 else ("head", "base")
    # Seeded per pair of blocks, not from ``rng``: the same rounds for the same seed,
    # whoever asks and in whatever order.
    abba_first = random.Random(f"{schedule.seed}:{i // 4}").random() < 0.5
    abba = (i // 2 % 2 == 0) == abba_first  # this block's way round
    base_first = (i % 2 == 0) == abba
    return ("base", "head") if base_first else ("head", "base")


def calibrate_pair(
    workers: dict[str, runner.Worker],
    info: RegimeInfo,
    logs: dict[str, Path],
    data: dict[str, SideData],
    deadline: float,
    executor: Executor = PYPERF,
    *,
    min_time: float,
    sides: tuple[str, ...] = SIDES,
) -> runner.Outcome:
    """The first of ``sides`` whose calibration worked: one loop count for both sides
    (0 when none could run) and whether it ran other processes; a failed side's reason
    goes into ``data``."""
    # One loop count for both sides, so each value amortises the same loop overhead.
    for side in sides:
        left = deadline - executor.now()
        if left <= 0:
            # The other side used the regime's whole timeout: say so, rather than
            # "timed out after 0 s" for a side that never had a chance to run.
            data[side].ok = False
            data[side].reason = "not measured: the other side used up the regime's timeout"
            continue
        job = Job(side, workers[side], info, logs[side])
        out = executor.calibrate(job, min_time=min_time, timeout=left)
        if out.ok:
            return out
        data[side].ok, data[side].reason = False, out.reason
    return runner.Outcome(ok=False)


def _one(
    executor: Executor,
    job: Job,
    sched: Schedule,
    loops: int,
    tmp: Path,
    n: int,
    deadline: float,
    data: SideData,
) -> None:
    spec = ProcessSpec(
        loops=loops,
        warmups=sched.warmups,
        values=sched.values,
        min_time=sched.min_time,
        out=tmp / f"{job.side}-{n}.json",
        metrics=tmp / f"{job.side}-metrics.jsonl",
    )
    res = executor.run_process(job, spec, timeout=max(deadline - executor.now(), 1.0))
    if not res.ok:
        data.ok, data.reason = False, res.reason
        return
    data.processes.extend(res.processes)
    data.order.extend([n] * len(res.processes))
    if res.pyperf_json is not None:
        data.files.append(res.pyperf_json)


def measure_pair(
    workers: dict[str, runner.Worker],
    info: RegimeInfo,
    sched: Schedule,
    logs: dict[str, Path],
    tmp: Path,
    is_clear: Callable[[list[tuple[float, ...]], list[tuple[float, ...]]], bool],
    progress: Callable[[int], None] | None = None,
    executor: Executor = PYPERF,
    hold: Callable[[float], float] | None = None,
    *,
    calibrated: tuple[int, float] | None = None,
    budget: float | None = None,
) -> dict[str, SideData]:
    """Measure one regime on both sides, interleaved; stops early once clear.

    ``hold`` is asked before each round to wait out a burst of other work; the time
    it held is added to the time budget, which is for measuring. ``calibrated`` is
    the loop count and the regime's deadline when a caller calibrated already;
    ``budget`` what is left of the time budget (default: all of it).
    """
    data = {s: SideData() for s in SIDES}
    clock = executor.now
    soft_end = clock() + (sched.time_budget if budget is None else budget)
    if calibrated is None:
        deadline = clock() + (info.timeout or runner.DEFAULT_TIMEOUT)
        cal = calibrate_pair(workers, info, logs, data, deadline, executor, min_time=sched.min_time)
        loops = cal.loops
    else:
        loops, deadline = calibrated
    if not loops:
        return data
    for side in SIDES:
        data[side].loops = loops
    jobs = {s: Job(s, workers[s], info, logs[s]) for s in SIDES}
    rng, n = random.Random(sched.seed), 0
    for i in range(sched.max_rounds):
        if hold is not None:  # given the time left before the regime's timeout
            soft_end += hold(deadline - clock())
        started = clock()
        for side in round_order(i, sched, rng):
            _one(executor, jobs[side], sched, loops, tmp, n, deadline, data[side])
            n += 1
        if progress:
            progress(i + 1)
        if not (data["base"].ok and data["head"].ok):
            break
        now = clock()
        # Optional rounds must never run into the regime's own timeout: that would turn
        # a regime whose timeout is shorter than the sampling budget into a failure.
        no_room = now + 3 * (now - started) + 0.5 > deadline  # rounds vary: keep a margin
        if i + 1 >= sched.rounds and (
            now > soft_end or no_room or is_clear(data["base"].processes, data["head"].processes)
        ):
            break
    return data


def merge_pyperf(files: list[Path], dest: Path) -> Path | None:
    """Merge worker JSON files into one pyperf file (pyperf tools read it)."""
    import pyperf

    if not files:
        return None
    bench = pyperf.Benchmark.load(str(files[0]))
    for f in files[1:]:
        bench.add_runs(pyperf.Benchmark.load(str(f)))
    dest.parent.mkdir(parents=True, exist_ok=True)
    bench.dump(str(dest), replace=True)
    return dest


def workdir() -> AbstractContextManager[str]:
    """A scratch directory for one regime's worker files (swept if perfctl is killed)."""
    return procs.scratch("perfctl-cmp-")
