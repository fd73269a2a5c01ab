"""ipc: cross-process calls over real OS channels (seeds 000 and 002).

Subject: ``ipc`` -> ``perfctl.regimes.subjects.ipc:PipeBridge`` (``factory(channel=...)`` with
ping/increment/checksum/sum_each/sum_bulk/echo/close) and ``ipc_pool`` ->
``perfctl.regimes.subjects.ipc:WorkerPool`` (``factory(kind=, workers=)`` with submit/worker_pids/
close). Each ``ipc.X`` regime is paired with ``ipc.X.floor``: the same bytes moved by bare
``os.read``/``os.write`` on the same kind of channel, the physical floor a transport can
approach. Loaded by path in worker processes: imports only the stdlib and perfctl.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from perfctl import regime, subject
from perfctl.regimes.subjects import ipc as ref

Run = Callable[[], object]
Metrics = Callable[[], dict[str, float]]

CALLS = 100  # small calls per run(), so one run is a few milliseconds
LIST_LEN = 5_000
BYTES_512K = 512 * 1024
POOL_WORKERS = 4
POOL_TASKS = 32
CPU_TASK_N = 20_000  # ~2 ms of pure Python: enough that pool overhead does not dominate
SAMPLES = 20_000  # latency samples kept per worker process
CHANNELS = list(ref.CHANNELS)
PAYLOAD = {"id": 7, "name": "sensor-12", "values": list(range(16)), "flags": {"a": 1, "b": 0}}
LATENCY_METRICS = ("p50_us", "p95_us", "p99_us")


def _bridge(channel: str = "pipe") -> Any:
    return subject("ipc", default="perfctl.regimes.subjects.ipc:PipeBridge")(channel=channel)


def _check(name: str, got: object, want: object) -> None:
    # A subject of the user's own must compute the same answers before it is timed.
    if got != want:
        raise RuntimeError(f"ipc subject: {name} returned {got!r}, expected {want!r}")


def percentiles_us(samples: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99 of durations in seconds, in microseconds (empty below two samples)."""
    if len(samples) < 2:
        return {}
    q = statistics.quantiles(samples, n=100, method="inclusive")
    return {"p50_us": q[49] * 1e6, "p95_us": q[94] * 1e6, "p99_us": q[98] * 1e6}


def _raw_floor(
    request: int, reply: int, *, reads: int = 1, repeat: int = 1, channel: str = "pipe"
) -> Iterator[Run]:
    echo = ref.RawEcho(request, reply, reads, channel)
    chunk = ref.filled(request)
    try:
        echo.roundtrip(chunk)

        def run() -> None:
            for _ in range(repeat):
                echo.roundtrip(chunk)

        yield run
    finally:
        echo.close()


@regime(
    name="ipc.tiny_ping",
    family="ipc",
    ops=CALLS,
    params={"channel": CHANNELS},
    baseline="ipc.tiny_ping.floor",
    tags=("seed-000",),
)
def tiny_ping(channel: str) -> Iterator[Run]:
    """A tiny request/response round trip to a child process."""
    bridge = _bridge(channel)
    try:
        bridge.ping()

        def run() -> None:
            for _ in range(CALLS):
                bridge.ping()

        yield run
    finally:
        bridge.close()


@regime(
    name="ipc.tiny_ping.floor",
    family="ipc",
    ops=CALLS,
    params={"channel": CHANNELS},
    tags=("floor",),
)
def tiny_ping_floor(channel: str) -> Iterator[Run]:
    """Floor: a one-byte round trip by bare read/write on the same kind of channel."""
    yield from _raw_floor(1, 1, repeat=CALLS, channel=channel)


@regime(
    name="ipc.increment_small",
    family="ipc",
    ops=CALLS,
    baseline="ipc.increment_small.floor",
    tags=("seed-000",),
)
def increment_small() -> Iterator[Run]:
    """Increment a counter held by the child: small state, one round trip."""
    bridge = _bridge()
    try:
        _check("increment()", bridge.increment(), 1)

        def run() -> None:
            for _ in range(CALLS):
                bridge.increment()

        yield run
    finally:
        bridge.close()


