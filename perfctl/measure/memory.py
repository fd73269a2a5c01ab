"""``--measure memory``: what a regime's timed loop allocates, through tracemalloc.

The counter worker (``measure/workers/counters.py --mode memory``) runs N loops,
then N more, reading tracemalloc after each. The value of a process is the
**blocks per op allocated by the second N loops and still alive at their end**
(what a loop keeps: cached results, grown containers, leaks). It is exact to the
block, free of what set-up and the first, cache-filling calls allocated, and
free of tracemalloc's own snapshots, which are the same in both readings.
Beside it: bytes per op, the peak of traced memory during the loops above their
start, and the process's peak RSS (set-up included, as asv's ``peakmem_``).

Limits: tracemalloc sees Python's allocators only, not native ``malloc`` inside
extensions; and a block allocated and freed within the loop is not counted
(tracemalloc keeps live blocks, not a running total), so temporaries show in
``peak_traced_bytes`` only.
"""

from __future__ import annotations

import json
from pathlib import Path

VALUE = "alloc_blocks_per_op"  # the figure verdicts are given on


def read_figures(out: Path) -> dict[str, float]:
    """The figures one memory worker process wrote to ``out`` (one JSON object)."""
    return {k: float(v) for k, v in json.loads(out.read_text()).items()}
