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

from perfctl.measure.procs import die_with_parent  # noqa: E402

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import pyperf  # noqa: E402

from perfctl.regimes import loader  # noqa: E402


def _forward(cmd: list[str], args: argparse.Namespace) -> None:
    cmd.extend(["--perfctl-regime", args.perfctl_regime])
    cmd.extend(["--perfctl-files", args.perfctl_files])
    if args.perfctl_metrics:
        cmd.extend(["--perfctl-metrics", args.perfctl_metrics])


def _record_metrics(path: str | None, instance: loader.Instance) -> None:
    if not path or instance.metrics is None:
        return
    values = {k: float(v) for k, v in instance.metrics().items()}
    # One short line per process, appended: concurrent-safe for O_APPEND writes.
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(values) + "\n")


def main() -> None:
    """Parse pyperf's and perfctl's options, then bench the named regime."""
    runner = pyperf.Runner(add_cmdline_args=_forward)
    runner.argparser.add_argument("--perfctl-regime", required=True)
    runner.argparser.add_argument("--perfctl-files", required=True)
    runner.argparser.add_argument("--perfctl-metrics", default=None)
    args = runner.parse_args()
    name = args.perfctl_regime
    defs = loader.load_files([Path(p) for p in args.perfctl_files.split(os.pathsep)])
    defn, kwargs = loader.find(defs, name)
    if not args.worker:
        # pyperf's master process only spawns workers; never set the regime up here.
        runner.bench_time_func(name, lambda loops: 0.0, inner_loops=defn.ops)
        return
    with loader.open_regime(defn, kwargs) as instance:
        run = instance.run

        def time_func(loops: int) -> float:
            t0 = time.perf_counter()
            for _ in range(loops):
                run()
            return time.perf_counter() - t0

        runner.bench_time_func(name, time_func, inner_loops=defn.ops)
        _record_metrics(args.perfctl_metrics, instance)


if __name__ == "__main__":
    # A SIGKILL of perfctl (or of pyperf's master) must take this worker with it.
    # Not at import: multiprocessing's spawned children re-import this file.
    die_with_parent()
    main()
