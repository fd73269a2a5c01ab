"""Same-process pairing: both refs of one regime timed alternately in one worker process.

Process pairing (``interleave``) runs each ref in its own worker processes; on a
busy or virtualised machine a whole process runs fast or slow, and that noise
between processes dominates (FIELD-NOTES: per-process CV 14-24% where values
inside a process agree within 2%). Here every worker process holds both refs
(see ``measure/workers/duo.py``) and alternates their values, so the per-process
ratio head/base cancels what the process, its CPU and the moment share. The
unit of replication is still the process: its ratio is one observation, and
:mod:`perfctl.stats.paired` analyses them (Wilcoxon signed-rank).

It needs both refs importable into one interpreter: projects measured from
source (``install = false``); :func:`unsupported` says why otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

from perfctl.errors import UsageError
from perfctl.measure import interleave, runner
from perfctl.measure.environ import scrubbed_env
from perfctl.measure.executor import PYPERF, DuoSpec, Executor
from perfctl.measure.interleave import SIDES, Schedule, SideData
from perfctl.model import RegimeInfo

# Values per side in one duo process: the pairs inside a process share its
# speed, so more of them narrow each process's ratio for little start-up cost.
DUO_VALUES = 10

# The fewest rounds (--max-rounds) --pairing auto pairs in one process: the exact
# Wilcoxon p-value of n pairs is at least 2/2**n, where n processes a side reach far
# lower unpaired (8: 0.0078 against 0.00016). An early stop on a change needs p < 0.001
# on ±2% (11 pairs) and p < 0.0005 on the ±1% default (12 pairs), and a noisy side's
# verdict alpha/10 after Benjamini-Hochberg: with 8 pairs
# a 5x slowdown in a family of three came out inconclusive on a busy runner. At 12 a
# lone noisy change can still be called among up to 10 regimes (2/2**12 x 10 < 0.005).
AUTO_MIN_ROUNDS = 12

IsClear = Callable[[list[tuple[float, ...]], list[tuple[float, ...]]], bool]


def unsupported(workers: dict[str, runner.Worker]) -> str:
    """Why the two refs cannot share one process, or "" when they can."""
    if any(not runner.roots(workers[s]) for s in SIDES):
        return "same-process pairing needs install = false (both refs run from source)"
    if workers["base"].python.resolve() != workers["head"].python.resolve():
        if _version(workers["base"].python) != _version(workers["head"].python):
            return "same-process pairing needs the same Python on both sides"
    return ""


def _version(python: Path) -> str:
    import subprocess

    cmd = [str(python), "-c", "import sys; print(sys.version)"]
    # The environment's .pth files run at start-up: user code, so no secrets.
    env = scrubbed_env()
    return subprocess.run(cmd, env=env, capture_output=True, text=True, check=False).stdout.strip()


# The duo worker's timers (workers/duo.py TIMERS), as pyperf's "timer" metadata names them.
TIMER_NAMES = {
    "wall": "time.perf_counter() (perfctl --clock wall)",
    "cpu": "time.thread_time(): the timing thread's CPU time (perfctl --clock cpu)",
    "busy": "wall time less the timing thread's run-queue wait (perfctl --clock busy)",
}


def write_pyperf(data: SideData, info: RegimeInfo, dest: Path) -> list[Path]:
    """One ordinary pyperf file of this side's values (``pyperf stats`` reads it)."""
    import pyperf

    if not data.processes:
        return []
    meta: dict[str, object] = {"name": info.name, "loops": data.loops, "inner_loops": info.ops}
    if data.clock in TIMER_NAMES:  # pyperf's own "timer" key says what timed the values
        meta["timer"] = TIMER_NAMES[data.clock]
    # pyperf would otherwise collect metadata of this, the parent, process per run
    # (its date, load, memory, Python; ~3-10 ms each, a `file` call among them):
    # none of it describes the duo worker that took the values.
    runs = [
        pyperf.Run(list(p), warmups=None, metadata=meta, collect_metadata=False)
        for p in data.processes
    ]
    pyperf.Benchmark(runs).dump(str(dest), replace=True)
    return [dest]


def _with_files(data: dict[str, SideData], info: RegimeInfo, tmp: Path) -> dict[str, SideData]:
    """``data`` with each side's values also written as a pyperf file (kept in the store)."""
    for s in SIDES:
        data[s].files = write_pyperf(data[s], info, tmp / f"{s}-duo.json")
    return data


def measure_same_process(
    workers: dict[str, runner.Worker],
    info: RegimeInfo,
    sched: Schedule,
    logs: dict[str, Path],
    tmp: Path,
    is_clear: IsClear,
    progress: Callable[[int], None] | None = None,
    executor: Executor = PYPERF,
    hold: Callable[[float], float] | None = None,
) -> dict[str, SideData]:
    """Calibrate, then rounds of duo processes (``--pairing same-process``); pyperf files kept."""
    why = unsupported(workers)
    if why:
        raise UsageError(why, "use --pairing auto (the default) or process for this project")
    data = {s: SideData() for s in SIDES}
    deadline = executor.now() + (info.timeout or runner.DEFAULT_TIMEOUT)
    loops = interleave.calibrate_pair(
        workers, info, logs, data, deadline, executor, min_time=sched.min_time
    ).loops
    if not loops:
        return data
    data = measure_duo(
        workers, info, sched, loops, logs["base"], tmp, is_clear, progress, executor, hold
    )
    return _with_files(data, info, tmp)


