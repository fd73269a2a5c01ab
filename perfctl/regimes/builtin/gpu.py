"""gpu: host<->device transfers, kernel launch latency and the CPU-vs-GPU crossover (seed 001).

Subject: ``gpu`` -> ``perfctl.regimes.subjects.gpu:open_device`` (CuPy, else PyTorch; see that module
for the protocol). Two clocks: transfers and ``gpu.xor_kernel`` are timed **on the device**
(``clock="device"``: a CUDA event pair around each call, synchronised once; host wall time of
the same calls is the ``host_us`` metric, so a launch-bound regime shows host >> device);
``gpu.launch_sync`` and ``gpu.page_apply`` are timed on the **wall** clock up to ``sync()``,
because their question is what a caller waits for (launch and synchronisation included), which
device time leaves out. ``cache="cold"`` flushes L2 before each call, outside the timing. ``gpu.launch_sync`` pairs with ``gpu.launch_sync.floor`` (an
empty kernel); ``gpu.page_apply[size]`` pairs with ``gpu.page_apply.cpu[size]``, so the
Slowdown column is seed 001's GPU/CPU ratio and the crossover is the smallest size where it
drops below 1x. Every regime requires ``gpu`` and is skipped, with the reason, without one.
Loaded by path in worker processes: no GPU library is imported until a regime is set up.
"""

from __future__ import annotations

import importlib
import statistics
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from perfctl import Timed, regime, subject

Run = Callable[[], object]
Metrics = Callable[[], dict[str, float]]

SIZES = {
    "1K": 1 << 10,
    "4K": 4 << 10,
    "16K": 16 << 10,
    "256K": 256 << 10,
    "1M": 1 << 20,
    "4M": 4 << 20,
    "16M": 16 << 20,
    "64M": 64 << 20,
}
TRANSFER_SIZES = ["4K", "1M", "64M"]
PAGE_SIZES = ["1K", "16K", "256K", "1M", "4M", "16M", "64M"]
KERNEL_SIZES = ["1M", "16M"]  # within and beyond an H100's 50 MB L2 (two 16 MB buffers)
LAUNCHES = 100  # launch + sync pairs per run()
SAMPLES = 10_000
TRANSFER_METRICS = ("p50_us", "p95_us", "p99_us", "bandwidth_gb_s")


