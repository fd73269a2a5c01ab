"""tracemalloc readings that leave no trace of their own (imported by the counter worker).

Every object a reading creates (snapshot tuples, which freelists then keep; the
ints and tuples it returns, alive until the next reading) is allocated in this
file or in tracemalloc.py, and both are filtered out of every count: otherwise
a reading would count its predecessor's leftovers as the loop's allocations.
"""

from __future__ import annotations

import gc
import tracemalloc

# The readings' own allocations, never counted (as tracemalloc's Filter reads a file).
OURS = tuple(f[:-1] if f.endswith(".pyc") else f for f in (tracemalloc.__file__, __file__))


def reading() -> tuple[int, int, int]:
    """(live traced blocks, traced bytes, peak traced bytes), cyclic garbage collected first."""
    # Cyclic garbage (set-up's, or the loop's) is freed whenever a collection happens
    # to run: collect first, so only what is still reachable is counted.
    gc.collect()
    # Grouped by the allocating file in one pass, then ours dropped: what filtering the
    # snapshot (Filter(False, file) on each trace's newest frame) gives, without
    # matching a pattern and building a Trace object per live block, which made each
    # reading take seconds for a regime that keeps many objects.
    stats = tracemalloc.take_snapshot().statistics("filename")
    kept = [s for s in stats if s.traceback[0].filename not in OURS]
    current, peak = tracemalloc.get_traced_memory()
    size = sum(s.size for s in kept)
    return sum(s.count for s in kept), size, peak - (current - size)
