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

from __future__ import annotations

import sys

sys.dont_write_bytecode = True

# Keep this folder off sys.path so nothing here shadows a module.
if sys.path and sys.path[0].endswith("workers"):
    del sys.path[0]

import os  # noqa: E402
from pathlib import Path  # noqa: E402

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing

from perfctl.regimes import loader  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


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
    args = parse_args(sys.argv[1:])
    files = [Path(f) for f in args["--perfctl-files"].split(os.pathsep)]
    defn, kwargs = loader.find(loader.load_files(files), args["--perfctl-regime"])
    loops = int(args["--loops"])
    with loader.open_regime(defn, kwargs) as instance:
        if args["--mode"] == "instructions":
            timed_loop(instance.run, loops)
            return
        figures = memory_figures(instance.run, loops, defn.ops)
    import json

    with open(args["--out"], "w", encoding="utf-8") as fh:
        fh.write(json.dumps(figures) + "\n")


_REQUIRED = ("--perfctl-regime", "--perfctl-files", "--mode", "--loops")
_OPTIONS = (*_REQUIRED, "--out")


def parse_args(argv: list[str]) -> dict[str, str]:
    """``--name value`` pairs as perfctl writes them (measure/counters.py), checked.

    Not argparse: its import is instructions that every counter process would run
    under callgrind; this command line is perfctl's own, never a person's.
    """
    if len(argv) % 2:
        raise SystemExit(f"counter worker: options come in --name value pairs: {argv}")
    args = dict(zip(argv[::2], argv[1::2], strict=True))
    unknown = set(args) - set(_OPTIONS)
    missing = set(_REQUIRED) - set(args)
    if unknown or missing or args["--mode"] not in ("instructions", "memory"):
        raise SystemExit(
            f"counter worker: bad options {argv} (unknown {unknown}, missing {missing})"
        )
    if args["--mode"] == "memory" and "--out" not in args:
        raise SystemExit("counter worker: --mode memory needs --out")
    return args


if __name__ == "__main__":
    main()
