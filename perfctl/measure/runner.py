"""Run regimes in isolated pyperf worker processes and collect their values.

Two ways of driving pyperf, both through the one worker script
(``measure/workers/bench.py``):

* :func:`measure` lets pyperf's own master spawn calibration and worker
  processes (``perfctl run``: one checkout, pyperf's usual protocol);
* :func:`calibrate` and :func:`run_process` run single ``--worker`` processes,
  so :mod:`perfctl.jobs.compare` can interleave the processes of two refs.

Every child runs in its own process group with a deadline; on timeout or
Ctrl-C the whole group is killed, so no worker outlives perfctl.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from perfctl.measure import procs
from perfctl.measure.environ import scrubbed_env
from perfctl.measure.workers import WORKERS
from perfctl.model import FAILED, OK, RegimeInfo
from perfctl.regimes.discovery import join_files

BENCH = WORKERS / "bench.py"
DEFAULT_TIMEOUT = 600.0
LOG_KEEP_BYTES = 2**20  # the end of a log says why a worker failed
MIN_TIMEOUT = 0.1  # what a worker gets when its deadline has (nearly) passed


@dataclass(frozen=True)
class Precision:
    """How much pyperf measures: processes × (warmups + values), min value time."""

    name: str
    processes: int
    values: int
    warmups: int = 1
    min_time: float = 0.1

    def pyperf_args(self) -> list[str]:
        """The matching pyperf command-line options."""
        return [
            "-p",
            str(self.processes),
            "-n",
            str(self.values),
            "-w",
            str(self.warmups),
            "--min-time",
            str(self.min_time),
        ]


# pyperf's own presets (see FIELD-NOTES): default 20×(1+3), --fast 10×(1+2),
# --rigorous 40×(1+3).
PRECISION_FAST = Precision("fast", processes=10, values=2)
PRECISION_DEFAULT = Precision("default", processes=20, values=3)
PRECISION_RIGOROUS = Precision("rigorous", processes=40, values=3)


@dataclass(frozen=True)
class Worker:
    """How to start workers for one target: interpreter, cwd, environment."""

    python: Path
    cwd: Path
    env: dict[str, str]
    files: tuple[Path, ...]
    inherit: tuple[str, ...] = ()
    affinity: tuple[int, ...] = ()  # CPUs the worker is pinned to (pyperf's --affinity)


@dataclass(frozen=True)
class Outcome:
    """What one pyperf invocation produced."""

    ok: bool
    processes: tuple[tuple[float, ...], ...] = ()
    loops: int = 0
    pyperf_json: Path | None = None
    reason: str = ""
    metrics: dict[str, float] | None = None
    unit: str = "s"  # seconds/op, or a counter's unit (measure/counters.py)
    skipped: bool = False  # cannot be measured this way (e.g. not under callgrind)
    spawned: bool = False  # calibration: the timed calls ran other processes (spawns.py)


def spawn(
    cmd: Sequence[str], *, cwd: Path, env: dict[str, str], log: Path, timeout: float
) -> int | None:
    """Run argv with output appended to ``log``; None when it timed out."""
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(log, "ab") as out:
            # Its own process group, killed whole on timeout, Ctrl-C or any error.
            return procs.call(
                cmd,
                timeout=max(timeout, MIN_TIMEOUT),
                cwd=cwd,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
    finally:
        trim_log(log)


def trim_log(log: Path, keep: int = LOG_KEEP_BYTES) -> None:
    """Keep only the last ``keep`` bytes of a worker log (a regime may print a lot)."""
    try:
        size = log.stat().st_size
        if size <= keep:
            return
        with open(log, "rb") as fh:
            fh.seek(size - keep)
            tail = fh.read()
    except OSError:
        return
    head = f"[perfctl: the first {size - len(tail):,} bytes of this log were cut]\n"
    tmp = log.with_name(f".{log.name}.trim")
    try:
        tmp.write_bytes(head.encode() + tail)
        os.replace(tmp, log)
    except OSError:
        tmp.unlink(missing_ok=True)


def worker_env(worker: Worker) -> dict[str, str]:
    """A scrubbed environment for worker processes, as pyperf gives its own."""
    return scrubbed_env(worker.inherit, worker.env)


def _base_cmd(worker: Worker, regime: RegimeInfo, metrics: Path | None) -> list[str]:
    cmd = [
        str(worker.python),
        str(BENCH),
        "--perfctl-regime",
        regime.name,
        "--perfctl-files",
        join_files(worker.files),
    ]
    if metrics is not None:
        cmd += ["--perfctl-metrics", str(metrics)]
    if worker.affinity:  # a pyperf worker pins itself; pyperf's master passes it on
        cmd += ["--affinity", ",".join(map(str, worker.affinity))]
    return cmd


_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)\b.*")
# pyperf's master reporting its worker's exit status (perfctl run).
_WORKER_EXIT = re.compile(r"failed with exit code (-?\d+)")


def _failure(log: Path, rc: int | None, timeout: float, shown: Path | None = None) -> str:
    if rc is None:
        return f"timed out after {seconds(max(timeout, MIN_TIMEOUT))} (log: {shown or log})"
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    # The worker's own status: pyperf's master (perfctl run) exits 1 whatever it was.
    codes = [int(m.group(1)) for ln in lines if (m := _WORKER_EXIT.search(ln))]
    code = codes[-1] if rc > 0 and codes else rc
    if code < 0:
        return f"killed by signal {-code} ({_signal_name(-code)}) (log: {shown or log})"
    # The worker's own exception, not pyperf's master reporting that the worker failed.
    excs = [ln for ln in lines if _EXC_LINE.match(ln) and "failed with exit code" not in ln]
    last = excs[-1] if excs else "the worker process died"
    return f"{last} (exit code {code}; log: {shown or log})"


def _signal_name(number: int) -> str:
    import signal

    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown signal"


def seconds(value: float) -> str:
    """``12 s`` / ``0.1 s``: a duration as a person reads it (never ``-0 s``)."""
    value = max(value, 0.0)
    return f"{value:.0f} s" if value >= 1 else f"{value:.1g} s"


def failure_reason(log: Path, rc: int | None, timeout: float, *, shown: Path | None = None) -> str:
    """Why a worker failed, read from ``log``: its own exception line, a signal or the timeout.

    The reason names ``shown`` (default ``log``): the log that outlives a scratch one.
    """
    return _failure(log, rc, timeout, shown)


def read_processes(path: Path) -> tuple[tuple[tuple[float, ...], ...], int]:
    """Per-process values (warmups dropped) and loops from a pyperf JSON file."""
    import pyperf

    bench = pyperf.Benchmark.load(str(path))
    procs = tuple(tuple(r.values) for r in bench.get_runs() if r.values)
    return procs, int(bench.get_metadata().get("loops", 0) or 0)


def read_metrics(path: Path) -> dict[str, float]:
    """Median of each metric over the worker processes that reported it."""
    if not path.exists():
        return {}
    rows = [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
    keys = sorted({k for row in rows for k in row})
    return {k: float(median(row[k] for row in rows if k in row)) for k in keys}


def measure(
    worker: Worker, regime: RegimeInfo, precision: Precision, *, log: Path, workdir: Path
) -> Outcome:
    """Measure one regime with pyperf's own master process."""
    out, metrics = workdir / "pyperf.json", workdir / "metrics.jsonl"
    inherit = ",".join(
        sorted({"PERFCTL_SUBJECTS", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE", *worker.inherit})
    )
    cmd = [
        *_base_cmd(worker, regime, metrics),
        *precision.pyperf_args(),
        "--quiet",
        "-o",
        str(out),
        f"--inherit-environ={inherit}",
    ]
    timeout = regime.timeout or DEFAULT_TIMEOUT
    rc = spawn(cmd, cwd=worker.cwd, env=worker_env(worker), log=log, timeout=timeout)
    if rc != 0 or not out.exists():
        return Outcome(ok=False, reason=_failure(log, rc, timeout))
    procs, loops = read_processes(out)
    return Outcome(
        ok=True, processes=procs, loops=loops, pyperf_json=out, metrics=read_metrics(metrics)
    )


def calibrate(
    worker: Worker, regime: RegimeInfo, *, min_time: float, log: Path, timeout: float
) -> Outcome:
    """Find pyperf's loop count for a regime in one calibration process."""
    with procs.scratch("perfctl-cal-") as tmp:
        out, spawned = Path(tmp) / "cal.json", Path(tmp) / "spawned"
        cmd = [
            *_base_cmd(worker, regime, None),
            "--worker",
            "--calibrate-loops",
            "--min-time",
            str(min_time),
            "-o",
            str(out),
            "--perfctl-spawned",
            str(spawned),
        ]
        rc = spawn(cmd, cwd=worker.cwd, env=worker_env(worker), log=log, timeout=timeout)
        if rc != 0 or not out.exists():
            return Outcome(ok=False, reason=_failure(log, rc, timeout))
        import pyperf

        loops = int(pyperf.Benchmark.load(str(out)).get_metadata().get("calibrate_loops", 1))
        ran = spawned.exists() and spawned.read_text().strip() == "1"
    return Outcome(ok=True, loops=max(loops, 1), spawned=ran)


def run_process(
    worker: Worker,
    regime: RegimeInfo,
    *,
    loops: int,
    warmups: int,
    values: int,
    min_time: float,
    out: Path,
    metrics: Path,
    log: Path,
    timeout: float,
) -> Outcome:
    """One pyperf worker process with a fixed loop count."""
    cmd = [
        *_base_cmd(worker, regime, metrics),
        "--worker",
        "-l",
        str(loops),
        "-w",
        str(warmups),
        "-n",
        str(values),
        "--min-time",
        str(min_time),
        "-o",
        str(out),
    ]
    started = time.monotonic()
    rc = spawn(cmd, cwd=worker.cwd, env=worker_env(worker), log=log, timeout=timeout)
    if rc != 0 or not out.exists():
        return Outcome(ok=False, reason=_failure(log, rc, time.monotonic() - started))
    procs, _ = read_processes(out)
    return Outcome(ok=True, processes=procs, loops=loops, pyperf_json=out)


def status_of(outcome: Outcome) -> str:
    """OK or FAILED."""
    return OK if outcome.ok else FAILED


# -- same-process pairing: one worker process holding both refs (measure/duo.py) --

DUO = WORKERS / "duo.py"
DUO_SIDES = ("base", "head")


class Spawned(str):
    """Why a watched duo worker stopped: another process ran beside its timed calls
    (a type, not a prefix, so no error text of the regime can pass for it)."""

    __slots__ = ()


def roots(worker: Worker) -> list[str]:
    """The importable paths that hold this ref's own code (its PYTHONPATH entries)."""
    path = worker.env.get("PYTHONPATH", "")
    return [p for p in path.split(os.pathsep) if p]


def _duo_spec(
    workers: dict[str, Worker], info: RegimeInfo, loops: int, values: int, n: int, clock: str
) -> dict[str, object]:
    base = workers["base"]
    sides = {s: {"roots": roots(workers[s]), "cwd": str(workers[s].cwd)} for s in DUO_SIDES}
    return {
        "first": DUO_SIDES[n % 2],
        "clock": clock,
        "regime": info.name,
        "files": [str(f) for f in base.files],
        "loops": loops,
        "ops": info.ops,
        "warmups": 1,
        "values": values,
        "sides": sides,
        "affinity": list(base.affinity),
    }


def run_duo(
    workers: dict[str, Worker],
    info: RegimeInfo,
    *,
    loops: int,
    values: int,
    tmp: Path,
    n: int,
    log: Path,
    timeout: float,
    clock: str = "wall",
    watch: bool = False,
) -> dict[str, list[float]] | str:
    """One duo process: per-op values of each side, or the reason it failed (``watch``:
    a :class:`Spawned` reason when another process ran, see measure/spawns.py)."""
    spec_path, out = tmp / f"duo-{n}.spec.json", tmp / f"duo-{n}.json"
    spec = {**_duo_spec(workers, info, loops, values, n, clock), "watch": watch}
    spec_path.write_text(json.dumps(spec))
    base = workers["base"]
    cmd = [str(base.python), str(DUO), str(spec_path), str(out)]
    rc = spawn(cmd, cwd=base.cwd, env=worker_env(base), log=log, timeout=timeout)
    if rc != 0 or not out.exists():
        return failure_reason(log, rc, timeout)
    data = json.loads(out.read_text())
    if "error" in data:
        reason = f"{data['error']} (log: {log})"
        return Spawned(reason) if data.get("spawned") is True else reason
    return {s: [float(v) for v in data[s]] for s in DUO_SIDES}
