"""Checks for a regime's ``requires`` list (modules and capabilities)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterable

PLATFORMS = {"linux": "linux", "macos": "darwin", "darwin": "darwin", "windows": "win32"}


def gpu_reason() -> str | None:
    """None when a CUDA device is usable through CuPy or PyTorch, else why not."""
    reasons = []
    for probe in (_cupy_reason, _torch_reason):  # in turn: PyTorch is slow to import
        reason = probe()
        if reason is None:
            return None
        reasons.append(reason)
    return "; ".join(r for r in reasons if r) or (
        "no CUDA device library (install cupy or torch with CUDA support)"
    )


_ABSENT = ""  # the library is not installed: no reason of its own
# What a broken CUDA set-up raises: a missing shared library, a driver or runtime error
# (CuPy's CUDARuntimeError and PyTorch's are RuntimeErrors). Anything else is named as
# unexpected, but still only skips the GPU regimes: the probe must not fail the CPU ones.
_CUDA_ERRORS = (ImportError, OSError, RuntimeError)


def _failed(library: str, exc: Exception) -> str:
    how = (
        "cannot use a CUDA device" if isinstance(exc, _CUDA_ERRORS) else "probe failed unexpectedly"
    )
    return f"{library} {how} ({type(exc).__name__}: {exc})"


def _cupy_reason() -> str | None:
    if not _importable("cupy"):
        return _ABSENT
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            return None
        return "CuPy sees no CUDA device"
    except Exception as exc:  # noqa: BLE001 - said in the reason, never raised
        return _failed("CuPy", exc)


def _torch_reason() -> str | None:
    if not _importable("torch"):
        return _ABSENT
    try:
        import torch

        if torch.cuda.is_available():
            return None
    except Exception as exc:  # noqa: BLE001 - said in the reason, never raised
        return _failed("PyTorch", exc)
    return "PyTorch is installed but reports no CUDA device"


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a missing parent package raises
        return False


def unmet(requires: Iterable[str]) -> str | None:
    """The reason the first unmet requirement fails, or None when all are met."""
    for req in requires:
        if req == "gpu":
            reason = gpu_reason()
            if reason:
                return reason
        elif req in PLATFORMS:
            if not sys.platform.startswith(PLATFORMS[req]):
                return f"requires {req} (this is {sys.platform})"
        elif not _importable(req):
            return f"module `{req}` is not installed"
    return None
