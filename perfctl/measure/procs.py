"""Child processes that never outlive perfctl.

Every child perfctl starts (benchmark workers, the regimes probe, py-spy,
custom build commands) runs through :func:`group`: in its own process group
(a terminal's Ctrl-C reaches perfctl alone), killed as a whole group when the
``with`` block ends for any reason (done, timeout, Ctrl-C, SIGTERM, an error),
and asked to die with perfctl (Linux ``PR_SET_PDEATHSIG``) so that even a
SIGKILL of perfctl cannot leave it running. The worker scripts ask the same
for themselves (:func:`die_with_parent`), which covers pyperf's own workers.

What a SIGKILL can still leave (a regime's or a build's own grandchildren) is
recorded per group under ``$TMPDIR/perfctl-groups-UID``; :func:`sweep` kills
those groups on the next start, once the perfctl that owned them is gone, and
removes the scratch folders (``perfctl-cmp-*``...) it left.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

PR_SET_PDEATHSIG = 1
# Scratch folders of one perfctl process (tempfile prefixes) that a sweep may remove.
SCRATCH_PREFIXES = ("perfctl-cmp-", "perfctl-cal-", "perfctl-run-")
OWNER_FILE = ".perfctl-owner"
POLL_MAX_MS = 2**31 - 1  # the longest timeout poll() takes, in ms (a C int)


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_SCHEDSTAT: dict[int, int] = {}  # thread id -> its schedstat file, opened once


def thread_schedstat() -> tuple[int, int]:
    """This thread's nanoseconds on a CPU and runnable waiting for one (Linux
    ``/proc/thread-self/schedstat``); (0, 0) where the kernel keeps none.

    The file stays open per thread and is read with ``pread``: the busy clock reads it
    around every timed value, where an open and close would cost tens of microseconds.
    """
    try:
        tid = threading.get_native_id()
        if tid not in _SCHEDSTAT:
            _SCHEDSTAT[tid] = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        ran, waited = os.pread(_SCHEDSTAT[tid], 64, 0).split()[:2]
        return int(ran), int(waited)
    except (OSError, ValueError):
        return 0, 0


def die_with_parent() -> None:
    """Have Linux SIGKILL this process when its parent dies; exit now if it has.

    For a process that is not its group's leader, the parent is the leader
    (pyperf's master and its workers, py-spy and the profiled worker), so a
    parent that died before the request took effect shows as a changed parent.
    """
    prctl = _prctl()
    if prctl is None:
        return
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getpgrp() != os.getpid() and os.getppid() != os.getpgrp():
        os._exit(1)


def _preexec(parent: int, prctl: Callable[..., int] | None) -> Callable[[], None]:
    def child() -> None:
        # Runs between fork and exec: only async-signal-safe work, no imports.
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return child


def kill_group(pgid: int) -> None:
    """SIGKILL a whole process group; nothing when it is already gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


# The signals perfctl turns into exceptions (cli/common.py): Ctrl-C, SIGTERM, SIGHUP.
HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold Ctrl-C, SIGTERM and SIGHUP while a child is being started; deliver the
    last that came once the child is known, so the caller's clean-up can reach it.

    Popen with a ``preexec_fn`` runs Python in perfctl between fork and exec (the
    at-fork hooks): an exception a signal handler raised there is printed as
    "Exception ignored" and lost, and one raised elsewhere inside Popen leaves the
    forked child running unknown. Held, the handler only notes the signal.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread runs Python's signal handlers
        return
    came: list[int] = []

    def note(signum: int, _frame: object) -> None:
        came.append(signum)

    # The handlers are swapped with the signals blocked, so that none runs half-way
    # (a `note` left installed would swallow every later one). Not blocked across
    # Popen: the child would inherit the mask.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])  # the mask as it is
    swapped: list[tuple[int, Any]] = []
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
        for sig in HELD:
            handler = signal.getsignal(sig)
            if callable(handler):  # a default or ignored signal raises nothing in Python
                signal.signal(sig, note)
                swapped.append((sig, handler))
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # pending ones reach `note`
        yield
    finally:
        try:
            signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
        finally:
            try:
                for held, handler in swapped:
                    signal.signal(held, handler)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if came:
            # The last, as cli/common.swallowed_signal reads it: Ctrl-C then SIGTERM
            # is a SIGTERM. Its own handler runs now and raises.
            signal.raise_signal(came[-1])


@contextlib.contextmanager
def group(argv: Sequence[str], **popen: Any) -> Iterator[subprocess.Popen[Any]]:
    """Start ``argv`` in its own process group; kill the group when the block ends.

    Call it from the main thread: Linux ties ``PR_SET_PDEATHSIG`` to the thread that
    forked, so a child started from another thread dies when that thread ends.
    """
    proc: subprocess.Popen[Any] | None = None
    entry: Path | None = None
    try:
        with _signals_held():
            proc = subprocess.Popen(
                list(argv),
                start_new_session=True,
                preexec_fn=_preexec(os.getpid(), _prctl()),  # noqa: PLW1509 - no threads spawn
                **popen,
            )
            entry = _register(proc.pid)
        yield proc
    finally:
        # Whatever the child left running in its group (a leaked grandchild, a
        # build's compiler) goes with it, on every path out of the block.
        if proc is not None:
            kill_group(proc.pid)
            with contextlib.suppress(BaseException):
                proc.wait()
        if entry is not None:
            entry.unlink(missing_ok=True)


def run(argv: Sequence[str], *, timeout: float, **popen: Any) -> subprocess.CompletedProcess[str]:
    """Like ``subprocess.run(capture_output=True, text=True)``, killing the whole group.

    Raises :class:`subprocess.TimeoutExpired` after the group is killed.
    """
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, **popen}
    with group(argv, **popen) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc.pid)
            proc.communicate()
            raise
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)


