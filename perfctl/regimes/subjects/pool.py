"""The ``ipc_pool`` subject: a process pool or a thread pool, and the tasks the regimes send it.

Protocol: ``factory(kind="process"|"thread", workers=4)`` returns a pool with
``submit(fn, *args) -> concurrent.futures.Future``, ``worker_pids() -> list[int]`` and
``close()``. The default is reached as ``perfctl.regimes.subjects.ipc:WorkerPool`` too.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from multiprocessing import get_context
from typing import Any

POOL_KINDS = ("process", "thread")
PARENT_POLL_S = 1.0  # how often an orphan-watching pool worker looks for its parent


def exit_with_parent(parent_pid: int) -> None:
    """Pool-worker initializer: exit once the parent is gone (killed by a timeout, say).

    Pool workers share the task queue's write end, so a dead parent never reads as EOF.
    """

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_S)
        os._exit(0)

    threading.Thread(target=watch, name="perfctl-parent-watch", daemon=True).start()


def echo_task(data: bytes) -> bytes:
    """Pool task: an I/O-shaped request that does no work (seed 002's echo)."""
    return data


def cpu_task(n: int) -> int:
    """Pool task: pure-Python CPU work that holds the GIL."""
    total = 0
    for i in range(n):
        total = (total + i * i) % 1_000_003
    return total


class WorkerPool:
    """A process pool or a thread pool with every worker started up front (``ipc_pool``)."""

    def __init__(self, kind: str = "process", workers: int = 4) -> None:
        if kind not in POOL_KINDS:
            raise ValueError(f"unknown pool kind {kind!r}; expected one of {POOL_KINDS}")
        self.kind, self.workers = kind, workers
        self._executor: Executor
        if kind == "process":
            self._executor = ProcessPoolExecutor(
                workers,
                mp_context=get_context("spawn"),  # as every reference subject
                initializer=exit_with_parent,
                initargs=(os.getpid(),),
            )
        else:
            self._executor = ThreadPoolExecutor(workers, thread_name_prefix="perfctl-pool")
        try:
            # Pools start workers lazily, one per submit while none is idle: submit one
            # task per worker so start-up is paid here, not inside the first timed run.
            for fut in [self._executor.submit(echo_task, b"") for _ in range(workers)]:
                fut.result()
        except BaseException:
            self.close()
            raise

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """Queue one task; the future completes with its result."""
        return self._executor.submit(fn, *args)

    def worker_pids(self) -> list[int]:
        """The worker processes' ids (none for a thread pool)."""
        # ProcessPoolExecutor has no public accessor for its processes.
        procs = getattr(self._executor, "_processes", None) or {}
        return [int(pid) for pid in procs]

    def close(self) -> None:
        """Cancel pending tasks and join every worker."""
        self._executor.shutdown(wait=True, cancel_futures=True)


def rss_bytes(pid: int | None = None) -> int | None:
    """Resident memory of a process from /proc (None where that is unavailable)."""
    path = f"/proc/{pid or os.getpid()}/status"
    try:
        with open(path, encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