def too_few_rounds(sched: Schedule) -> str:
    """Why ``sched`` has too few rounds for ``--pairing auto`` to pair, or ""."""
    if sched.max_rounds < AUTO_MIN_ROUNDS:
        return f"{sched.max_rounds} rounds are too few for a paired test"
    return ""


def process_reason(workers: dict[str, runner.Worker], info: RegimeInfo, sched: Schedule) -> str:
    """Why ``--pairing auto`` measures a regime in separate processes before calibrating
    it, or "" when calibration decides (:func:`measure_auto`)."""
    few = too_few_rounds(sched)
    if few:
        return few
    if info.clock != "wall":
        return "it times itself on the device clock"
    return unsupported(workers)


def measure_auto(
    workers: dict[str, runner.Worker],
    info: RegimeInfo,
    sched: Schedule,
    logs: dict[str, Path],
    tmp: Path,
    clear_for: Callable[[str], IsClear],
    progress: Callable[[int], None] | None = None,
    executor: Executor = PYPERF,
    hold: Callable[[float], float] | None = None,
) -> dict[str, SideData]:
    """``--pairing auto``: same-process pairing for a regime that can share a worker and
    whose timed calls ran no other process, separate processes otherwise.

    The calibration that finds the loop count also watches for processes
    (:mod:`perfctl.measure.spawns`), so choosing costs no extra process; the duo
    workers watch too. A regime whose first duo process fails, or whose duo process saw
    another process (in any round), is measured apart, in what is left of the time
    budget. The choice is in each side's ``SideData.pairing``; ``clear_for(pairing)``
    is its stopping rule.
    """
    args = (workers, info, sched, logs, tmp)
    if process_reason(workers, info, sched):
        return interleave.measure_pair(*args, clear_for("process"), progress, executor, hold)
    data = {s: SideData() for s in SIDES}
    deadline = executor.now() + (info.timeout or runner.DEFAULT_TIMEOUT)
    # Base decides: a regime whose base cannot even calibrate fails with that reason.
    cal = interleave.calibrate_pair(
        workers, info, logs, data, deadline, executor, min_time=sched.min_time, sides=("base",)
    )
    if not cal.ok:
        return data
    apart = partial(
        interleave.measure_pair, *args, clear_for("process"), progress, executor, hold,
        calibrated=(cal.loops, deadline),
    )  # fmt: skip
    if cal.spawned:
        return apart()
    begun = executor.now()
    data = measure_duo(
        workers, info, sched, cal.loops, logs["base"], tmp, clear_for("same-process"),
        progress, executor, hold, deadline=deadline, watch=True,
    )  # fmt: skip
    spawned = data["base"].spawned
    if spawned or not data["base"].processes:
        # The regime ran in a worker of its own (calibration), so a first duo process
        # that failed could not share one (it imports no code of the ref, a C extension
        # refused a second copy): measure it apart, as one that ran another process
        # (its duo values are dropped: base shared that process). The duo's error
        # stays in the log. One that used the regime's whole timeout fails instead.
        if executor.now() < deadline:
            _log(logs["base"], "perfctl: measuring it in separate worker processes instead")
            return apart(budget=max(sched.time_budget - (executor.now() - begun), 0.0))
        if spawned:
            for s in SIDES:
                data[s].reason = f"{data[s].reason}; no time was left to measure it apart"
    return _with_files(data, info, tmp)


def _log(log: Path, line: str) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a", encoding="utf-8") as fh:
        fh.write(line + "\n")


def measure_duo(
    workers: dict[str, runner.Worker],
    info: RegimeInfo,
    sched: Schedule,
    loops: int,
    log: Path,
    tmp: Path,
    is_clear: IsClear,
    progress: Callable[[int], None] | None = None,
    executor: Executor = PYPERF,
    hold: Callable[[float], float] | None = None,
    *,
    deadline: float | None = None,
    watch: bool = False,
) -> dict[str, SideData]:
    """Rounds of duo processes until the paired answer is clear (or the budget ends);
    ``hold`` waits out bursts before each round, as in :func:`interleave.measure_pair`.
    ``deadline`` ends the regime (default: its timeout from now); ``watch``: a duo
    process that sees another process ends the rounds, ``SideData.spawned`` set."""
    # The duo worker times run() on the host, never a regime's own (device) clock.
    data = {s: SideData(loops=loops, pairing="same-process", clock=sched.clock) for s in SIDES}
    clock = executor.now
    if deadline is None:
        deadline = clock() + (info.timeout or runner.DEFAULT_TIMEOUT)
    soft_end = clock() + sched.time_budget
    values = max(sched.values, DUO_VALUES)
    for i in range(sched.max_rounds):
        if hold is not None:
            soft_end += hold(deadline - clock())
        started = clock()
        spec = DuoSpec(loops=loops, values=values, n=i, tmp=tmp, clock=sched.clock, watch=watch)
        got = executor.run_duo(workers, info, spec, log=log, timeout=max(deadline - started, 1.0))
        if isinstance(got, str):
            for s in SIDES:
                data[s].ok, data[s].reason = False, str(got)
                data[s].spawned = isinstance(got, runner.Spawned)
            break
        for s in SIDES:
            data[s].processes.append(tuple(got[s]))
            data[s].order.append(i)
        if progress:
            progress(i + 1)
        now = clock()
        no_room = now + 3 * (now - started) + 0.5 > deadline
        if i + 1 >= sched.rounds and (
            now > soft_end or no_room or is_clear(data["base"].processes, data["head"].processes)
        ):
            break
    return data
