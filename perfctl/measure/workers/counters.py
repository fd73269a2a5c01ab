"""Counter worker: one regime, looped a fixed number of times, never timed.

``--mode instructions`` only runs the loop: the parent runs this script under
``valgrind --tool=callgrind`` twice, with N and 2N loops, and subtracts the two
whole-process counts (see :mod:`perfctl.measure.counters` for why that is exact).
Nothing here may depend on the loop count except the loop itself, so the count
is passed zero-padded (both command lines have the same length) and no clock
is read.

``--mode memory`` runs N loops, N more, and reads tracemalloc after each: the
difference is what the second N loops left allocated, free of one-time caches
filled by the first call. Its figures are written as one JSON line to ``--out``.
"""

import sys

sys.dont_write_bytecode = True

# Keep this folder off sys.path so nothing here shadows a module.
if sys.path and sys.path[0].endswith("workers"):
    del sys.path[0]

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from perfctl.regimes import loader  # noqa: E402


def timed_loop(run: Callable[[], Any], loops: int) -> None:
    """The measured loop: the same shape as the wall-time worker's, without the clock."""
    for _ in range(loops):
        run()


def memory_figures(run: Callable[[], Any], loops: int, ops: int) -> dict[str, float]:
    """Blocks and bytes per op left allocated by N loops, peak traced bytes, peak RSS."""
    import resource
    import tracemalloc

    from perfctl.measure.workers.tracing import reading

    tracemalloc.start()
    reading()  # the first snapshot allocates what later ones reuse
    blocks0, bytes0, _ = reading()
    timed_loop(run, loops)
    blocks1, bytes1, _ = reading()
    tracemalloc.reset_peak()
    timed_loop(run, loops)
    blocks2, bytes2, peak = reading()
    tracemalloc.stop()
    n = loops * ops
    return {
        "alloc_blocks_per_op": (blocks2 - blocks1) / n,
        "alloc_bytes_per_op": (bytes2 - bytes1) / n,
        "first_loops_blocks_per_op": (blocks1 - blocks0) / n,
        "first_loops_bytes_per_op": (bytes1 - bytes0) / n,
        "peak_traced_bytes": float(peak - bytes1),
        # Linux reports KiB; the whole process, set-up included (as asv's peakmem).
        "peak_rss_bytes": float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024),
    }


def main() -> None:
    """Load the regime, set it up, run the loop(s) of the chosen mode, tear down."""
    p = argparse.ArgumentParser()
    p.add_argument("--perfctl-regime", required=True)
    p.add_argument("--perfctl-files", required=True)
    p.add_argument("--mode", choices=("instructions", "memory"), required=True)
    p.add_argument("--loops", type=int, required=True)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    defs = loader.load_files([Path(f) for f in args.perfctl_files.split(os.pathsep)])
    defn, kwargs = loader.find(defs, args.perfctl_regime)
    with loader.open_regime(defn, kwargs) as instance:
        if args.mode == "instructions":
            timed_loop(instance.run, args.loops)
            return
        figures = memory_figures(instance.run, args.loops, defn.ops)
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(figures) + "\n")


if __name__ == "__main__":
    main()
