"""callback: re-entrant callbacks, event-loop scheduling and contended registration.

Seeds 000 (``callback_chatter``) and 004 (PyLoop's lock-free extraction). Subjects:
``callback`` -> ``perfctl.regimes.subjects.callback:CallbackBridge`` (``accumulate(n, cb, batched)``),
``callback_loop`` -> ``asyncio:new_event_loop`` (any asyncio-compatible loop) and
``callback_registry`` -> ``perfctl.regimes.subjects.callback:CallbackQueue`` (``factory(strategy)``
with ``register(cb)``/``drain()``). ``callback.register`` crosses threads 1 and 4 with the
lock and lock-free strategies, the lock-free variant with the locked one as its baseline,
so a single-thread regression and a multi-thread gain show side by side and the crossover
line under the table says from which thread count lock-free wins. Loaded by path in worker
processes: imports only the stdlib and perfctl.
"""

from __future__ import annotations

import importlib
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from perfctl import regime, subject
from perfctl.regimes.subjects import ipc as ipc_ref

Run = Callable[[], object]
Metrics = Callable[[], dict[str, float]]

ITEMS = 200  # callbacks per accumulate() call
LOOP_CALLBACKS = 2_000
REGISTRATIONS = 4_000  # per run, split evenly across the producer threads
SAMPLES = 50_000  # latency samples kept per thread
STALL_S = 30.0  # a drain that makes no progress this long means a producer died
LATENCY_METRICS = ("p50_us", "p95_us", "p99_us")


def _double(i: int) -> int:
    return 2 * i


def _tick() -> None:
    """The scheduled callback: as small as a callback can be."""


