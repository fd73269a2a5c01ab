"""Benchmark worker: one regime, measured by pyperf.

pyperf's Runner owns ``sys.argv`` and re-executes this very file for each
worker process, so perfctl's own options are added to pyperf's parser and
forwarded with ``add_cmdline_args``. The regime is only set up inside worker
processes (never in pyperf's master process).
"""

import sys

# Importing the user's regimes files must not leave __pycache__ in their checkout.
sys.dont_write_bytecode = True

# Keep this folder off sys.path so nothing here shadows a module.
if sys.path and sys.path[0].endswith("workers"):
    del sys.path[0]

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import pyperf  # noqa: E402

from perfctl.measure import spawns  # noqa: E402
from perfctl.measure.procs import die_with_parent  # noqa: E402
from perfctl.regimes import loader  # noqa: E402


def _forward(cmd: list[str], args: argparse.Namespace) -> None:
    cmd.extend(["--perfctl-regime", args.perfctl_regime])
    cmd.extend(["--perfctl-files", args.perfctl_files])
    if args.perfctl_metrics:
        cmd.extend(["--perfctl-metrics", args.perfctl_metrics])


def _record_metrics(path: str | None, instance: loader.Instance, extra: dict[str, float]) -> None:
    if not path or (instance.metrics is None and not extra):
        return
    values = {k: float(v) for k, v in (instance.metrics() if instance.metrics else {}).items()}
    values.update(extra)
    # One short line per process, appended: concurrent-safe for O_APPEND writes.
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(values) + "\n")


def main() -> None:
    """Parse pyperf's and perfctl's options, then bench the named regime."""
    runner = pyperf.Runner(add_cmdline_args=_forward)
    runner.argparser.add_argument("--perfctl-regime", required=True)
    runner.argparser.add_argument("--perfctl-files", required=True)
    runner.argparser.add_argument("--perfctl-metrics", default=None)
    # Calibration only: a file to write "1" to when the timed calls ran other processes
    # (measure/spawns.py; --pairing auto reads it), else "0".
    runner.argparser.add_argument("--perfctl-spawned", default=None)
    args = runner.parse_args()
    if args.worker and args.affinity:
        # pyperf pins the worker only when timing starts; the regime's set-up (and any
        # child process it starts, which inherits the mask) must run there too.
        from perfctl.measure.machine import parse_cpus

        os.sched_setaffinity(0, parse_cpus(args.affinity))
    elif args.worker and hasattr(os, "sched_getaffinity"):
        # Not pinned: without --affinity pyperf would pin to the kernel's isolated CPUs
        # on its own when timing starts, where the record says "not pinned" (perfctl
        # pins only where --affinity asks). Naming the mask it has keeps it in place.
        args.affinity = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    name = args.perfctl_regime
    defs = loader.load_files([Path(p) for p in args.perfctl_files.split(os.pathsep)])
    defn, kwargs = loader.find(defs, name)
    if not args.worker:
        # pyperf's master process only spawns workers; never set the regime up here.
        runner.bench_time_func(name, lambda loops: 0.0, inner_loops=defn.ops)
        return
    with loader.open_regime(defn, kwargs) as instance:
        host: list[float] = []  # wall seconds per op, beside a regime's own clock
        own = _own_clock(instance, defn.ops, host)
        clocks = [_sm_clock_mhz()] if own else []
        watch = spawns.Watch() if args.perfctl_spawned else None
        time_func = own or _wall_clock(instance.run)
        runner.bench_time_func(
            name, watch.wrap(time_func) if watch else time_func, inner_loops=defn.ops
        )
        if watch is not None:
            Path(args.perfctl_spawned).write_text("1" if watch.started else "0")
        extra = {"host_us": 1e6 * sorted(host)[len(host) // 2]} if host else {}
        if own:
            clocks.append(_sm_clock_mhz())
            extra.update(
                {k: v for k, v in zip(("sm_mhz_start", "sm_mhz_end"), clocks, strict=True) if v}
            )
        _record_metrics(args.perfctl_metrics, instance, extra)


def _sm_clock_mhz() -> float | None:
    # The device's SM clock: boost and throttling move device times, so a
    # regime records it before and after and perfctl warns when it moved.
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    query = ["--query-gpu=clocks.sm", "--format=csv,noheader,nounits", "-i", "0"]
    try:
        out = subprocess.run([exe, *query], capture_output=True, text=True, timeout=10)
        return float(out.stdout.split()[0]) if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def _wall_clock(run: Callable[[], object]) -> Callable[[int], float]:
    def time_func(loops: int) -> float:
        t0 = time.perf_counter()
        for _ in range(loops):
            run()
        return time.perf_counter() - t0

    return time_func


def _own_clock(
    instance: loader.Instance, ops: int, host: list[float]
) -> Callable[[int], float] | None:
    # A regime that times itself (device time from CUDA events): pyperf records
    # its figure; the host's wall time of the same calls becomes a metric, so a
    # launch-bound regime shows host >> device.
    own = instance.time_loops
    if own is None:
        return None

    def time_func(loops: int) -> float:
        t0 = time.perf_counter()
        seconds = own(loops)
        host.append((time.perf_counter() - t0) / (loops * ops))
        return seconds

    return time_func


if __name__ == "__main__":
    # A SIGKILL of perfctl (or of pyperf's master) must take this worker with it.
    # Not at import: multiprocessing's spawned children re-import this file.
    die_with_parent()
    main()
