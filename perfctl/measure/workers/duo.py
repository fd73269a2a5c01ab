"""Same-process worker: one regime of two refs, set up side by side, timed alternately.

On a shared machine the speed of a whole worker process varies by tens of
percent from one process to the next (FIELD-NOTES, and benchmarks/README.md:
"same-process pairing"), while values taken close together inside one process
agree. This worker loads the regime twice in one interpreter, once with each
ref's code on ``sys.path``, and times the two in alternation (ABBA at the level
of values), so both sides of every pair share the process, its CPU and the
moment. Each side's own modules (those under its roots, and the regimes
modules) are kept apart: they are swapped into ``sys.modules`` (with that
side's ``sys.path``, ``PYTHONPATH`` and working directory) before each of its
values, outside the timed region.

Usage: ``python duo.py SPEC.json OUT.json``. SPEC holds the regime name, the
regimes files, loops/warmups/values, and per side ``roots`` (importable paths)
and ``cwd``. OUT gets ``{"base": [...], "head": [...], "modules": {...}}``
with per-operation seconds, or ``{"error": "..."}``.
"""

import sys

sys.dont_write_bytecode = True

# Keep this folder off sys.path so nothing here shadows a module.
if sys.path and sys.path[0].endswith("workers"):
    del sys.path[0]

import json  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from perfctl.measure import spawns  # noqa: E402
from perfctl.measure.procs import die_with_parent, thread_schedstat  # noqa: E402

SIDES = ("base", "head")


class Side:
    """One ref's view of the interpreter: its paths, modules and set-up regime."""

    def __init__(self, name: str, spec: dict[str, Any]) -> None:
        self.name = name
        self.roots = [os.path.realpath(r) for r in spec["roots"]]
        self.cwd = spec["cwd"]
        self.pythonpath = os.pathsep.join(spec["roots"])
        self.modules: dict[str, Any] = {}
        self.run: Any = None
        self.context: Any = None
        # File -> whether it lies under a root. leave() asks about every loaded module
        # after every value, outside the timed region but inside the round: a
        # realpath() each (an lstat per path part) cost 1.9 ms a value with 119
        # modules loaded and 32 ms with numpy, scipy and plotly (913), ~0.7 s a round
        # of 22 values; cached, 0.06 and 0.75 ms (benchmarks/README.md, "the
        # same-process worker's bookkeeping between values", duo_bookkeeping.py).
        self._owned: dict[str, bool] = {}

    def owns(self, module: Any) -> bool:
        name = getattr(module, "__name__", "")
        if name.startswith("perfctl_regimes_"):
            return True
        path = getattr(module, "__file__", None)
        if isinstance(path, os.PathLike):
            path = os.fspath(path)
        if not path or not isinstance(path, str):
            return False
        owned = self._owned.get(path)
        if owned is None:
            real = os.path.realpath(path)
            owned = any(real == r or real.startswith(r + os.sep) for r in self.roots)
            self._owned[path] = owned
        return owned

    def enter(self, base_path: list[str]) -> None:
        sys.path[:] = self.roots + base_path
        os.environ["PYTHONPATH"] = self.pythonpath
        os.chdir(self.cwd)
        sys.modules.update(self.modules)

    def leave(self) -> None:
        for name in list(sys.modules):
            if self.owns(sys.modules[name]):
                self.modules[name] = sys.modules.pop(name)


def _set_up(side: Side, spec: dict[str, Any], base_path: list[str]) -> None:
    from perfctl.regimes import loader

    side.enter(base_path)
    try:
        defs = loader.load_files([Path(p) for p in spec["files"]])
        defn, kwargs = loader.find(defs, spec["regime"])
        side.context = loader.open_regime(defn, kwargs)
        side.run = side.context.__enter__().run
    finally:
        side.leave()
    if not [m for m in side.modules if not m.startswith("perfctl_regimes_")]:
        raise RuntimeError(
            f"{side.name}: the regime imports no code from the ref's own paths, "
            "so both sides would run the same code"
        )


def _waited_ns() -> int:
    """Nanoseconds this thread has sat runnable, waiting for a CPU (Linux schedstat)."""
    return thread_schedstat()[1]


def _busy() -> float:
    """Wall time less the time this thread waited for a CPU: it leaves out being
    preempted behind another job, and keeps waiting on children, I/O or a lock."""
    # The wall reading must fall between two equal run-delay readings: a preemption
    # between the reads would otherwise add or drop a whole time slice.
    while True:
        before = _waited_ns()
        now = time.perf_counter_ns()
        if _waited_ns() == before:
            return (now - before) / 1e9


# "cpu": this thread's CPU time, which leaves out the time the thread sat
# preempted behind another job; blind to waiting on children or I/O.
TIMERS = {"wall": time.perf_counter, "cpu": time.thread_time, "busy": _busy}


def _value(side: Side, loops: int, base_path: list[str], clock: str) -> float:
    side.enter(base_path)
    run = side.run
    timer = TIMERS[clock]
    try:
        t0 = timer()
        for _ in range(loops):
            run()
        return timer() - t0
    finally:
        side.leave()


class Spawned(Exception):
    """A watched side's timed calls ran other processes (``--pairing auto``)."""


def _measure(sides: dict[str, Side], spec: dict[str, Any], base_path: list[str]) -> dict[str, Any]:
    loops, ops = spec["loops"], spec["ops"]
    out: dict[str, Any] = {s: [] for s in SIDES}
    flip = spec.get("first", "base") != "base"
    # Auto's calibration watched base only: a head that starts processes where base
    # did not would share them with base here, so the duo stops at the first sign.
    watch = spawns.Watch() if spec.get("watch") else None
    for i in range(spec["warmups"] + spec["values"]):
        order = SIDES if (i % 2 == 0) != flip else SIDES[::-1]
        for s in order:
            seconds = _value(sides[s], loops, base_path, spec.get("clock", "wall"))
            if watch is not None and watch.check():
                raise Spawned("another process ran beside the timed calls (calibration saw none)")
            if i >= spec["warmups"]:
                out[s].append(seconds / (loops * ops))
    return out


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    out_path = Path(sys.argv[2])
    if spec.get("affinity"):  # --affinity: before anything is set up, as pyperf does
        os.sched_setaffinity(0, spec["affinity"])
    base_path = list(sys.path)
    sides = {s: Side(s, spec["sides"][s]) for s in SIDES}
    try:
        # Which side is set up (and so laid out in memory) first alternates from
        # process to process, so a first-loaded advantage cancels across rounds.
        for s in SIDES if spec.get("first", "base") == "base" else SIDES[::-1]:
            _set_up(sides[s], spec, base_path)
        result: dict[str, Any] = _measure(sides, spec, base_path)
        result["modules"] = {s: sorted(sides[s].modules) for s in SIDES}
    except Spawned as exc:
        print(f"perfctl: {exc}", file=sys.stderr)  # the parent logs what it decided
        result = {"error": str(exc), "spawned": True}
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        traceback.print_exc()
        result = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        for s in SIDES:
            if sides[s].context is not None:
                sides[s].enter(base_path)
                sides[s].context.__exit__(None, None, None)
                sides[s].leave()
    out_path.write_text(json.dumps(result))


if __name__ == "__main__":
    # A SIGKILL of perfctl (or of pyperf's master) must take this worker with it.
    # Not at import: multiprocessing's spawned children re-import this file.
    die_with_parent()
    main()
