"""gpu: host<->device transfers, kernel launch latency and the CPU-vs-GPU crossover (seed 001).

Subject: ``gpu`` -> ``perfctl.regimes.subjects.gpu:open_device`` (CuPy, else PyTorch; see that module
for the protocol). Every timed call ends with ``sync()``, so a run measures work finished on
the device, not work queued. ``gpu.launch_sync`` pairs with ``gpu.launch_sync.floor`` (an
empty kernel); ``gpu.page_apply[size]`` pairs with ``gpu.page_apply.cpu[size]``, so the
Slowdown column is seed 001's GPU/CPU ratio and the crossover is the smallest size where it
drops below 1x. Every regime requires ``gpu`` and is skipped, with the reason, without one.
Loaded by path in worker processes: no GPU library is imported until a regime is set up.
"""

from __future__ import annotations

import importlib
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from perfctl import regime, subject

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


def _timed(samples: deque[float], nbytes: int, step: Callable[[], None]) -> tuple[Run, Metrics]:
    def run() -> None:
        t0 = time.perf_counter()
        step()
        samples.append(time.perf_counter() - t0)

    def metrics() -> dict[str, float]:
        out = percentiles_us(list(samples))
        if "p50_us" in out:
            out["bandwidth_gb_s"] = nbytes / (out["p50_us"] * 1e-6) / 1e9
        return out

    return run, metrics


def _transfer(direction: str, size: str) -> Iterator[tuple[Run, Metrics]]:
    dev = _device()
    try:
        nbytes = SIZES[size]
        host, on_device = dev.host(nbytes), dev.device(nbytes)
        copy = dev.h2d if direction == "h2d" else dev.d2h
        dst, src = (on_device, host) if direction == "h2d" else (host, on_device)

        def step() -> None:
            copy(dst, src)
            dev.sync()

        step()  # first-touch and driver set-up stay out of the timing
        yield _timed(deque(maxlen=SAMPLES), nbytes, step)
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
)
def h2d(size: str) -> Iterator[tuple[Run, Metrics]]:
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
)
def d2h(size: str) -> Iterator[tuple[Run, Metrics]]:
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

    def run() -> None:
        np.bitwise_xor(page, delta, out=page)

    run()
    yield run
