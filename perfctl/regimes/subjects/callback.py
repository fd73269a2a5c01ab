"""Reference callback subjects: re-entrant child->parent callbacks and a callback queue.

The ``callback`` protocol (``perfctl.subject("callback", ...)``): ``factory()`` returns a
bridge with ``accumulate(n, callback, batched=False) -> int`` and ``close()``. The child sums
``callback(i)`` for ``i in range(n)``, calling back into the parent once per item, or once
for the whole batch when ``batched`` (seed 000's ``callback_chatter`` and its Phase 4 fix).

The ``callback_registry`` protocol: ``factory(strategy="lock"|"lockfree")`` returns a queue
with ``register(cb)`` (safe from any thread) and ``drain() -> int`` (runs pending callbacks,
returns how many). ``lock`` runs callbacks while holding the lock, so registering threads
wait; ``lockfree`` appends without a lock and drains in two phases, extracting a batch and
then running it with no lock held (seed 004's Phase 3.1.4).

The ``callback_loop`` protocol is ``asyncio.new_event_loop``'s: a factory returning an
event loop (``call_soon``, ``run_forever``, ``stop``, ``close``).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from multiprocessing.context import SpawnProcess
from typing import Any

from perfctl.regimes.subjects.ipc import (
    Endpoint,
    open_channel,
    spawn_context,
    start_child,
    stop_child,
    watch_parent,
)

STRATEGIES = ("lock", "lockfree")
# Seed 004 extracts at most this many callbacks per locked phase.
MAX_BATCH = 128


def _accumulate(end: Endpoint, n: int, batched: bool) -> tuple[str, Any]:
    if batched:
        end.send(("cb_batch", list(range(n))))
        tag, value = end.recv()
        return ("done", sum(value)) if tag == "ret" else ("failed", value)
    total = 0
    for i in range(n):
        end.send(("cb", i))
        tag, value = end.recv()
        if tag != "ret":
            return "failed", value
        total += value
    return "done", total


def serve(end: Endpoint, parent_pid: int) -> None:
    """Child main loop of :class:`CallbackBridge`."""
    watch_parent(end, parent_pid)
    try:
        while True:
            try:
                msg = end.recv()
            except EOFError:
                return
            if msg[0] == "close":
                return
            end.send(_accumulate(end, msg[1], msg[2]))
    finally:
        end.close()


class CallbackBridge:
    """A child process that calls back into its parent (the ``callback`` protocol)."""

    def __init__(self) -> None:
        parent, child = open_channel(spawn_context(), "pipe")
        self._end: Endpoint | None = parent
        self._proc: SpawnProcess | None = start_child(serve, parent, child)

    def accumulate(self, n: int, callback: Callable[[int], int], batched: bool = False) -> int:
        """Sum ``callback(i)`` over ``range(n)``, computed by the child through callbacks."""
        if self._end is None:
            raise RuntimeError("the bridge is closed")
        end = self._end
        end.send(("accumulate", n, batched))
        # Serve the child's re-entrant requests until it reports the result.
        while True:
            tag, value = end.recv()
            if tag == "done":
                return int(value)
            if tag == "failed":
                raise RuntimeError(f"callback failed: {value}")
            end.send(self._answer(tag, value, callback))

    @staticmethod
    def _answer(tag: str, value: Any, callback: Callable[[int], int]) -> tuple[str, Any]:
        try:
            if tag == "cb":
                return "ret", callback(value)
            return "ret", [callback(i) for i in value]
        except Exception as exc:  # noqa: BLE001 - the child must hear about it to stop
            return "error", f"{type(exc).__name__}: {exc}"

    def close(self) -> None:
        """Stop the child (idempotent)."""
        proc, end = self._proc, self._end
        self._proc, self._end = None, None
        stop_child(proc, end)


class CallbackQueue:
    """Callbacks registered from many threads and drained by one (``callback_registry``).

    ``register`` and ``drain`` are bound to the strategy's functions at construction, so
    the timed path has no dispatch of its own.
    """

    def __init__(self, strategy: str = "lock") -> None:
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}; expected one of {STRATEGIES}")
        self.strategy = strategy
        self._lock = threading.Lock()
        self._items: list[Callable[[], Any]] = []
        self._pending: deque[Callable[[], Any]] = deque()
        if strategy == "lock":
            self.register, self.drain = self._register_locked, self._drain_locked
        else:
            self.register, self.drain = self._register_lockfree, self._drain_two_phase

    def _register_locked(self, cb: Callable[[], Any]) -> None:
        with self._lock:
            self._items.append(cb)

    def _drain_locked(self) -> int:
        # One phase: the lock is held while callbacks run, so registration waits.
        with self._lock:
            items = self._items
            for cb in items:
                cb()
            n = len(items)
            items.clear()
        return n

    def _register_lockfree(self, cb: Callable[[], Any]) -> None:
        # deque.append is atomic under the GIL: no lock on the producer side.
        self._pending.append(cb)

    def _drain_two_phase(self) -> int:
        pending, n = self._pending, 0
        while pending:
            # Phase 1: extract a bounded batch under the lock; phase 2: run it unlocked.
            with self._lock:
                batch = [pending.popleft() for _ in range(min(MAX_BATCH, len(pending)))]
            for cb in batch:
                cb()
            n += len(batch)
        return n

    def close(self) -> None:
        """Drop anything still queued."""
        with self._lock:
            self._items.clear()
            self._pending.clear()
