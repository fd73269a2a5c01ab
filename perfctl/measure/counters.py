"""Deterministic counters beside wall time: ``--measure instructions`` and ``memory``.

One process = one value, as for wall time, so the same store, statistics and
verdicts apply; only the unit differs (``instructions/op``, ``blocks/op``).

**Instructions: N and 2N loops, subtracted.** Callgrind's client requests
(``CALLGRIND_START_INSTRUMENTATION`` …) are machine-code sequences a C
extension compiles in; pure Python cannot issue them, and ``--toggle-collect``
matches *C* symbols, which a Python function has none of (the interpreter runs
every Python function through the same ``_PyEval_EvalFrameDefault``). So each
value comes from two callgrind processes of the counter worker, identical except
for the loop count: I(2N) - I(N) is exactly the instructions of loops N+1..2N,
because start-up, imports, set-up, teardown and the first, warming loops are the
same instructions in both. That holds when the process is deterministic, which
callgrind makes it (it serialises threads and lays memory out the same way each
run) given a fixed ``PYTHONHASHSEED`` and command lines of equal length (the
loop count is zero-padded). Measured here: two processes of a dict loop gave the
same count to the instruction. The steady-state loops are what is counted, not
the first call (caches filling, the adaptive interpreter specialising).

**Memory: tracemalloc around the same loops** (:mod:`perfctl.measure.memory`).
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

from perfctl.errors import ProfilerUnavailable
from perfctl.measure import memory, runner
from perfctl.measure.interleave import SIDES, Schedule, SideData, round_order
from perfctl.measure.workers import WORKERS
from perfctl.model import RegimeInfo
from perfctl.regimes.discovery import join_files

COUNTER_WORKER = WORKERS / "counters.py"
MEASURES = ("time", "instructions", "memory")
UNITS = {"time": "s", "instructions": "instructions/op", "memory": "blocks/op"}
BAND = 0.005  # counters are near-deterministic: a 0.5% noise band by default
PROCESSES = 3  # processes per side (a value each): enough when the CV is ~0
MIN_TIME = 0.01  # native seconds of the N loops; callgrind runs them ~10-50x slower
LOOPS_WIDTH = 12
HASH_SEED = "0"
# valgrind's own complaints: the regime cannot run under it (not a regime bug).
_UNSUPPORTED = ("unhandled instruction bytes", "the 'impossible' happened", "valgrind: fatal")


@dataclass(frozen=True)
class Sample:
    """One process's value (or why there is none) and its side figures."""

    ok: bool
    value: float = 0.0
    reason: str = ""
    skipped: bool = False
    metrics: dict[str, float] = field(default_factory=dict)


def unit_of(measure: str) -> str:
    """The unit a measure's values are stored in (``s`` for wall time)."""
    return UNITS[measure]


def require_valgrind() -> str:
    """The valgrind executable, or ProfilerUnavailable (exit 3) saying how to get it."""
    found = shutil.which("valgrind")
    if not found:
        raise ProfilerUnavailable(
            "valgrind is not installed (--measure instructions runs regimes under callgrind)",
            "apt-get install valgrind",
        )
    return found


def skip_reason(info: RegimeInfo, measure: str) -> str | None:
    """Why a regime cannot be measured this way, before trying (GPU work under callgrind)."""
    if measure == "instructions" and "gpu" in info.requires:
        return "cannot run under callgrind: it needs a GPU, which valgrind neither runs nor sees"
    return None


def worker_cmd(worker: runner.Worker, info: RegimeInfo, mode: str, loops: int) -> list[str]:
    """The counter worker's command line; the loop count has a fixed width."""
    return [
        str(worker.python),
        str(COUNTER_WORKER),
        "--perfctl-regime",
        info.name,
        "--perfctl-files",
        join_files(worker.files),
        "--mode",
        mode,
        "--loops",
        str(loops).zfill(LOOPS_WIDTH),
    ]


def counter_env(worker: runner.Worker) -> dict[str, str]:
    """The scrubbed worker environment with a fixed hash seed (dict/set layout fixed)."""
    return {**runner.worker_env(worker), "PYTHONHASHSEED": HASH_SEED}


def read_total(path: Path) -> int:
    """The total instruction count (``Ir``) of a callgrind output file."""
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise ValueError(f"no totals line in {path}")


def _log_size(log: Path) -> int:
    return log.stat().st_size if log.exists() else 0


def _failed(log: Path, start: int, rc: int | None, timeout: float) -> Sample:
    text = log.read_bytes()[start:].decode(errors="replace") if log.exists() else ""
    bad = [ln.strip() for ln in text.splitlines() if any(m in ln for m in _UNSUPPORTED)]
    if bad:
        return Sample(ok=False, skipped=True, reason=f"cannot run under callgrind: {bad[0]}")
    return Sample(ok=False, reason=runner.failure_reason(log, rc, timeout))


def _callgrind(
    worker: runner.Worker, info: RegimeInfo, loops: int, out: Path, log: Path, timeout: float
) -> int | Sample:
    cmd = [
        require_valgrind(),
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        *worker_cmd(worker, info, "instructions", loops),
    ]
    start = _log_size(log)
    rc = runner.spawn(cmd, cwd=worker.cwd, env=counter_env(worker), log=log, timeout=timeout)
    if rc != 0 or not out.exists():
        return _failed(log, start, rc, timeout)
    return read_total(out)