def percentiles_us(samples: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99 of durations in seconds, in microseconds (empty below two samples)."""
    if len(samples) < 2:
        return {}
    q = statistics.quantiles(samples, n=100, method="inclusive")
    return {"p50_us": q[49] * 1e6, "p95_us": q[94] * 1e6, "p99_us": q[98] * 1e6}


@regime(
    name="callback.chatter",
    family="callback",
    ops=ITEMS,
    params={"mode": ["per_item", "batched"]},
    baseline="callback.chatter.floor",
    tags=("seed-000",),
)
def chatter(mode: str) -> Iterator[Run]:
    """A child sums 200 values by calling back into its parent per item, or once per batch."""
    bridge = subject("callback", default="perfctl.regimes.subjects.callback:CallbackBridge")()
    batched = mode == "batched"
    want = sum(_double(i) for i in range(ITEMS))
    try:
        got = bridge.accumulate(ITEMS, _double, batched)
        if got != want:
            raise RuntimeError(f"callback subject: accumulate returned {got}, expected {want}")
        yield lambda: bridge.accumulate(ITEMS, _double, batched)
    finally:
        bridge.close()


@regime(
    name="callback.chatter.floor",
    family="callback",
    ops=ITEMS,
    params={"mode": ["per_item", "batched"]},
    tags=("floor",),
)
def chatter_floor(mode: str) -> Iterator[Run]:
    """Floor: the same callback bytes by bare read/write, one round trip per item or in all."""
    if mode == "per_item":
        request = ipc_ref.wire_size(("cb", ITEMS - 1))
        reply, trips = ipc_ref.wire_size(("ret", _double(ITEMS - 1))), ITEMS
    else:
        request = ipc_ref.wire_size(("cb_batch", list(range(ITEMS))))
        reply, trips = ipc_ref.wire_size(("ret", [_double(i) for i in range(ITEMS)])), 1
    echo = ipc_ref.RawEcho(request, reply)
    chunk = ipc_ref.filled(request)
    try:
        echo.roundtrip(chunk)  # the child is ready before anything is timed

        def run() -> None:
            for _ in range(trips):
                echo.roundtrip(chunk)

        yield run
    finally:
        echo.close()


def _loop_run(loop: Any) -> Run:
    def run() -> None:
        for _ in range(LOOP_CALLBACKS):
            loop.call_soon(_tick)
        loop.call_soon(loop.stop)
        loop.run_forever()

    return run


@regime(
    name="callback.call_soon",
    family="callback",
    ops=LOOP_CALLBACKS,
    baseline="callback.call_soon.floor",
    tags=("seed-004",),
)
def call_soon() -> Iterator[Run]:
    """Schedule 2,000 callbacks with call_soon and run the event loop until they are done."""
    loop = subject("callback_loop", default="asyncio:new_event_loop")()
    try:
        yield _loop_run(loop)
    finally:
        loop.close()


@regime(
    name="callback.call_soon_uvloop",
    family="callback",
    ops=LOOP_CALLBACKS,
    baseline="callback.call_soon.floor",
    requires=["uvloop"],
    tags=("seed-004",),
)
def call_soon_uvloop() -> Iterator[Run]:
    """The same 2,000 call_soon callbacks on uvloop's event loop."""
    loop = importlib.import_module("uvloop").new_event_loop()
    try:
        yield _loop_run(loop)
    finally:
        loop.close()


@regime(name="callback.call_soon.floor", family="callback", ops=LOOP_CALLBACKS, tags=("floor",))
def call_soon_floor() -> Iterator[Run]:
    """Floor: append 2,000 callbacks to a deque and pop and call each, with no loop."""
    ready: deque[Callable[[], None]] = deque()

    def run() -> None:
        for _ in range(LOOP_CALLBACKS):
            ready.append(_tick)
        while ready:
            ready.popleft()()

    yield run


class _Producers:
    """Threads that each register ``per_thread`` callbacks whenever a round starts."""

    def __init__(self, registry: Any, threads: int, per_thread: int) -> None:
        self._registry, self._per_thread = registry, per_thread
        # A timeout, so a producer that died cannot leave the drainer waiting forever.
        self._start = threading.Barrier(threads + 1, timeout=STALL_S)
        self._stopping = False
        self.samples: list[deque[float]] = [deque(maxlen=SAMPLES) for _ in range(threads)]
        self._threads = [
            threading.Thread(target=self._work, args=(s,), daemon=True) for s in self.samples
        ]
        for t in self._threads:
            t.start()

    def _work(self, samples: deque[float]) -> None:
        register, clock = self._registry.register, time.perf_counter
        while True:
            try:
                self._start.wait()
            except threading.BrokenBarrierError:
                return
            if self._stopping:
                return
            for _ in range(self._per_thread):
                t0 = clock()
                register(_tick)
                samples.append(clock() - t0)

    def start_round(self) -> None:
        """Release every producer for one round of registrations."""
        self._start.wait()

    def close(self) -> None:
        """Stop and join the producers, even mid-round."""
        self._stopping = True
        self._start.abort()
        for t in self._threads:
            t.join(5.0)


def _drain_all(registry: Any, total: int) -> None:
    done, last_progress = 0, time.monotonic()
    while done < total:
        n = registry.drain()
        done += n
        if n:
            last_progress = time.monotonic()
        elif time.monotonic() - last_progress > STALL_S:
            raise RuntimeError(f"registry drained {done} of {total} callbacks, then stalled")
        else:
            time.sleep(0)  # hand the GIL to the producers


def _single_thread(registry: Any, samples: deque[float]) -> Run:
    register, clock = registry.register, time.perf_counter

    def run() -> None:
        for _ in range(REGISTRATIONS):
            t0 = clock()
            register(_tick)
            samples.append(clock() - t0)
        _drain_all(registry, REGISTRATIONS)

    return run


def _multi_thread(registry: Any, producers: _Producers) -> Run:
    def run() -> None:
        producers.start_round()
        _drain_all(registry, REGISTRATIONS)

    return run


def _timed_rounds(
    registry: Any, producers: _Producers | None, samples: deque[float], busy: list[float]
) -> Run:
    if producers is None:
        work = _single_thread(registry, samples)
    else:
        work = _multi_thread(registry, producers)

    def run() -> None:
        t0 = time.perf_counter()
        work()
        busy[0] += time.perf_counter() - t0
        busy[1] += REGISTRATIONS

    return run


def _register_metrics(
    producers: _Producers | None, samples: deque[float], busy: list[float]
) -> Metrics:
    def metrics() -> dict[str, float]:
        pools = producers.samples if producers is not None else [samples]
        out = percentiles_us([s for pool in pools for s in pool])
        if busy[0]:
            out["throughput_ops_s"] = busy[1] / busy[0]
        return out

    return metrics


@regime(
    name="callback.register",
    family="callback",
    ops=REGISTRATIONS,
    params={"threads": [1, 4], "strategy": ["lock", "lockfree"]},
    baseline="callback.register[strategy=lock]",  # the trade-off line: lock-free vs locked
    metrics=(*LATENCY_METRICS, "throughput_ops_s"),
    tags=("seed-004",),
)
def register(threads: int, strategy: str) -> Iterator[tuple[Run, Metrics]]:
    """Register 4,000 callbacks from 1 or 4 threads while one thread drains and runs them."""
    registry = subject(
        "callback_registry", default="perfctl.regimes.subjects.callback:CallbackQueue"
    )(strategy=strategy)
    busy = [0.0, 0.0]  # seconds and registrations timed, for throughput
    own_samples: deque[float] = deque(maxlen=SAMPLES)
    producers = None
    try:
        if threads > 1:
            producers = _Producers(registry, threads, REGISTRATIONS // threads)
        yield (
            _timed_rounds(registry, producers, own_samples, busy),
            _register_metrics(producers, own_samples, busy),
        )
    finally:
        if producers is not None:
            producers.close()
        registry.close()
