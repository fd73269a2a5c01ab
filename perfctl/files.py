"""Writing files so that a reader (or an interrupted perfctl) never sees half of one.

Every file goes to a temporary file renamed over the target. A rename replaces
whatever the name points at: a symlink, a FIFO, ``/dev/null`` (as root). So every
user-named target (``report -o``, the plan, ``ci --artifacts``) goes through
:func:`check_output_file` (or :func:`check_output_dir` for a folder of artefacts)
first, and anything but a regular file or a new path is refused with exit 2 before
any work is done. The check and the rename are not one atomic step: this guards
against mistakes and planted links, not against a local attacker racing perfctl
for the same path.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from perfctl.errors import UsageError


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


STDOUT = Path("-")  # `-o -`: write to stdout where a command allows it


def _kind(mode: int) -> str:
    kinds = (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def _hint(kind: str, path: Path, stdout_ok: bool) -> str:
    if kind == "a symbolic link":
        hint = "name the file the link points to, or remove the link"
    elif kind == "a directory":
        hint = f"name a file inside it, e.g. {path / 'report.html'}"
    else:
        hint = "name a regular file or a path that does not exist yet"
    return hint + ("; `-o -` writes to stdout" if stdout_ok else "")


def _lstat(path: Path, what: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UsageError(
            f"cannot use {path} as {what}: {exc.strerror}", "choose another path"
        ) from exc


def _check_parent(path: Path, what: str) -> None:
    for parent in path.absolute().parents:
        st = _lstat(parent, what)
        if st is None:
            continue
        if not stat.S_ISDIR(os.stat(parent).st_mode):
            raise UsageError(
                f"cannot write {what} {path}: {parent} is not a directory",
                "choose a path inside a directory",
            )
        return


def check_output_file(path: Path, what: str = "the output", *, stdout_ok: bool = False) -> Path:
    """``path`` if it is a regular file or a new path; UsageError (exit 2) otherwise."""
    if stdout_ok and path == STDOUT:
        return path
    st = _lstat(path, what)
    if st is None:
        _check_parent(path, what)
        return path
    if stat.S_ISREG(st.st_mode):
        return path
    kind = _kind(st.st_mode)
    raise UsageError(
        f"refusing to write {what} to {path}: it is {kind}, not a regular file",
        _hint(kind, path, stdout_ok),
    )


def check_output_dir(path: Path, what: str = "the output folder") -> Path:
    """``path`` if it is a real directory (no link) or a new path; UsageError otherwise."""
    st = _lstat(path, what)
    if st is None:
        _check_parent(path, what)
        return path
    if stat.S_ISDIR(st.st_mode):
        return path
    kind = _kind(st.st_mode)
    hint = "name the folder the link points to" if kind == "a symbolic link" else "name a folder"
    raise UsageError(f"refusing to write {what} into {path}: it is {kind}", hint)


# What `perfctl ci` writes into its artefacts folder, as write_output names it in errors.
ARTEFACT = "a CI artefact"


def write_output(path: Path, text: str, what: str = "the output", *, mode: int = 0o644) -> Path:
    """Check ``path`` and write ``text`` to it atomically; an OS error is exit 2."""
    check_output_file(path, what)
    try:
        atomic_write_text(path, text)
        path.chmod(mode)  # mkstemp made it 0600
    except OSError as exc:
        raise UsageError(
            f"cannot write {what} to {path}: {exc.strerror or exc}",
            "choose a writable path",
        ) from exc
    return path


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


def read_prefix(path: Path, limit: int) -> bytes:
    """At most ``limit`` bytes from the start of a file (a device or FIFO is never read whole)."""
    with open(path, "rb") as fh:
        return fh.read(limit)


BY_STAT_BYTES = 32 * 2**20  # bigger files count by size and mtime, not content


def feed_file(digest: Any, path: Path) -> None:
    """Feed one file to ``digest``: its content in chunks, or its stat when big."""
    with contextlib.suppress(OSError):
        if path.is_symlink():
            digest.update(os.readlink(path).encode())
        elif path.is_file() and (st := path.stat()).st_size > BY_STAT_BYTES:
            digest.update(f"stat:{st.st_size}:{st.st_mtime_ns}".encode())
        elif path.is_file():
            with open(path, "rb") as fh:
                for chunk in iter(lambda: fh.read(2**20), b""):
                    digest.update(chunk)
