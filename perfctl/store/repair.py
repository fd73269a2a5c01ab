"""Damaged store files: named in a warning and set aside, never fatal for the rest.

A record (``run.json``, a comparison file) that cannot be read or does not
match its schema is moved, with its folder for a run, under ``damaged/`` in the
state directory, so every other record keeps working and nothing is lost for
inspection. The SQLite index holds nothing the JSON files do not: when SQLite
reports it corrupt (or it is not a file at all) it is set aside the same way
and rebuilt from the JSON files.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path

from perfctl.errors import StoreError

DAMAGED = "damaged"
# Errors of building a record from parsed JSON that does not match the schema.
RECORD_ERRORS = (OSError, ValueError, KeyError, TypeError, AttributeError)


def unwritable(root: Path, exc: OSError) -> StoreError:
    """A store that cannot be written (read-only, a file in the way, a full disk)."""
    return StoreError(
        f"cannot write to the store {root}: {exc.strerror or exc}",
        "make it writable (or free disk space), or point [tool.perfctl] store at a writable folder",
    )


@contextlib.contextmanager
def writing(root: Path) -> Iterator[None]:
    """Writing into the store: an OSError becomes :func:`unwritable` (exit 2)."""
    try:
        yield
    except OSError as exc:
        raise unwritable(root, exc) from exc


def warn(message: str) -> None:
    """A one-line warning on stderr (the store has no renderer of its own)."""
    from perfctl.render.escape import strip_unsafe

    sys.stderr.write(f"Warning: {strip_unsafe(message)}\n")
    sys.stderr.flush()


def _free_name(dest: Path) -> Path:
    n = 1
    out = dest
    while out.exists() or out.is_symlink():
        n += 1
        out = dest.with_name(f"{dest.name}.{n}")
    return out


def set_aside(root: Path, item: Path, why: str) -> Path | None:
    """Move ``item`` (under ``root``) to ``root/damaged/...`` and say so; None if it stays."""
    record = item / "run.json" if item.is_dir() else item
    what = f"the damaged store file {record} ({first_line(why)})"
    dest = _free_name(root / DAMAGED / item.relative_to(root))
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(item, dest)
    except OSError as exc:
        warn(f"skipping {what}: cannot move it aside ({exc.strerror or exc})")
        return None
    warn(f"set aside {what} as {dest}")
    return dest


def first_line(text: object) -> str:
    """The first line of an error message, shortened."""
    line = (str(text).strip().splitlines() or [""])[0]
    return line if len(line) <= 200 else line[:199] + "…"


def is_corrupt(exc: sqlite3.DatabaseError, db_path: Path) -> bool:
    """SQLite says the index is damaged, or it is not a file (not: busy, locked, read-only)."""
    if db_path.exists() and not db_path.is_file():
        return True
    text = str(exc).lower()
    return type(exc) is sqlite3.DatabaseError or "malformed" in text or "not a database" in text


def set_index_aside(db_path: Path, why: object) -> None:
    """Move a damaged index out of the way (kept for inspection) so a fresh one starts."""
    for extra in ("-wal", "-shm", "-journal"):
        with contextlib.suppress(OSError):
            db_path.with_name(db_path.name + extra).unlink()
    if db_path.exists() or db_path.is_symlink():
        set_aside(db_path.parent, db_path, str(why))