def percentiles_us(samples: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99 of durations in seconds, in microseconds (empty below two samples)."""
    if len(samples) < 2:
        return {}
    q = statistics.quantiles(samples, n=100, method="inclusive")
    return {"p50_us": q[49] * 1e6, "p95_us": q[94] * 1e6, "p99_us": q[98] * 1e6}


def _device() -> Any:
    return subject("gpu", default="perfctl.regimes.subjects.gpu:open_device")()


def _percentile_metrics(samples: deque[float], nbytes: int) -> Metrics:
    def metrics() -> dict[str, float]:
        out = percentiles_us(list(samples))
        if "p50_us" in out:
            out["bandwidth_gb_s"] = nbytes / (out["p50_us"] * 1e-6) / 1e9
        return out

    return metrics


def _on_device(
    dev: Any, step: Callable[[], None], nbytes: int, cold: bool = False
) -> Iterator[Any]:
    """Hand back a device-timed regime: per-call CUDA event times, percentiles of them."""

    samples: deque[float] = deque(maxlen=SAMPLES)
    before = dev.flush_l2 if cold else None

    def time_loops(loops: int) -> float:
        times = dev.device_times(step, loops, before)
        samples.extend(times)
        return sum(times)

    def run() -> None:  # the same work on the wall clock (profile, same-process pairing)
        if before is not None:
            before()
        step()
        dev.sync()

    run()  # first-touch, driver set-up and kernel loading stay out of the timing
    yield Timed(run, time_loops, _percentile_metrics(samples, nbytes))


def _transfer(direction: str, size: str) -> Iterator[Any]:
    dev = _device()
    try:
        nbytes = SIZES[size]
        host, on_device = dev.host(nbytes), dev.device(nbytes)
        copy = dev.h2d if direction == "h2d" else dev.d2h
        dst, src = (on_device, host) if direction == "h2d" else (host, on_device)
        yield from _on_device(dev, lambda: copy(dst, src), nbytes)
    finally:
        dev.close()


@regime(
    name="gpu.h2d",
    family="gpu",
    ops=1,
    params={"size": TRANSFER_SIZES},
    requires=["gpu"],
    metrics=TRANSFER_METRICS,
    tags=("seed-001",),
    clock="device",
)
def h2d(size: str) -> Iterator[Any]:
    """Copy a pinned host buffer to the device and synchronise."""
    yield from _transfer("h2d", size)


@regime(
    name="gpu.d2h",
    family="gpu",
    ops=1,
    params={"size": TRANSFER_SIZES},
    requires=["gpu"],
    metrics=TRANSFER_METRICS,
    tags=("seed-001",),
    clock="device",
)
def d2h(size: str) -> Iterator[Any]:
    """Copy a device buffer to pinned host memory and synchronise."""
    yield from _transfer("d2h", size)


def _launches(launch_name: str) -> Iterator[Run]:
    dev = _device()
    try:
        launch, sync = getattr(dev, launch_name), dev.sync

        def run() -> None:
            for _ in range(LAUNCHES):
                launch()
                sync()

        run()  # kernels are compiled and loaded on first use
        yield run
    finally:
        dev.close()


@regime(
    name="gpu.launch_sync",
    family="gpu",
    ops=LAUNCHES,
    baseline="gpu.launch_sync.floor",
    requires=["gpu"],
    tags=("seed-001",),
)
def launch_sync() -> Iterator[Run]:
    """Launch a one-element kernel and wait for it: the latency of the smallest real work."""
    yield from _launches("launch_tiny")


@regime(name="gpu.launch_sync.floor", family="gpu", ops=LAUNCHES, requires=["gpu"], tags=("floor",))
def launch_sync_floor() -> Iterator[Run]:
    """Floor: launch an empty kernel and wait for it."""
    yield from _launches("launch_empty")


@regime(
    name="gpu.page_apply",
    family="gpu",
    ops=1,
    params={"size": PAGE_SIZES},
    baseline="gpu.page_apply.cpu",
    requires=["gpu"],
    tags=("seed-001",),
)
def page_apply(size: str) -> Iterator[Run]:
    """Apply a host-side delta to a device page: copy it over, XOR it in, synchronise."""
    dev = _device()
    try:
        nbytes = SIZES[size]
        page, delta, staged = dev.device(nbytes), dev.host(nbytes), dev.device(nbytes)

        def run() -> None:
            dev.h2d(staged, delta)
            dev.xor_(page, staged)
            dev.sync()

        run()
        yield run
    finally:
        dev.close()


@regime(
    name="gpu.page_apply.cpu",
    family="gpu",
    ops=1,
    params={"size": PAGE_SIZES},
    requires=["gpu", "numpy"],
    tags=("cpu",),
)
def page_apply_cpu(size: str) -> Iterator[Run]:
    """The CPU side of the crossover: XOR the same delta into a page with numpy."""
    np: Any = importlib.import_module("numpy")
    nbytes = SIZES[size]
    page, delta = np.zeros(nbytes, dtype=np.uint8), np.ones(nbytes, dtype=np.uint8)

    if nbytes % 8 == 0:  # 64-bit words, as the GPU subject uses
        page, delta = page.view(np.uint64), delta.view(np.uint64)

    def run() -> None:
        np.bitwise_xor(page, delta, out=page)

    run()
    yield run


@regime(
    name="gpu.xor_kernel",
    family="gpu",
    ops=1,
    params={"size": KERNEL_SIZES, "cache": ["warm", "cold"]},
    requires=["gpu"],
    metrics=TRANSFER_METRICS,
    tags=("device-time",),
    clock="device",
)
def xor_kernel(size: str, cache: str) -> Iterator[Any]:
    """XOR one device buffer into another: one elementwise kernel, timed on the device."""
    dev = _device()
    try:
        nbytes = SIZES[size]
        page, delta = dev.device(nbytes), dev.device(nbytes)
        # Bandwidth counts what the kernel moves: two reads and one write per byte.
        yield from _on_device(dev, lambda: dev.xor_(page, delta), 3 * nbytes, cold=cache == "cold")
    finally:
        dev.close()
