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

import contextlib
import os
import random
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

from perfctl.errors import ProfilerUnavailable, UsageError
from perfctl.measure import batch, memory, runner
from perfctl.measure.interleave import SIDES, Schedule, SideData, round_order
from perfctl.measure.workers import WORKERS
from perfctl.model import RegimeInfo
from perfctl.regimes.discovery import join_files

COUNTER_WORKER = WORKERS / "counters.py"
MEASURES = ("time", "instructions", "memory")
UNITS = {"time": "s", "instructions": "instructions/op", "memory": "blocks/op"}
BAND = 0.005  # counters are near-deterministic: a 0.5% noise band by default
PROCESSES = 3  # processes per side (a value each): enough when the CV is ~0
# Native seconds of the N loops. Under callgrind the subtraction is exact whatever
# N is, so N has only to outlast warming: at 10 ms the loops were about half of a
# counter process's instructions (a quarter of its time); 2 ms gave the same counts
# (benchmarks/README.md). Memory keeps 10 ms: it runs natively, so fewer loops would
# save nothing and let a one-off allocation weigh more in blocks/op.
MIN_TIME = {"instructions": 0.002, "memory": 0.01}
# At least this many warming loops for a regime shorter than MIN_TIME: CPython
# specialises a function's code after about eight calls, so loops N+1..2N are
# specialised. A regime of MIN_TIME or more per call keeps N = 1: its own inner
# work warms within the first call, and more calls would only multiply its cost.
MIN_LOOPS = 8
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


def _failed(part: Path, shown: Path, rc: int | None, timeout: float) -> Sample:
    """Why a counter process failed, read from its own log; the reason names ``shown``."""
    text = part.read_bytes().decode(errors="replace") if part.exists() else ""
    bad = [ln.strip() for ln in text.splitlines() if any(m in ln for m in _UNSUPPORTED)]
    if bad:
        return Sample(ok=False, skipped=True, reason=f"cannot run under callgrind: {bad[0]}")
    return Sample(ok=False, reason=runner.failure_reason(part, rc, timeout, shown=shown))


def _commands(
    measure: str, worker: runner.Worker, info: RegimeInfo, loops: int, tmp: Path
) -> list[batch.Command]:
    """The processes of one value: callgrind with N and 2N loops, or one memory worker."""
    tmp.mkdir(parents=True, exist_ok=True)
    env, timeout = counter_env(worker), info.timeout or runner.DEFAULT_TIMEOUT
    if measure == "memory":
        argv = [*worker_cmd(worker, info, "memory", loops), "--out", str(tmp / "memory.json")]
        return [batch.Command(tuple(argv), worker.cwd, env, tmp / "memory.log", timeout)]
    valgrind = require_valgrind()
    return [
        batch.Command(
            (
                valgrind,
                "--tool=callgrind",
                f"--callgrind-out-file={tmp / f'callgrind.{tag}.out'}",
                *worker_cmd(worker, info, "instructions", n),
            ),
            worker.cwd,
            env,
            tmp / f"{tag}.log",
            timeout,
        )
        for n, tag in ((loops, "n"), (2 * loops, "2n"))
    ]


def _value(measure: str, info: RegimeInfo, loops: int, tmp: Path) -> Sample:
    """One value from its processes, all finished with status 0 (``tmp`` holds their output)."""
    if measure == "memory":
        return _memory_value(tmp / "memory.json")
    outs = [tmp / f"callgrind.{tag}.out" for tag in ("n", "2n")]
    if not all(out.exists() for out in outs):
        return Sample(ok=False, reason="callgrind wrote no output file")
    counts = [read_total(out) for out in outs]
    # I(2N) - I(N): the instructions of loops N+1..2N alone (see the module docstring).
    return Sample(ok=True, value=(counts[1] - counts[0]) / (loops * info.ops))


def _memory_value(out: Path) -> Sample:
    if not out.exists():
        return Sample(ok=False, reason="the memory worker wrote no figures")
    got = memory.read_figures(out)
    return Sample(ok=True, value=got[memory.VALUE], metrics=got)


def _append(part: Path, log: Path) -> None:
    """Add one process's own log (its last MiB) to its side's log, the one reasons name."""
    runner.trim_log(part)
    with contextlib.suppress(OSError), open(log, "ab") as out, open(part, "rb") as src:
        shutil.copyfileobj(src, out)
    runner.trim_log(log)


def _outcome(
    measure: str, info: RegimeInfo, loops: int, job: tuple[runner.Worker, Path, Path],
    ran: list[tuple[batch.Command, int | None]], size: int,
) -> Sample | None:  # fmt: skip
    """A value's sample: its first failed process decides; None if some never started."""
    _, tmp, log = job
    for command, rc in ran:
        if rc != 0:
            return _failed(command.log, log, rc, command.timeout)
    if len(ran) < size:
        return None
    return _value(measure, info, loops, tmp)


