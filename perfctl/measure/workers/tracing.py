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
    # Read before the snapshot exists: what it builds and frees must not raise the peak.
    current, peak = tracemalloc.get_traced_memory()
    # Grouped by the allocating file in one pass, then ours dropped: what filtering the
    # snapshot (Filter(False, file) on each trace's newest frame) gives, without
    # matching a pattern and building a Trace object per live block, which made each
    # reading take seconds for a regime that keeps many objects.
    snapshot = tracemalloc.take_snapshot()
    kept = [s for s in snapshot.statistics("filename") if s.traceback[0].filename not in OURS]
    size, count = sum(s.size for s in kept), sum(s.count for s in kept)
    del snapshot, kept
    # A full collection also empties the freelists the snapshot's tuples went to, so a
    # regime that keeps small tuples allocates (and is counted for) every one of them.
    gc.collect()
    return count, size, peak - (current - size)
