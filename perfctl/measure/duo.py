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

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from perfctl.measure import runner
from perfctl.measure.environ import scrubbed_env
from perfctl.measure.interleave import SIDES, Schedule, SideData
from perfctl.measure.workers import WORKERS
from perfctl.model import RegimeInfo

DUO = WORKERS / "duo.py"
# Values per side in one duo process: the pairs inside a process share its
# speed, so more of them narrow each process's ratio for little start-up cost.
DUO_VALUES = 10

IsClear = Callable[[list[tuple[float, ...]], list[tuple[float, ...]]], bool]


def roots(worker: runner.Worker) -> list[str]:
    """The importable paths that hold this ref's own code (its PYTHONPATH entries)."""
    path = worker.env.get("PYTHONPATH", "")
    return [p for p in path.split(os.pathsep) if p]


def unsupported(workers: dict[str, runner.Worker]) -> str:
    """Why the two refs cannot share one process, or "" when they can."""
    if any(not roots(workers[s]) for s in SIDES):
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


def _spec(
    workers: dict[str, runner.Worker],
    info: RegimeInfo,
    loops: int,
    values: int,
    n: int,
    clock: str,
) -> dict[str, object]:
    base = workers["base"]
    return {
        "first": SIDES[n % 2],
        "clock": clock,
        "regime": info.name,
        "files": [str(f) for f in base.files],
        "loops": loops,
        "ops": info.ops,
        "warmups": 1,
        "values": values,
        "sides": {s: {"roots": roots(workers[s]), "cwd": str(workers[s].cwd)} for s in SIDES},
    }


def run_duo(
    workers: dict[str, runner.Worker],
    info: RegimeInfo,
    *,
    loops: int,
    values: int,
    tmp: Path,
    n: int,
    log: Path,
    timeout: float,
    clock: str = "wall",
) -> dict[str, list[float]] | str:
    """One duo process: per-op values of each side, or the reason it failed."""
    spec_path, out = tmp / f"duo-{n}.spec.json", tmp / f"duo-{n}.json"
    spec_path.write_text(json.dumps(_spec(workers, info, loops, values, n, clock)))
    base = workers["base"]
    env = runner.worker_env(base)
    cmd = [str(base.python), str(DUO), str(spec_path), str(out)]
    rc = runner.spawn(cmd, cwd=base.cwd, env=env, log=log, timeout=timeout)
    if rc != 0 or not out.exists():
        return runner.failure_reason(log, rc, timeout)
    data = json.loads(out.read_text())
    if "error" in data:
        return f"{data['error']} (log: {log})"
    return {s: [float(v) for v in data[s]] for s in SIDES}


def write_pyperf(data: SideData, info: RegimeInfo, dest: Path) -> list[Path]:
    """One ordinary pyperf file of this side's values (``pyperf stats`` reads it)."""
    import pyperf

    if not data.processes:
        return []
    meta = {"name": info.name, "loops": data.loops, "inner_loops": info.ops}
    runs = [pyperf.Run(list(p), warmups=None, metadata=meta) for p in data.processes]
    pyperf.Benchmark(runs).dump(str(dest), replace=True)
    return [dest]


def measure_duo(
    workers: dict[str, runner.Worker],
    info: RegimeInfo,
    sched: Schedule,
    loops: int,
    log: Path,
    tmp: Path,
    is_clear: IsClear,
    progress: Callable[[int], None] | None = None,
) -> dict[str, SideData]:
    """Rounds of duo processes until the paired answer is clear (or the budget ends)."""
    data = {s: SideData(loops=loops) for s in SIDES}
    timeout = info.timeout or runner.DEFAULT_TIMEOUT
    deadline = time.monotonic() + timeout
    soft_end = time.monotonic() + sched.time_budget
    for i in range(sched.max_rounds):
        started = time.monotonic()
        got = run_duo(
            workers,
            info,
            loops=loops,
            values=max(sched.values, DUO_VALUES),
            tmp=tmp,
            n=i,
            log=log,
            timeout=max(deadline - started, 1.0),
            clock=sched.clock,
        )
        if isinstance(got, str):
            for s in SIDES:
                data[s].ok, data[s].reason = False, got
            break
        for s in SIDES:
            data[s].processes.append(tuple(got[s]))
            data[s].order.append(i)
        if progress:
            progress(i + 1)
        now = time.monotonic()
        no_room = now + 3 * (now - started) + 0.5 > deadline
        if i + 1 >= sched.rounds and (
            now > soft_end or no_room or is_clear(data["base"].processes, data["head"].processes)
        ):
            break
    return data