def jobs_limit() -> int:
    """How many counter processes run at once: ``PERFCTL_COUNTER_JOBS``, else one per CPU."""
    raw = os.environ.get("PERFCTL_COUNTER_JOBS", "").strip()
    if not raw:
        return batch.usable_cpus()
    if not raw.isdigit() or int(raw) < 1:
        raise UsageError(
            f"PERFCTL_COUNTER_JOBS must be a whole number of at least 1, not {raw!r}",
            "unset it for one process per CPU, or set 1 for one at a time",
        )
    return int(raw)


def samples(
    measure: str,
    info: RegimeInfo,
    loops: int,
    jobs: Sequence[tuple[runner.Worker, Path, Path]],
    progress: Callable[[int], None] | None = None,
) -> list[Sample | None]:
    """One value per (worker, scratch folder, log), their processes run side by side.

    Counts do not depend on what else runs, so up to :func:`jobs_limit` processes
    run at once. After a failure nothing new starts: values none of whose processes
    failed but some never started are None. ``progress`` hears how many values are
    complete, each time one completes.
    """
    groups = [_commands(measure, w, info, loops, tmp) for w, tmp, _ in jobs]
    flat = [c for g in groups for c in g]
    value_of = [v for v, g in enumerate(groups) for _ in g]
    left = [len(g) for g in groups]
    finished = [0]  # values whose every process has finished

    def done(i: int) -> None:
        _append(flat[i].log, jobs[value_of[i]][2])  # the side's log, as each one finishes
        left[value_of[i]] -= 1
        if not left[value_of[i]]:
            finished[0] += 1
            if progress:
                progress(finished[0])

    rcs = batch.call_all(flat, limit=jobs_limit(), stop=lambda rc: rc != 0, done=done)
    got: list[Sample | None] = []
    first = 0
    for job, group in zip(jobs, groups, strict=True):
        index = range(first, first + len(group))
        first += len(group)
        ran = [(flat[i], rcs[i]) for i in index if i in rcs]
        got.append(_outcome(measure, info, loops, job, ran, len(group)))
    return got


def sample(
    measure: str, worker: runner.Worker, info: RegimeInfo, loops: int, tmp: Path, log: Path
) -> Sample:
    """One value of ``measure`` (``tmp`` is its own scratch folder; its processes side by side)."""
    (got,) = samples(measure, info, loops, [(worker, tmp, log)])
    assert got is not None  # the value's first process always starts
    return got


def loops_for(
    workers: list[runner.Worker], info: RegimeInfo, log: Path, measure: str
) -> tuple[int, str]:
    """A loop count N worth ``MIN_TIME`` native seconds (first side that can run), or why not."""
    reason = ""
    for worker in workers:
        timeout = info.timeout or runner.DEFAULT_TIMEOUT
        out = runner.calibrate(worker, info, min_time=MIN_TIME[measure], log=log, timeout=timeout)
        if out.ok:
            return (out.loops if out.loops == 1 else max(out.loops, MIN_LOOPS)), ""
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
    loops, why = loops_for([workers[s] for s in SIDES], info, logs["base"], sched.measure)
    if not loops:
        for s in SIDES:
            data[s].ok, data[s].reason = False, why
        return data
    rng = random.Random(sched.seed)
    order = [side for i in range(sched.rounds) for side in round_order(i, sched, rng)]
    jobs = [(workers[side], tmp / f"{side}-{n}", logs[side]) for n, side in enumerate(order)]
    rounds = [0]

    def values_done(v: int) -> None:  # a round is one value a side
        if progress and v // 2 > rounds[0]:
            rounds[0] = v // 2
            progress(rounds[0])

    got = samples(sched.measure, info, loops, jobs, values_done)
    metrics: dict[str, list[dict[str, float]]] = {s: [] for s in SIDES}
    for first in range(0, len(order), 2):  # the earlier rule: no round after a failed one
        for n in (first, first + 1):
            one = got[n]
            if one is not None:
                _record(data[order[n]], one, n, metrics[order[n]])
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
    loops, why = loops_for([worker], info, log, measure)
    if not loops:
        return runner.Outcome(ok=False, reason=why)
    values: list[tuple[float, ...]] = []
    rows: list[dict[str, float]] = []
    jobs = [(worker, tmp / f"p{n}", log) for n in range(processes)]
    for got in samples(measure, info, loops, jobs):
        if got is None:  # never started: a failed process stopped the batch (returned here)
            continue
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
