"""What the same-process worker pays between two values to keep the refs apart.

Around every value the duo worker (``perfctl/measure/workers/duo.py``) puts one
side's modules into ``sys.modules`` and takes them out again; taking them out asks
of every loaded module whether its file lies under that side's roots. That is
outside the timed region, but inside the round, so it is time a comparison spends
per value. This script times one enter + leave of a side with few modules loaded
and after importing numpy, scipy and plotly (as a regime of a data project would),
with the worker's per-file cache and with the cache emptied before every ask (a
``realpath`` per module, as before the cache).

Usage: ``python benchmarks/duo_bookkeeping.py [--repeat 50]``
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import perfctl.measure.workers

WORKER = Path(perfctl.measure.workers.__file__).parent / "duo.py"
HEAVY = ("numpy", "scipy.stats", "plotly.graph_objects", "jinja2", "httpx")


def _worker() -> Any:
    saved = sys.dont_write_bytecode  # the worker sets it for its own process
    spec = importlib.util.spec_from_file_location("perfctl_duo_bookkeeping", WORKER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.dont_write_bytecode = saved
    return module


def _per_value(side: Any, repeat: int, *, cached: bool) -> float:
    """Seconds one enter + leave takes, the median of ``repeat``."""
    base = list(sys.path)
    times = []
    for _ in range(repeat):
        if not cached:
            side._owned.clear()
        t0 = time.perf_counter()
        side.enter(base)
        side.leave()
        times.append(time.perf_counter() - t0)
    sys.path[:] = base
    return sorted(times)[len(times) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()
    duo = _worker()
    with tempfile.TemporaryDirectory() as root:
        side = duo.Side("base", {"roots": [root], "cwd": root})
        print("| modules loaded | enter + leave, cached | uncached (a realpath per module) |")
        print("|---|---:|---:|")
        for label, imports in (("few", ()), ("numpy, scipy, plotly, jinja2, httpx", HEAVY)):
            for name in imports:
                importlib.import_module(name)
            cached = _per_value(side, args.repeat, cached=True)
            uncached = _per_value(side, args.repeat, cached=False)
            print(
                f"| {len(sys.modules)} ({label}) | {cached * 1e3:.2f} ms | {uncached * 1e3:.2f} ms |"
            )


if __name__ == "__main__":
    main()
