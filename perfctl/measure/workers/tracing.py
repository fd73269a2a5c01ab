"""tracemalloc readings that leave no trace of their own (imported by the counter worker).

Every object a reading creates (snapshot tuples, which freelists then keep; the
ints and tuples it returns, alive until the next reading) is allocated in this
file or in tracemalloc.py, and both are filtered out of every count: otherwise
a reading would count its predecessor's leftovers as the loop's allocations.
"""

from __future__ import annotations

import gc
import tracemalloc


def reading() -> tuple[int, int, int]:
    """(live traced blocks, traced bytes, peak traced bytes), cyclic garbage collected first."""
    # Cyclic garbage (set-up's, or the loop's) is freed whenever a collection happens
    # to run: collect first, so only what is still reachable is counted.
    gc.collect()
    ignore = [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, __file__)]
    snapshot = tracemalloc.take_snapshot().filter_traces(ignore)
    current, peak = tracemalloc.get_traced_memory()
    size = sum(t.size for t in snapshot.traces)
    return len(snapshot.traces), size, peak - (current - size)