def call(argv: Sequence[str], *, timeout: float | None = None, **popen: Any) -> int | None:
    """Run ``argv`` to completion in its own group: its exit status, None on timeout."""
    with group(argv, **popen) as proc:
        try:
            return wait(proc, timeout)
        except subprocess.TimeoutExpired:
            return None


def wait(proc: subprocess.Popen[Any], timeout: float | None) -> int:
    """``proc.wait(timeout)``, woken the moment the child exits (Linux pidfd).

    Given a timeout, ``Popen.wait`` polls with sleeps growing to 50 ms, so it saw a
    worker's exit ~25 ms late on average: 7% of a 0.35 s worker process, every round
    of every comparison (benchmarks/README.md, "waiting for a worker").
    """
    if proc.returncode is not None:  # reaped already: its pid may be another's now
        return proc.returncode
    # poll() takes whole milliseconds in a C int: a longer (or infinite) timeout waits
    # as Popen does, where a late wake-up costs nothing.
    if timeout is None or not hasattr(os, "pidfd_open") or not timeout * 1000 < POLL_MAX_MS:
        return proc.wait(timeout=timeout)
    try:
        fd = os.pidfd_open(proc.pid)
    except OSError:  # a kernel before 5.3, or a sandbox that forbids it
        return proc.wait(timeout=timeout)
    try:
        # Readable once the child has exited; not reaped until proc.wait() below.
        # poll, not select: a pidfd numbered 1024 or more is out of select's range.
        waiter = select.poll()
        waiter.register(fd, select.POLLIN)
        ready = waiter.poll(math.ceil(max(timeout, 0.0) * 1000))
    finally:
        os.close(fd)
    if not ready:
        raise subprocess.TimeoutExpired(proc.args, timeout)
    return proc.wait()


def _registry() -> Path:
    return Path(tempfile.gettempdir()) / f"perfctl-groups-{os.getuid()}"


def _owned(folder: Path) -> bool:
    """A real folder of this user (another user could plant one in a shared /tmp)."""
    st = folder.lstat()
    return not folder.is_symlink() and folder.is_dir() and st.st_uid == os.getuid()


def _start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (tells a reused pid apart), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _me() -> str:
    return f"{os.getpid()} {_start_time(os.getpid())}"


def _register(pgid: int) -> Path | None:
    if not Path("/proc/self/stat").exists():
        return None
    folder = _registry()
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        if not _owned(folder):
            return None
        entry = folder / str(pgid)
        entry.write_text(f"{_me()} {_start_time(pgid)}\n", encoding="ascii")
    except OSError:
        return None  # no record: only the sweep after a SIGKILL misses it
    return entry


def _alive(owner: str) -> bool:
    pid, _, start = owner.partition(" ")
    return pid.isdigit() and _start_time(int(pid)) == start


def _sweep_group(entry: Path) -> None:
    try:
        owner_pid, owner_start, leader_start = entry.read_text(encoding="ascii").split()
    except (OSError, ValueError):
        entry.unlink(missing_ok=True)
        return
    if _alive(f"{owner_pid} {owner_start}"):
        return  # another perfctl, still running: its children are its business
    pgid = int(entry.name)
    # A leader that is gone leaves its group's pgid unusable for new processes,
    # so the group is ours; a live leader must be the very process we started.
    if _start_time(pgid) in (None, leader_start):
        kill_group(pgid)
    entry.unlink(missing_ok=True)


@contextlib.contextmanager
def scratch(prefix: str) -> Iterator[str]:
    """A temporary folder marked with its owner, so a sweep removes it once that dies."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        with contextlib.suppress(OSError):
            (Path(tmp) / OWNER_FILE).write_text(_me() + "\n", encoding="ascii")
        yield tmp


def _sweep_scratch(tmp: Path) -> None:
    for folder in tmp.iterdir():
        if not folder.name.startswith(SCRATCH_PREFIXES):
            continue
        with contextlib.suppress(OSError):
            # Folders without an owner record are not known to be ours: left alone.
            owner = (folder / OWNER_FILE).read_text(encoding="ascii").strip()
            if _owned(folder) and not _alive(owner):
                shutil.rmtree(folder, ignore_errors=True)


def sweep() -> None:
    """Kill process groups and remove scratch folders a killed perfctl left behind."""
    registry = _registry()
    with contextlib.suppress(OSError):
        if _owned(registry):
            for entry in registry.iterdir():
                if entry.name.isdigit():
                    _sweep_group(entry)
    with contextlib.suppress(OSError):
        _sweep_scratch(Path(tempfile.gettempdir()))
