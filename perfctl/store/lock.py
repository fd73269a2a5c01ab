"""The project lock: one perfctl process at a time changes a project's state dir.

It is an ``flock(2)`` on ``<state_dir>/lock``. The kernel drops it when the
holder exits however it dies (SIGKILL included), so a stale lock never needs
cleaning by hand. The holder writes its pid and what it is doing into the
file, so a waiting process can say whom it waits for. The lock is re-entrant
within a process (nested uses are no-ops), which lets library functions take
it for themselves while a command already holds it for the whole run; it is
not a lock between threads.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from perfctl.errors import LockTimeout
from perfctl.store.repair import unwritable

POLL_S = 0.1
DEFAULT_WAIT = 600.0  # seconds, for every command; --lock-wait changes it where offered
GITIGNORE = "# Created by perfctl: everything in here is generated.\n*\n"

# Lock files this process holds, by path, with their nesting depth.
_held: dict[str, int] = {}


def ensure_state_dir(state_dir: Path) -> Path:
    """Create the state dir with a ``.gitignore`` so git never sees its contents."""
    state_dir.mkdir(parents=True, exist_ok=True)
    ignore = state_dir / ".gitignore"
    if not ignore.exists():
        ignore.write_text(GITIGNORE, encoding="utf-8")
    return state_dir


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def read_owner(path: Path) -> dict[str, object]:
    """The pid and task last written into a lock file ({} if unreadable)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _describe(owner: dict[str, object]) -> str:
    pid = owner.get("pid", "?")
    what = f" ({owner['what']})" if owner.get("what") else ""
    return f"pid {pid}{what}"


def _write_owner(fd: int, what: str) -> None:
    data = json.dumps({"pid": os.getpid(), "what": what, "since": time.time()})
    os.ftruncate(fd, 0)
    os.pwrite(fd, data.encode(), 0)


def _timeout(path: Path, owner: dict[str, object], wait: float | None) -> LockTimeout:
    pid = owner.get("pid", "?")
    # Only a command with --lock-wait (a wait given) may be told to use it: ci, profile and
    # clean wait the default, and suggesting a flag they refuse would be a second error.
    longer = "then run it again" if wait is None else "or wait longer with `--lock-wait SECONDS`"
    return LockTimeout(
        f"another perfctl process, {_describe(owner)}, holds the project lock {path}",
        f"wait for pid {pid} to finish (or stop it), {longer} (gave up after {_seconds(wait):g} s)",
    )


def _seconds(wait: float | None) -> float:
    return DEFAULT_WAIT if wait is None else wait


def _wait_for(fd: int, path: Path, wait: float | None) -> None:
    owner = read_owner(path)
    seconds = _seconds(wait)
    sys.stderr.write(
        f"perfctl: waiting up to {seconds:g} s for the project lock, held by {_describe(owner)}\n"
    )
    sys.stderr.flush()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
        if _try_lock(fd):
            return
    raise _timeout(path, owner, wait)


def _acquire(path: Path, wait: float | None, what: str) -> int:
    # os.open's fd is not inherited by subprocesses (PEP 446), so a build
    # command that outlives us cannot keep the lock.
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if not _try_lock(fd):
            _wait_for(fd, path, wait)
        _write_owner(fd, what)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _release(fd: int) -> None:
    try:
        os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # closing the last descriptor drops the flock


@contextmanager
def project_lock(state_dir: Path, *, wait: float | None = None, what: str = "") -> Iterator[None]:
    """Hold the project lock, waiting up to ``wait`` s (LockTimeout after that; None: the
    default wait of a command without ``--lock-wait``)."""
    try:
        path = ensure_state_dir(state_dir) / "lock"
        key = str(path.resolve())
        depth = _held.get(key, 0)
        fd = None if depth else _acquire(path, wait, what)
    except OSError as exc:
        raise unwritable(state_dir, exc) from exc
    _held[key] = depth + 1
    try:
        yield
    finally:
        if depth:
            _held[key] = depth
        else:
            del _held[key]
        if fd is not None:
            _release(fd)
