"""Profile worker: loop one regime's timed callable for a fixed time, under py-spy.

Run as ``python profile.py FILES REGIME DURATION STATUS_JSON`` where FILES are
regimes files joined by ``os.pathsep``. py-spy starts this script as its child,
and py-spy's exit code cannot be trusted, so the worker writes its own status
file (atomically, on every exit path it controls)::

    {"ok": bool, "ops": int, "calls": int, "elapsed_s": float, "cpu_s": float,
     "wait_s": float, "interrupted": bool, "pid": int, "error": str | null}

``elapsed_s`` is the loop's wall time, ``cpu_s`` this process's CPU time over
the loop (threads included, children not) and ``wait_s`` the time the looping
thread sat runnable while the machine ran something else (0 where the kernel
does not tell).

``error`` holds the traceback when the regime fails. SIGINT (sent by perfctl to
stop early) ends the loop cleanly: the status is still written, marked
``interrupted``. The parent finds this worker's frames below
:func:`perfctl_profile_loop` in the samples, so keep that name stable.
"""

import sys

# Importing the user's regimes files must not leave __pycache__ in their checkout.
sys.dont_write_bytecode = True

# Keep this folder off sys.path: this file's own name would shadow the stdlib
# `profile` module for everything imported below.
if sys.path and sys.path[0].endswith("workers"):
    del sys.path[0]

import json  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from perfctl.measure.procs import die_with_parent, thread_schedstat  # noqa: E402


def _waited_s() -> float:
    """Seconds this thread sat runnable, waiting for a CPU (Linux schedstat; else 0)."""
    return thread_schedstat()[1] / 1e9


def perfctl_profile_loop(run: Callable[[], Any], duration: float) -> dict[str, Any]:
    """Call ``run`` for ``duration`` seconds; the loop's counts and times."""
    calls = 0
    interrupted = False
    clock = time.perf_counter
    cpu, waited, start = time.process_time(), _waited_s(), clock()
    deadline = start + duration
    try:
        while True:
            run()
            calls += 1
            if clock() >= deadline:
                break
    except KeyboardInterrupt:
        # perfctl asked to stop early: keep what was measured so far.
        interrupted = True
    elapsed = clock() - start
    return {
        "calls": calls,
        "elapsed_s": elapsed,
        "cpu_s": time.process_time() - cpu,
        "wait_s": _waited_s() - waited,
        "interrupted": interrupted,
    }


def _write_status(path: str, status: dict[str, Any]) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(status, fh)
    os.replace(tmp, path)


def _profile(files: str, name: str, duration: float) -> dict[str, Any]:
    from perfctl.regimes import loader

    defs = loader.load_files([Path(p) for p in files.split(os.pathsep) if p])
    try:
        defn, kwargs = loader.find(defs, name)
    except KeyError:
        raise LookupError(f"no regime named {name!r} in {files}") from None
    with loader.open_regime(defn, kwargs) as instance:
        loop = perfctl_profile_loop(instance.run, duration)
    ok = loop["calls"] > 0
    error = None if ok else "interrupted before one call"
    return {**loop, "ok": ok, "ops": loop["calls"] * defn.ops, "error": error}


def main(argv: list[str]) -> int:
    """Profile-loop the regime named in argv and write the status file."""
    files, name, duration, status_path = argv
    status: dict[str, Any] = {
        "ok": False,
        "ops": 0,
        "calls": 0,
        "elapsed_s": 0.0,
        "cpu_s": 0.0,
        "wait_s": 0.0,
        "interrupted": False,
        "pid": os.getpid(),
        "error": None,
    }
    try:
        status.update(_profile(files, name, float(duration)))
    except BaseException:  # noqa: BLE001 - any failure, even SystemExit, is the regime's
        status["error"] = traceback.format_exc()
    _write_status(status_path, status)
    return 0 if status["ok"] else 1


if __name__ == "__main__":
    # A SIGKILL of perfctl (or of pyperf's master) must take this worker with it.
    # Not at import: multiprocessing's spawned children re-import this file.
    die_with_parent()
    import signal

    # perfctl stops this loop with SIGINT; under nohup or a CI runner the worker
    # would inherit an *ignored* SIGINT and never stop or write its status.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(main(sys.argv[1:]))