@regime(name="ipc.increment_small.floor", family="ipc", ops=CALLS, tags=("floor",))
def increment_small_floor() -> Iterator[Run]:
    """Floor: a bare round trip of the increment's request and reply sizes."""
    yield from _raw_floor(ref.wire_size(("inc",)), ref.wire_size((True, 1 << 20)), repeat=CALLS)


@regime(
    name="ipc.payload_small",
    family="ipc",
    ops=CALLS,
    baseline="ipc.payload_small.floor",
    tags=("seed-000",),
)
def payload_small() -> Iterator[Run]:
    """Send a small structured payload; the child returns its checksum."""
    bridge = _bridge()
    try:
        _check("checksum(payload)", bridge.checksum(PAYLOAD), ref.checksum(PAYLOAD))

        def run() -> None:
            for _ in range(CALLS):
                bridge.checksum(PAYLOAD)

        yield run
    finally:
        bridge.close()


@regime(name="ipc.payload_small.floor", family="ipc", ops=CALLS, tags=("floor",))
def payload_small_floor() -> Iterator[Run]:
    """Floor: a bare round trip of the payload's pickled size."""
    request, reply = ref.wire_size(("checksum", PAYLOAD)), ref.wire_size((True, 1 << 20))
    yield from _raw_floor(request, reply, repeat=CALLS)


@regime(
    name="ipc.large_list_sum",
    family="ipc",
    ops=1,
    params={"mode": ["each", "bulk"]},
    baseline="ipc.large_list_sum.floor",
    tags=("seed-000",),
)
def large_list_sum(mode: str) -> Iterator[Run]:
    """Sum a 5,000-int list in the child: one message per element, or one for the list."""
    bridge = _bridge()
    values = list(range(LIST_LEN))
    send = bridge.sum_each if mode == "each" else bridge.sum_bulk
    try:
        _check(f"sum_{mode}(values)", send(values), sum(values))
        yield lambda: send(values)
    finally:
        bridge.close()


@regime(
    name="ipc.large_list_sum.floor",
    family="ipc",
    ops=1,
    params={"mode": ["each", "bulk"]},
    tags=("floor",),
)
def large_list_sum_floor(mode: str) -> Iterator[Run]:
    """Floor: the list's bytes by bare writes, one syscall per element or one in all."""
    reply = ref.wire_size((True, sum(range(LIST_LEN))))
    if mode == "each":
        yield from _raw_floor(ref.wire_size(LIST_LEN - 1), reply, reads=LIST_LEN)
    else:
        yield from _raw_floor(ref.wire_size(list(range(LIST_LEN))), reply)


