"""The runtime links: workers import the host's perfctl and pyperf without installing them.

``perfctl_runtime.pth`` in an environment's site-packages appends
``<state_dir>/runtime/<version>`` (links to the host's packages) to ``sys.path``,
after the project's own packages.
"""

from __future__ import annotations

import os
from pathlib import Path

import perfctl

RUNTIME_PTH = "perfctl_runtime.pth"
RUNTIME_LINKS = ("perfctl", "pyperf")  # the links runtime_dir makes (clean removes them)


def _symlink(link: Path, target: Path) -> None:
    if link.is_symlink() and os.readlink(link) == str(target):
        return
    tmp = link.with_name(f".{link.name}.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target, target_is_directory=True)
    os.replace(tmp, link)  # atomic: a worker never sees the link missing


def runtime_dir(state_dir: Path) -> Path:
    """A directory with `perfctl` and `pyperf` linked to the host's packages."""
    import pyperf

    runtime = state_dir.absolute() / "runtime" / perfctl.__version__
    runtime.mkdir(parents=True, exist_ok=True)
    for module in (perfctl, pyperf):
        name = module.__name__
        _symlink(runtime / name, Path(str(module.__file__)).resolve().parent)
    return runtime


def link_runtime(state_dir: Path, env_dir: Path) -> None:
    """Write the .pth that makes perfctl and pyperf importable inside ``env_dir``."""
    line = f"{runtime_dir(state_dir)}\n"
    for site in env_dir.glob("lib/python*/site-packages"):
        pth = site / RUNTIME_PTH
        if not pth.is_file() or pth.read_text(encoding="utf-8") != line:
            pth.write_text(line, encoding="utf-8")
