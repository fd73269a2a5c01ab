"""perfctl and pyperf made importable inside the built environments, without installing them.

A ``perfctl_runtime.pth`` in each environment names ``<state_dir>/runtime/<version>/``,
which holds links to the packages perfctl itself runs from. The ``.pth`` comes last
on ``sys.path``, so the project's own packages always win.
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


def link_runtime(state_dir: Path, env_dir: Path, inherit: bool = False) -> None:
    """Write the .pth that makes perfctl and pyperf importable inside ``env_dir``.

    With ``inherit`` (``inherit_site_packages = true``) the running interpreter's
    site-packages follow, last: a GPU project's torch or CuPy, too big to install
    per ref, comes from there, and the ref's own packages still win.
    """
    lines = [str(runtime_dir(state_dir))] + (host_site_packages() if inherit else [])
    text = "".join(f"{line}\n" for line in lines)
    for site in env_dir.glob("lib/python*/site-packages"):
        pth = site / RUNTIME_PTH
        if not pth.is_file() or pth.read_text(encoding="utf-8") != text:
            pth.write_text(text, encoding="utf-8")


def host_site_packages() -> list[str]:
    """The site-packages directories of the interpreter running perfctl (venv or not)."""
    import site

    return [p for p in site.getsitepackages() if Path(p).is_dir()]