@regime(
    name="ipc.bytes_512k", family="ipc", ops=1, baseline="ipc.bytes_512k.floor", tags=("seed-000",)
)
def bytes_512k() -> Iterator[Run]:
    """Send 512 KiB of bytes and receive them back."""
    bridge = _bridge()
    data = bytes(range(256)) * (BYTES_512K // 256)
    try:
        _check("echo(512 KiB)", bridge.echo(data) == data, True)
        yield lambda: bridge.echo(data)
    finally:
        bridge.close()


@regime(name="ipc.bytes_512k.floor", family="ipc", ops=1, tags=("floor",))
def bytes_512k_floor() -> Iterator[Run]:
    """Floor: 512 KiB each way by bare read/write on a pipe."""
    yield from _raw_floor(BYTES_512K, BYTES_512K)


@regime(
    name="ipc.first_call",
    family="ipc",
    ops=1,
    params={"pool": ["cold", "warm"]},
    baseline="ipc.first_call.floor",
    tags=("seed-000",),
)
def first_call(pool: str) -> Iterator[Run]:
    """The first call of a session: spawn a child and call it (cold) or reuse a pooled one."""
    if pool == "cold":

        def cold() -> None:
            bridge = _bridge()
            try:
                bridge.ping()
            finally:
                bridge.close()

        yield cold
        return
    idle = deque([_bridge()])
    try:
        idle[0].ping()  # the pooled worker is up before anything is timed

        def warm() -> None:
            bridge = idle.popleft()
            try:
                bridge.ping()
            finally:
                idle.append(bridge)

        yield warm
    finally:
        while idle:
            idle.popleft().close()


@regime(
    name="ipc.first_call.floor",
    family="ipc",
    ops=1,
    params={"pool": ["cold", "warm"]},
    tags=("floor",),
)
def first_call_floor(pool: str) -> Iterator[Run]:
    """Floor: spawn a bare echo child and do one raw round trip (cold), or only the trip."""
    if pool == "warm":
        yield from _raw_floor(1, 1)
        return

    def cold() -> None:
        echo = ref.RawEcho(1, 1)
        try:
            echo.roundtrip(b"\0")
        finally:
            echo.close()

    yield cold


class _PoolProbe:
    """Latency, throughput and memory of one pool, for seed 002's table."""

    def __init__(self, pool: Any, startup_s: float, rss_before: int | None) -> None:
        self.pool, self.startup_s, self.rss_before = pool, startup_s, rss_before
        self.latencies: deque[float] = deque(maxlen=SAMPLES)
        self.busy_s, self.tasks = 0.0, 0

    def burst(self, task: Callable[..., Any], arg: object) -> None:
        """Submit POOL_TASKS tasks at once and wait for all of them."""
        t0 = time.perf_counter()
        futures = []
        for _ in range(POOL_TASKS):
            start = time.perf_counter()
            fut = self.pool.submit(task, arg)
            fut.add_done_callback(
                lambda _f, s=start: self.latencies.append(time.perf_counter() - s)
            )
            futures.append(fut)
        for fut in futures:
            fut.result()
        self.busy_s += time.perf_counter() - t0
        self.tasks += POOL_TASKS

    def rss_per_worker(self) -> float | None:
        """Mean RSS of worker processes; for threads, this process's growth per worker."""
        pids = self.pool.worker_pids()
        if pids:
            sizes = [s for s in (ref.rss_bytes(p) for p in pids) if s is not None]
            return statistics.fmean(sizes) if sizes else None
        now = ref.rss_bytes()
        if now is None or self.rss_before is None:
            return None
        return max(0, now - self.rss_before) / POOL_WORKERS

    def metrics(self) -> dict[str, float]:
        """Everything seed 002 reports, per worker process."""
        out = percentiles_us(list(self.latencies))
        out["startup_s"] = self.startup_s
        if self.busy_s:
            out["throughput_ops_s"] = self.tasks / self.busy_s
        rss = self.rss_per_worker()
        if rss is not None:
            out["rss_per_worker_bytes"] = rss
        return out


@regime(
    name="ipc.pool",
    family="ipc",
    ops=POOL_TASKS,
    params={"kind": list(ref.POOL_KINDS), "work": ["echo", "cpu"]},
    metrics=(*LATENCY_METRICS, "throughput_ops_s", "rss_per_worker_bytes", "startup_s"),
    tags=("seed-002",),
)
def pool(kind: str, work: str) -> Iterator[tuple[Run, Metrics]]:
    """A burst of 32 tasks on a 4-worker process or thread pool: I/O-shaped or CPU-bound."""
    rss_before = ref.rss_bytes()
    t0 = time.perf_counter()
    workers = subject("ipc_pool", default="perfctl.regimes.subjects.ipc:WorkerPool")(
        kind=kind, workers=POOL_WORKERS
    )
    probe = _PoolProbe(workers, time.perf_counter() - t0, rss_before)
    task, arg = (ref.echo_task, b"x" * 64) if work == "echo" else (ref.cpu_task, CPU_TASK_N)
    try:
        yield (lambda: probe.burst(task, arg)), probe.metrics
    finally:
        workers.close()
