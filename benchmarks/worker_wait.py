"""How late perfctl sees a worker process exit.

perfctl starts every worker through ``perfctl.measure.procs.call`` with a timeout.
``Popen.wait(timeout)`` polls with sleeps that grow to 50 ms, so an exit is seen up
to 50 ms late; ``procs.wait`` waits on a Linux pidfd instead. This script runs a
child that sleeps a fixed time (a worker process of separate-process pairing takes
~0.35 s on our 2-core VM, a same-process round ~1.3 s) and reports, per design, the
mean time from start to the parent seeing the exit, less the child's sleep:

* ``procs.call`` as perfctl runs it (pidfd);
* the same with ``os.pidfd_open`` refused (``Popen.wait(timeout)`` polling, as before);
* ``subprocess.run`` with no timeout (a blocking ``waitpid``: the floor).

Usage: ``python benchmarks/worker_wait.py [--repeat 12]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from perfctl.measure import procs


def _mean_ms(run: Callable[[], Any], repeat: int, sleep: float) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0 - sleep)
    return statistics.mean(times) * 1e3


def _polling(argv: list[str]) -> None:
    real = getattr(os, "pidfd_open", None)

    def refuse(pid: int, flags: int = 0) -> int:
        raise OSError("refused: measure Popen.wait's polling")

    os.pidfd_open = refuse
    try:
        procs.call(argv, timeout=60)
    finally:
        if real is None:
            del os.pidfd_open
        else:
            os.pidfd_open = real


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=12)
    args = ap.parse_args()
    print(
        "| child runs | procs.call (pidfd) | Popen.wait(timeout) polling | subprocess.run, no timeout |"
    )
    print("|---|---:|---:|---:|")
    for sleep in (0.35, 0.37, 1.3, 1.33):
        argv = [sys.executable, "-S", "-c", f"import time; time.sleep({sleep})"]
        cells = [
            _mean_ms(partial(procs.call, argv, timeout=60), args.repeat, sleep),
            _mean_ms(partial(_polling, argv), args.repeat, sleep),
            _mean_ms(partial(subprocess.run, argv, check=True), args.repeat, sleep),
        ]
        print(f"| {sleep} s | " + " | ".join(f"+{c:.1f} ms" for c in cells) + " |")


if __name__ == "__main__":
    main()
