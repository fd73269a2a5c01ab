"""Checks for a regime's ``requires`` list (modules and capabilities)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterable

PLATFORMS = {"linux": "linux", "macos": "darwin", "darwin": "darwin", "windows": "win32"}


def gpu_reason() -> str | None:
    """None when a CUDA device is usable through CuPy or PyTorch, else why not."""
    if importlib.util.find_spec("cupy") is not None:
        try:
            import cupy

            if cupy.cuda.runtime.getDeviceCount() > 0:
                return None
        except Exception as exc:  # noqa: BLE001 - any CUDA failure means "no GPU"
            return f"CuPy cannot use a CUDA device ({type(exc).__name__}: {exc})"
    if importlib.util.find_spec("torch") is not None:
        import torch

        if torch.cuda.is_available():
            return None
        return "PyTorch is installed but reports no CUDA device"
    return "no CUDA device library (install cupy or torch with CUDA support)"


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
