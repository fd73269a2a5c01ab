"""shm: one hop of a large buffer by pipe copy or through a shared-memory ring (seed 003).

Subject: ``shm`` -> ``perfctl.regimes.subjects.shm:FrameChannel`` (``factory(transport=, slot_bytes=)``
with ``hop(buffer, shape=None) -> int`` and ``close()``). ``shm.X_pipe`` and ``shm.X_ring``
share the baseline ``shm.X.floor``: one in-process memcpy of the same bytes, the least a
transport that copies once can cost. Every run is one hop; per-hop percentiles come back as
metrics. Loaded by path in worker processes: imports only the stdlib and perfctl (numpy only
inside the frame regimes, which require it).
"""

from __future__ import annotations

import importlib
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from perfctl import regime, subject
from perfctl.regimes.subjects import shm as ref

Run = Callable[[], object]
Metrics = Callable[[], dict[str, float]]

SIZES = {"512K": 512 * 1024, "24M": 24 * 1024 * 1024}
FRAME_4K = (2160, 3840, 3)  # a 4K RGB frame: 24,883,200 bytes of uint8
SAMPLES = 10_000
HOP_METRICS = ("p50_us", "p95_us", "p99_us", "bandwidth_gb_s")


def pattern(nbytes: int) -> bytes:
    """Deterministic bytes whose first, middle and last values differ (251 is prime)."""
    return (bytes(range(251)) * (nbytes // 251 + 1))[:nbytes]


def percentiles_us(samples: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99 of durations in seconds, in microseconds (empty below two samples)."""
    if len(samples) < 2:
        return {}
    q = statistics.quantiles(samples, n=100, method="inclusive")
    return {"p50_us": q[49] * 1e6, "p95_us": q[94] * 1e6, "p99_us": q[98] * 1e6}


def _hop_metrics(samples: deque[float], nbytes: int) -> Metrics:
    def metrics() -> dict[str, float]:
        out = percentiles_us(list(samples))
        if "p50_us" in out:
            out["bandwidth_gb_s"] = nbytes / (out["p50_us"] * 1e-6) / 1e9
        return out

    return metrics


def _hops(
    transport: str, payload: Any, shape: tuple[int, ...] | None
) -> Iterator[tuple[Run, Metrics]]:
    nbytes = memoryview(payload).nbytes
    channel = subject("shm", default="perfctl.regimes.subjects.shm:FrameChannel")(
        transport=transport, slot_bytes=nbytes
    )
    samples: deque[float] = deque(maxlen=SAMPLES)
    try:
        want = ref.probe(memoryview(payload).cast("B"))
        got = channel.hop(payload, shape)
        if got != want:
            raise RuntimeError(f"shm subject: hop answered {got}, expected {want}")

        def run() -> None:
            t0 = time.perf_counter()
            channel.hop(payload, shape)
            samples.append(time.perf_counter() - t0)

        yield run, _hop_metrics(samples, nbytes)
    finally:
        channel.close()


def _frame() -> Any:
    np: Any = importlib.import_module("numpy")
    n = FRAME_4K[0] * FRAME_4K[1] * FRAME_4K[2]
    return np.frombuffer(pattern(n), dtype=np.uint8).reshape(FRAME_4K)


@regime(
    name="shm.bytes_hop_pipe",
    family="shm",
    ops=1,
    params={"size": list(SIZES)},
    baseline="shm.bytes_hop.floor",
    metrics=HOP_METRICS,
    tags=("seed-003",),
)
def bytes_hop_pipe(size: str) -> Iterator[tuple[Run, Metrics]]:
    """Bytes to a receiver process through a pipe: copied into and out of the kernel."""
    yield from _hops("pipe", pattern(SIZES[size]), None)


@regime(
    name="shm.bytes_hop_ring",
    family="shm",
    ops=1,
    params={"size": list(SIZES)},
    baseline="shm.bytes_hop.floor",
    metrics=HOP_METRICS,
    tags=("seed-003",),
)
def bytes_hop_ring(size: str) -> Iterator[tuple[Run, Metrics]]:
    """Bytes to a receiver process through a shared-memory ring: one copy, read in place."""
    yield from _hops("ring", pattern(SIZES[size]), None)


@regime(
    name="shm.bytes_hop.floor",
    family="shm",
    ops=1,
    params={"size": list(SIZES)},
    metrics=HOP_METRICS,
    tags=("floor",),
)
def bytes_hop_floor(size: str) -> Iterator[tuple[Run, Metrics]]:
    """Floor: one in-process memcpy of the same bytes (memcpy bandwidth)."""
    src = pattern(SIZES[size])
    # A memoryview target: `bytearray[:] = bytes` first copies the bytes into a
    # temporary bytearray (two copies and, at 24 MB, fresh pages every time).
    dst = memoryview(bytearray(len(src)))
    samples: deque[float] = deque(maxlen=SAMPLES)

    def run() -> None:
        t0 = time.perf_counter()
        dst[:] = src  # one memcpy, as the ring's slot fill
        samples.append(time.perf_counter() - t0)

    yield run, _hop_metrics(samples, len(src))


@regime(
    name="shm.frame4k_hop_pipe",
    family="shm",
    ops=1,
    baseline="shm.frame4k_hop.floor",
    requires=["numpy"],
    metrics=HOP_METRICS,
    tags=("seed-003",),
)
def frame4k_hop_pipe() -> Iterator[tuple[Run, Metrics]]:
    """A numpy 4K RGB frame (~24 MB) through a pipe; the receiver builds an array view."""
    yield from _hops("pipe", _frame(), FRAME_4K)


@regime(
    name="shm.frame4k_hop_ring",
    family="shm",
    ops=1,
    baseline="shm.frame4k_hop.floor",
    requires=["numpy"],
    metrics=HOP_METRICS,
    tags=("seed-003",),
)
def frame4k_hop_ring() -> Iterator[tuple[Run, Metrics]]:
    """A numpy 4K RGB frame through a shared-memory ring; the receiver views it in place."""
    yield from _hops("ring", _frame(), FRAME_4K)


@regime(
    name="shm.frame4k_hop.floor",
    family="shm",
    ops=1,
    requires=["numpy"],
    metrics=HOP_METRICS,
    tags=("floor",),
)
def frame4k_hop_floor() -> Iterator[tuple[Run, Metrics]]:
    """Floor: one numpy copy of the frame into a preallocated frame."""
    np: Any = importlib.import_module("numpy")
    src = _frame()
    dst = np.empty_like(src)
    samples: deque[float] = deque(maxlen=SAMPLES)

    def run() -> None:
        t0 = time.perf_counter()
        np.copyto(dst, src)
        samples.append(time.perf_counter() - t0)

    yield run, _hop_metrics(samples, src.nbytes)