def instructions_sample(
    worker: runner.Worker, info: RegimeInfo, loops: int, tmp: Path, log: Path, timeout: float
) -> Sample:
    """Instructions per op of the steady-state loop: I(2N) - I(N), divided by N·ops."""
    counts = []
    for n, tag in ((loops, "n"), (2 * loops, "2n")):
        got = _callgrind(worker, info, n, tmp / f"callgrind.{tag}.out", log, timeout)
        if isinstance(got, Sample):
            return got
        counts.append(got)
    per_op = (counts[1] - counts[0]) / (loops * info.ops)
    return Sample(ok=True, value=per_op)


def sample(
    measure: str, worker: runner.Worker, info: RegimeInfo, loops: int, tmp: Path, log: Path
) -> Sample:
    """One process's value of ``measure`` (``tmp`` is this process's own scratch folder)."""
    tmp.mkdir(parents=True, exist_ok=True)
    timeout = info.timeout or runner.DEFAULT_TIMEOUT
    if measure == "instructions":
        return instructions_sample(worker, info, loops, tmp, log, timeout)
    out = tmp / "memory.json"
    cmd = [*worker_cmd(worker, info, "memory", loops), "--out", str(out)]
    got = memory.memory_figures(cmd, worker, counter_env(worker), out, log, timeout)
    if isinstance(got, str):
        return Sample(ok=False, reason=got)
    return Sample(ok=True, value=got[memory.VALUE], metrics=got)


def loops_for(workers: list[runner.Worker], info: RegimeInfo, log: Path) -> tuple[int, str]:
    """A loop count N worth ``MIN_TIME`` native seconds (first side that can run), or why not."""
    reason = ""
    for worker in workers:
        timeout = info.timeout or runner.DEFAULT_TIMEOUT
        out = runner.calibrate(worker, info, min_time=MIN_TIME, log=log, timeout=timeout)
        if out.ok:
            return out.loops, ""
        reason = out.reason
    return 0, reason


def _record(d: SideData, s: Sample, n: int, metrics: list[dict[str, float]]) -> None:
    if not s.ok:
        d.ok, d.reason, d.skipped = False, s.reason, s.skipped
        return
    d.processes.append((s.value,))
    d.order.append(n)
    metrics.append(s.metrics)


def measure_pair(
    workers: dict[str, runner.Worker],
    info: RegimeInfo,
    sched: Schedule,
    logs: dict[str, Path],
    tmp: Path,
    progress: Callable[[int], None] | None = None,
) -> dict[str, SideData]:
    """``sched.rounds`` ABBA rounds of one counter process per side (no sequential stop)."""
    if sched.measure == "instructions":
        require_valgrind()
    data = {s: SideData(unit=unit_of(sched.measure)) for s in SIDES}
    why = skip_reason(info, sched.measure)
    if why:
        for s in SIDES:
            data[s].ok, data[s].skipped, data[s].reason = False, True, why
        return data
    loops, why = loops_for([workers[s] for s in SIDES], info, logs["base"])
    if not loops:
        for s in SIDES:
            data[s].ok, data[s].reason = False, why
        return data
    metrics: dict[str, list[dict[str, float]]] = {s: [] for s in SIDES}
    rng = random.Random(sched.seed)
    n = 0
    for i in range(sched.rounds):
        for side in round_order(i, sched, rng):
            got = sample(sched.measure, workers[side], info, loops, tmp / f"{side}-{n}", logs[side])
            _record(data[side], got, n, metrics[side])
            n += 1
        if progress:
            progress(i + 1)
        if not all(data[s].ok for s in SIDES):
            break
    for s in SIDES:
        data[s].loops = loops
        write_metrics(metrics[s], tmp / f"{s}-metrics.jsonl")
    return data


def write_metrics(rows: list[dict[str, float]], path: Path) -> None:
    """Per-process figures as JSON lines, the format :func:`runner.read_metrics` reads."""
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows if r), encoding="utf-8")


def measure_run(
    worker: runner.Worker, info: RegimeInfo, measure: str, processes: int, log: Path, tmp: Path
) -> runner.Outcome:
    """``perfctl run --measure …``: ``processes`` counter processes of one checkout."""
    if measure == "instructions":
        require_valgrind()
    skip = skip_reason(info, measure)
    if skip:
        return runner.Outcome(ok=False, reason=skip, skipped=True)
    loops, why = loops_for([worker], info, log)
    if not loops:
        return runner.Outcome(ok=False, reason=why)
    values: list[tuple[float, ...]] = []
    rows: list[dict[str, float]] = []
    for n in range(processes):
        got = sample(measure, worker, info, loops, tmp / f"p{n}", log)
        if not got.ok:
            return runner.Outcome(ok=False, reason=got.reason, skipped=got.skipped)
        values.append((got.value,))
        rows.append(got.metrics)
    keys = sorted({k for r in rows for k in r})
    metrics = {k: float(median(r[k] for r in rows if k in r)) for k in keys}
    return runner.Outcome(
        ok=True, processes=tuple(values), loops=loops, metrics=metrics, unit=unit_of(measure)
    )


def counter_settings(
    pairing: str, threshold: float | None, rounds: int | None, max_rounds: int | None
) -> tuple[float, int, int]:
    """Band and rounds of a counter comparison: 0.5% and 3 processes a side unless given."""
    from perfctl.errors import UsageError

    if pairing != "process":
        raise UsageError(
            "--measure instructions/memory runs each ref in its own processes",
            "drop --pairing same-process",
        )
    first = rounds if rounds is not None else PROCESSES
    # No sequential sampling: counts do not get clearer with more processes.
    return (threshold if threshold is not None else BAND), first, max(max_rounds or first, first)
