"""Writing files so that a reader (or an interrupted perfctl) never sees half of one."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def atomic_write_text(path: Path, text: str) -> None:
    """Write a file so readers see the old or the new content, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_copy(src: Path, dest: Path) -> None:
    """Copy a file into place atomically."""
    atomic_write_text(dest, src.read_text(encoding="utf-8"))


OUTPUT_GITIGNORE = "# Created by perfctl: everything in here is generated.\n*\n"


def ensure_output_dir(reports_dir: Path, folder: Path) -> None:
    """Make ``folder``; a ``reports_dir`` perfctl creates for it gets a ``.gitignore`` of ``*``.

    perfctl's reports would otherwise be untracked files in the user's checkout,
    making ``WORKTREE`` dirty (and its environment stale) after every report. A
    reports folder the user made, or a folder elsewhere (``-o``), is theirs to manage.
    """
    inside = folder.resolve().is_relative_to(reports_dir.resolve())
    if inside and not reports_dir.exists():
        reports_dir.mkdir(parents=True, exist_ok=True)
        (reports_dir / ".gitignore").write_text(OUTPUT_GITIGNORE, encoding="utf-8")
    folder.mkdir(parents=True, exist_ok=True)
