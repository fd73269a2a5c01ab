"""Reference shared-memory subject: one hop of a large buffer to a receiver process.

The ``shm`` protocol (``perfctl.subject("shm", default="perfctl.regimes.subjects.shm:FrameChannel")``):
``factory(transport="pipe"|"ring", slot_bytes=N)`` returns a channel with
``hop(buffer, shape=None) -> int`` and ``close()``. ``hop`` moves one bytes-like buffer (a
numpy frame included) to the receiver, which builds a view of it (a numpy array of ``shape``
when given), reads three bytes of it and answers :func:`probe`'s value. ``pipe`` copies the
payload through the kernel; ``ring`` copies it once into a slot of a
``multiprocessing.shared_memory`` ring and sends only the slot number, and the receiver reads
the slot in place (seed 003's zero-copy transport). Every block is unlinked in ``close()``,
also after a failed hop; their names start with :data:`SHM_PREFIX`.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import secrets
from multiprocessing import shared_memory
from typing import Any

from perfctl.regimes.subjects.ipc import (
    Endpoint,
    open_channel,
    spawn_context,
    start_child,
    stop_child,
    watch_parent,
)

TRANSPORTS = ("pipe", "ring")
SHM_PREFIX = "perfctl_shm_"
# Hops are synchronous (the sender waits for the ack), so two slots are plenty.
RING_SLOTS = 2


def probe(view: Any, shape: tuple[int, ...] | None = None) -> int:
    """What the receiver answers: its size plus its first, middle and last byte."""
    n = len(view)
    if shape is None:
        return n + int(view[0]) + int(view[n // 2]) + int(view[n - 1])
    np: Any = importlib.import_module("numpy")
    flat = np.frombuffer(view, dtype=np.uint8, count=n).reshape(shape).reshape(-1)
    return n + int(flat[0]) + int(flat[n // 2]) + int(flat[n - 1])


def _buffer(block: shared_memory.SharedMemory) -> memoryview:
    buf = block.buf
    if buf is None:  # only after close(), which this module never reads past
        raise ValueError(f"shared memory block {block.name} is closed")
    return buf


def _receive_slot(
    blocks: dict[str, shared_memory.SharedMemory], name: str, n: int, shape: tuple[int, ...] | None
) -> int:
    block = blocks.get(name)
    if block is None:
        # Attach once per slot, as a long-lived receiver would.
        block = blocks[name] = shared_memory.SharedMemory(name=name)
    view = _buffer(block)[:n]
    try:
        return probe(view, shape)
    finally:
        view.release()  # the block cannot close while a view is exported


def serve(end: Endpoint, parent_pid: int) -> None:
    """Receiver main loop: answer each hop with :func:`probe`."""
    watch_parent(end, parent_pid)
    blocks: dict[str, shared_memory.SharedMemory] = {}
    try:
        while True:
            try:
                msg = end.recv()
            except EOFError:
                return
            try:
                if msg[0] == "close":
                    return
                if msg[0] == "hop":
                    ack = probe(memoryview(end.recv_bytes()), msg[2])
                else:
                    ack = _receive_slot(blocks, msg[1], msg[2], msg[3])
                end.send((True, ack))
            except Exception as exc:  # noqa: BLE001 - report it, keep serving
                end.send((False, f"{type(exc).__name__}: {exc}"))
    finally:
        for block in blocks.values():
            block.close()
        end.close()


class FrameChannel:
    """A sender and a receiver process joined by a pipe or a shared-memory ring (``shm``)."""

    def __init__(self, transport: str = "ring", slot_bytes: int = 1 << 20) -> None:
        if transport not in TRANSPORTS:
            raise ValueError(f"unknown transport {transport!r}; expected one of {TRANSPORTS}")
        self.transport, self.slot_bytes = transport, slot_bytes
        self._blocks: list[shared_memory.SharedMemory] = []
        self._next = 0
        self._end: Endpoint | None = None
        self._proc: Any = None
        try:
            if transport == "ring":
                self._create_ring(slot_bytes)
            parent, child = open_channel(spawn_context(), "pipe")
            self._end = parent
            self._proc = start_child(serve, parent, child)
        except BaseException:
            self.close()
            raise

    def _create_ring(self, slot_bytes: int) -> None:
        stem = f"{SHM_PREFIX}{os.getpid()}_{secrets.token_hex(4)}_"
        for i in range(RING_SLOTS):
            self._blocks.append(
                shared_memory.SharedMemory(name=f"{stem}{i}", create=True, size=slot_bytes)
            )

    @property
    def block_names(self) -> list[str]:
        """The ring's shared-memory block names (empty for the pipe transport)."""
        return [b.name for b in self._blocks]

    def hop(self, buffer: Any, shape: tuple[int, ...] | None = None) -> int:
        """Move one buffer to the receiver and return its :func:`probe` answer."""
        end = self._end
        if end is None:
            raise RuntimeError("the channel is closed")
        view = memoryview(buffer).cast("B")
        n = view.nbytes
        if self.transport == "pipe":
            end.send(("hop", n, shape))
            end.send_bytes(view)
        else:
            end.send(self._fill_slot(view, n, shape))
        ok, value = end.recv()
        if not ok:
            raise RuntimeError(f"shm receiver failed: {value}")
        return int(value)

    def _fill_slot(
        self, view: memoryview, n: int, shape: tuple[int, ...] | None
    ) -> tuple[object, ...]:
        if n > self.slot_bytes:
            raise ValueError(f"a {n}-byte buffer does not fit a {self.slot_bytes}-byte slot")
        block = self._blocks[self._next]
        self._next = (self._next + 1) % len(self._blocks)
        _buffer(block)[:n] = view  # the one copy this transport makes
        return ("slot", block.name, n, shape)

    def close(self) -> None:
        """Stop the receiver, then close and unlink every block, whatever failed before."""
        proc, end, blocks = self._proc, self._end, self._blocks
        self._proc, self._end, self._blocks = None, None, []
        try:
            stop_child(proc, end)
        finally:
            for block in blocks:
                with contextlib.suppress(OSError, BufferError):
                    block.close()
                with contextlib.suppress(FileNotFoundError):
                    block.unlink()
