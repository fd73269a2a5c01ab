"""Reference GPU subject: one CUDA device driven through CuPy or PyTorch.

The ``gpu`` protocol (``perfctl.subject("gpu", default="perfctl.regimes.subjects.gpu:open_device")``):
``factory()`` returns a device with ``name``, ``host(nbytes)`` (a pinned host uint8 buffer),
``device(nbytes)`` (a zeroed device uint8 buffer), ``h2d(dst, src)``, ``d2h(dst, src)``,
``xor_(page, delta)`` (in place on the device), ``launch_empty()``, ``launch_tiny()`` and
``sync()``, plus ``close()``. Copies and launches may be asynchronous: callers time them up
to ``sync()``, or on the device with ``device_times(step, loops, before=None)``: a CUDA
event pair recorded around each call of ``step`` (``before``, e.g. ``flush_l2``, runs
outside the pair), synchronised once at the end, seconds per call. ``flush_l2()`` writes a
256 MiB buffer, as Triton's ``do_bench`` does, so the next call finds a cold L2. CuPy is preferred when both libraries are installed; choose one with
``--subject gpu=perfctl.regimes.subjects.gpu:TorchDevice`` (or ``:CupyDevice``). Nothing here
imports a GPU library until a device is opened.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

BACKENDS = ("cupy", "torch")

_EMPTY_KERNEL = 'extern "C" __global__ void perfctl_empty() {}'
_SPIN_KERNEL = """
extern "C" __global__ void perfctl_spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
}
"""
FLUSH_BYTES = 256 << 20  # Triton's do_bench: larger than any L2 so far (H100: 50 MB)


HOLD_PER_CALL_S = 50e-6  # generous host time to queue one call (events + launch, in Python)
CHUNK = 64  # calls queued behind one hold


def event_times(
    pair: Callable[[], tuple[Any, Any]],
    elapsed_ms: Callable[[Any, Any], float],
    step: Callable[[], object],
    loops: int,
    before: Callable[[], object] | None = None,
    hold: Callable[[float], object] | None = None,
) -> list[float]:
    """Seconds per call of ``step`` on the device, from one CUDA event pair per call.

    An event is stamped when the device reaches it, so on an idle device a
    start event fires at once and the pair then spans the host's launch of the
    kernel too. ``hold(seconds)`` (a spin kernel, nvbench's "blocking kernel")
    keeps the device busy while the host queues a chunk of calls, so the pairs
    time the work alone; the host's cost shows in the ``host_us`` metric.
    ``before`` (an L2 flush) is queued outside each pair. One wait at the end.
    """
    pairs = []
    for i in range(loops):
        if hold is not None and i % CHUNK == 0:
            hold(min(CHUNK, loops - i) * HOLD_PER_CALL_S)
        if before is not None:
            before()
        start, end = pair()
        start.record()
        step()
        end.record()
        pairs.append((start, end))
    if pairs:
        pairs[-1][1].synchronize()  # stream order: the last event done means all are
    return [elapsed_ms(a, b) / 1e3 for a, b in pairs]


class CupyDevice:
    """The gpu protocol on CuPy; the empty kernel is a compiled ``RawKernel``."""

    def __init__(self) -> None:
        self._cp: Any = importlib.import_module("cupy")
        self._cpx: Any = importlib.import_module("cupyx")
        self._dev = self._cp.cuda.Device(0)
        self._dev.use()
        props = self._cp.cuda.runtime.getDeviceProperties(0)
        name = props["name"]
        self.name = f"cupy: {name.decode() if isinstance(name, bytes) else name}"
        self._one = self._cp.zeros(1, dtype=self._cp.int32)
        self._empty: Any = self._cp.RawKernel(_EMPTY_KERNEL, "perfctl_empty")
        self._spin: Any = self._cp.RawKernel(_SPIN_KERNEL, "perfctl_spin")
        self._hz = float(props.get("clockRate", 2_000_000)) * 1e3  # clockRate is in kHz
        # Compile and load both kernels now, not inside the first timed call.
        self.launch_empty()
        self.launch_tiny()
        self.sync()

    def host(self, nbytes: int) -> Any:
        """A pinned (page-locked) host buffer, so copies run at full PCIe speed."""
        buf = self._cpx.empty_pinned((nbytes,), dtype="uint8")
        buf[:] = 1
        return buf

    def device(self, nbytes: int) -> Any:
        """A zeroed device buffer."""
        return self._cp.zeros(nbytes, dtype=self._cp.uint8)

    def h2d(self, dst: Any, src: Any) -> None:
        """Enqueue a host-to-device copy."""
        dst.set(src)

    def d2h(self, dst: Any, src: Any) -> None:
        """Enqueue a device-to-host copy."""
        src.get(out=dst)

    def xor_(self, page: Any, delta: Any) -> None:
        """Apply a delta to a page in place (one elementwise kernel)."""
        # 64-bit words when the size allows: one byte per thread leaves the kernel
        # compute-bound, and the L2 and HBM it is meant to show never limit it.
        if page.nbytes % 8 == 0:
            page, delta = page.view(self._cp.uint64), delta.view(self._cp.uint64)
        self._cp.bitwise_xor(page, delta, out=page)

    def launch_empty(self) -> None:
        """Launch a kernel with no body: the floor of any launch."""
        self._empty((1,), (1,), ())

    def launch_tiny(self) -> None:
        """Launch a one-element kernel."""
        self._one += 1

    def sync(self) -> None:
        """Wait until every queued copy and kernel has finished."""
        self._dev.synchronize()

    def device_times(self, step: Any, loops: int, before: Any = None) -> list[float]:
        """Seconds per call of ``step`` measured with CUDA events (see the module doc)."""
        event, elapsed = self._cp.cuda.Event, self._cp.cuda.get_elapsed_time
        return event_times(lambda: (event(), event()), elapsed, step, loops, before, self.hold)

    def hold(self, seconds: float) -> None:
        """Queue a kernel that keeps the device busy for about ``seconds``."""
        self._spin((1,), (1,), (self._cp.int64(seconds * self._hz),))

    def flush_l2(self) -> None:
        """Overwrite a buffer larger than L2, so the next kernel reads from HBM."""
        if getattr(self, "_flush", None) is None:
            self._flush = self._cp.empty(FLUSH_BYTES, dtype=self._cp.uint8)
        self._flush.fill(0)

    def close(self) -> None:
        """Return cached device and pinned memory to the driver."""
        self.sync()
        self._flush = None
        self._cp.get_default_memory_pool().free_all_blocks()
        self._cp.get_default_pinned_memory_pool().free_all_blocks()


class TorchDevice:
    """The gpu protocol on PyTorch; its empty kernel is ``torch.cuda._sleep(0)``."""

    def __init__(self) -> None:
        self._torch: Any = importlib.import_module("torch")
        self._dev = self._torch.device("cuda", 0)
        self.name = f"torch: {self._torch.cuda.get_device_name(0)}"
        self._one = self._torch.zeros(1, dtype=self._torch.int32, device=self._dev)
        self.launch_empty()
        self.launch_tiny()
        self.sync()

    def host(self, nbytes: int) -> Any:
        """A pinned (page-locked) host buffer."""
        return self._torch.ones(nbytes, dtype=self._torch.uint8, pin_memory=True)

    def device(self, nbytes: int) -> Any:
        """A zeroed device buffer."""
        return self._torch.zeros(nbytes, dtype=self._torch.uint8, device=self._dev)

    def h2d(self, dst: Any, src: Any) -> None:
        """Enqueue a host-to-device copy (asynchronous from pinned memory)."""
        dst.copy_(src, non_blocking=True)

    def d2h(self, dst: Any, src: Any) -> None:
        """Enqueue a device-to-host copy (asynchronous into pinned memory)."""
        dst.copy_(src, non_blocking=True)

    def xor_(self, page: Any, delta: Any) -> None:
        """Apply a delta to a page in place."""
        if page.numel() % 8 == 0:  # 64-bit words, as CupyDevice.xor_ does
            page, delta = page.view(self._torch.int64), delta.view(self._torch.int64)
        page.bitwise_xor_(delta)

    def launch_empty(self) -> None:
        """Launch PyTorch's spin kernel for zero cycles: the nearest it has to an empty one."""
        sleep = getattr(self._torch.cuda, "_sleep", None)
        if sleep is None:  # a private helper: fall back to the tiny kernel if it is gone
            self.launch_tiny()
        else:
            sleep(0)

    def launch_tiny(self) -> None:
        """Launch a one-element kernel."""
        self._one.add_(1)

    def sync(self) -> None:
        """Wait until every queued copy and kernel has finished."""
        self._torch.cuda.synchronize(self._dev)

    def device_times(self, step: Any, loops: int, before: Any = None) -> list[float]:
        """Seconds per call of ``step`` measured with CUDA events (see the module doc)."""
        event = self._torch.cuda.Event

        def pair() -> tuple[Any, Any]:
            return event(enable_timing=True), event(enable_timing=True)

        return event_times(pair, lambda a, b: a.elapsed_time(b), step, loops, before, self.hold)

    def hold(self, seconds: float) -> None:
        """Queue PyTorch's spin kernel for about ``seconds`` (cycles at a 2 GHz guess: a
        longer hold only costs untimed device time)."""
        sleep = getattr(self._torch.cuda, "_sleep", None)
        if sleep is not None:
            sleep(int(seconds * 2e9))

    def flush_l2(self) -> None:
        """Overwrite a buffer larger than L2, so the next kernel reads from HBM."""
        if getattr(self, "_flush", None) is None:
            self._flush = self._torch.empty(FLUSH_BYTES, dtype=self._torch.uint8, device=self._dev)
        self._flush.zero_()

    def close(self) -> None:
        """Return cached device memory to the driver."""
        self.sync()
        self._flush = None
        self._torch.cuda.empty_cache()


def _usable(backend: str) -> bool:
    try:
        if backend == "cupy":
            cp: Any = importlib.import_module("cupy")
            return bool(cp.cuda.runtime.getDeviceCount() > 0)
        torch: Any = importlib.import_module("torch")
        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - a missing or broken CUDA stack means "not usable"
        return False


def open_device(backend: str | None = None) -> CupyDevice | TorchDevice:
    """Open device 0 through ``backend``, or the first usable of CuPy and PyTorch."""
    candidates = [backend] if backend else list(BACKENDS)
    for name in candidates:
        if name not in BACKENDS:
            raise ValueError(f"unknown GPU backend {name!r}; expected one of {BACKENDS}")
        if _usable(name):
            return CupyDevice() if name == "cupy" else TorchDevice()
    raise RuntimeError(f"no usable CUDA device through {' or '.join(candidates)}")
