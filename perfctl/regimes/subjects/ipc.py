"""Reference IPC subjects: a child process served over a real OS channel, and a pool.

The ``ipc`` protocol (``perfctl.subject("ipc", default="perfctl.regimes.subjects.ipc:PipeBridge")``):
``factory(channel="pipe")`` returns a bridge with ``ping()``, ``increment() -> int``,
``checksum(payload: dict) -> int``, ``sum_each(values) -> int`` (one message per element),
``sum_bulk(values) -> int`` (one message), ``echo(data: bytes) -> bytes`` and ``close()``.
``channel`` is ``pipe`` (two one-way OS pipes), ``socket`` (a socketpair on POSIX) or
``queue`` (two ``multiprocessing.Queue``); a bridge of your own may ignore it.

The ``ipc_pool`` protocol: ``factory(kind="process"|"thread", workers=4)`` returns a pool with
``submit(fn, *args) -> concurrent.futures.Future``, ``worker_pids() -> list[int]`` and ``close()``.

:class:`RawEcho` is no subject: it is the physical floor (bare ``os.read``/``os.write`` on
the same kind of channel, no pickling, no protocol) that the ipc and callback regimes pair with.
Children are started with ``spawn`` on every OS, so a cold start costs a fresh interpreter.
"""

from __future__ import annotations

import os
import pickle
import queue
from collections.abc import Callable, Iterable, Mapping
from multiprocessing import get_context
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnContext, SpawnProcess
from typing import Any, Protocol

from perfctl.regimes.subjects.pool import (  # the pool's classic address stays valid
    POOL_KINDS as POOL_KINDS,
)
from perfctl.regimes.subjects.pool import WorkerPool as WorkerPool
from perfctl.regimes.subjects.pool import cpu_task as cpu_task
from perfctl.regimes.subjects.pool import echo_task as echo_task
from perfctl.regimes.subjects.pool import rss_bytes as rss_bytes

CHANNELS = ("pipe", "socket", "queue")
JOIN_TIMEOUT_S = 5.0
READ_BYTES = 1 << 16  # a pipe's capacity: asking more makes os.read allocate, then shrink
# How often a blocked queue read checks that its peer is still alive.
QUEUE_POLL_S = 1.0


def spawn_context() -> SpawnContext:
    """The multiprocessing context every reference subject starts children with."""
    return get_context("spawn")


class Endpoint(Protocol):
    """One side of a two-way message channel."""

    def send(self, obj: object) -> None: ...
    def recv(self) -> Any: ...
    def send_bytes(self, data: Any) -> None: ...
    def recv_bytes(self) -> bytes: ...
    def handoff(self) -> None: ...
    def close(self) -> None: ...


class ConnEnd:
    """A pair of multiprocessing Connections (the same one twice when duplex)."""

    def __init__(self, rx: Connection, tx: Connection) -> None:
        self.rx, self.tx = rx, tx

    def send(self, obj: object) -> None:
        """Pickle and send one object."""
        self.tx.send(obj)

    def recv(self) -> Any:
        """Receive one object; EOFError once the peer has gone."""
        return self.rx.recv()

    def send_bytes(self, data: Any) -> None:
        """Send a bytes-like object without pickling it."""
        self.tx.send_bytes(data)

    def recv_bytes(self) -> bytes:
        """Receive one bytes message."""
        return self.rx.recv_bytes()

    def handoff(self) -> None:
        """Drop this process's copy once a child owns it, so the child's death reads as EOF."""
        self.close()

    def close(self) -> None:
        """Close both connections."""
        self.rx.close()
        if self.tx is not self.rx:
            self.tx.close()


class QueueEnd:
    """A pair of multiprocessing Queues; reads poll so a dead peer raises instead of hanging."""

    def __init__(self, rx: Any, tx: Any) -> None:
        self.rx, self.tx = rx, tx
        # Set after the peer starts (a lambda here would not pickle into the child).
        self.peer_alive: Callable[[], bool] | None = None

    def send(self, obj: object) -> None:
        """Queue one object (pickled by the queue's feeder thread)."""
        self.tx.put(obj)

    def recv(self) -> Any:
        """Take one object; EOFError when the peer exits before answering."""
        while True:
            try:
                return self.rx.get(timeout=QUEUE_POLL_S)
            except queue.Empty:
                if self.peer_alive is not None and not self.peer_alive():
                    raise EOFError("the peer process exited") from None

    def send_bytes(self, data: Any) -> None:
        """Queue a bytes payload."""
        self.tx.put(bytes(data))

    def recv_bytes(self) -> bytes:
        """Take one bytes payload."""
        return bytes(self.recv())

    def handoff(self) -> None:
        """Queues are shared objects, not per-process ends: nothing to drop."""

    def close(self) -> None:
        """Close both queues and wait for their feeder threads."""
        for q in (self.rx, self.tx):
            q.close()
            q.join_thread()


def open_channel(ctx: SpawnContext, channel: str) -> tuple[Endpoint, Endpoint]:
    """A (parent end, child end) pair over the named kind of OS channel."""
    if channel == "pipe":
        child_rx, parent_tx = ctx.Pipe(duplex=False)
        parent_rx, child_tx = ctx.Pipe(duplex=False)
        return ConnEnd(parent_rx, parent_tx), ConnEnd(child_rx, child_tx)
    if channel == "socket":
        # On POSIX a duplex multiprocessing Pipe is a socketpair.
        parent, child = ctx.Pipe(duplex=True)
        return ConnEnd(parent, parent), ConnEnd(child, child)
    if channel == "queue":
        to_child, to_parent = ctx.Queue(), ctx.Queue()
        return QueueEnd(to_parent, to_child), QueueEnd(to_child, to_parent)
    raise ValueError(f"unknown channel {channel!r}; expected one of {', '.join(CHANNELS)}")


def start_child(
    target: Callable[..., None], parent: Endpoint, child: Endpoint, *args: object
) -> SpawnProcess:
    """Start ``target(child, parent_pid, *args)`` in a spawned process; clean up if that fails."""
    ctx = spawn_context()
    proc = ctx.Process(target=target, args=(child, os.getpid(), *args), daemon=True)
    try:
        proc.start()
    except BaseException:
        parent.close()
        child.close()
        raise
    child.handoff()
    if isinstance(parent, QueueEnd):
        parent.peer_alive = proc.is_alive
    return proc


def stop_child(proc: SpawnProcess | None, end: Endpoint | None) -> None:
    """Ask the child to exit, then join it, terminating or killing it if it will not go."""
    try:
        if end is not None and proc is not None and proc.is_alive():
            try:
                end.send(("close",))
            except (OSError, ValueError):
                pass  # the channel is already broken: fall through to terminate
    finally:
        if proc is not None:
            proc.join(JOIN_TIMEOUT_S)
            if proc.is_alive():
                proc.terminate()
                proc.join(JOIN_TIMEOUT_S)
            if proc.is_alive():
                proc.kill()
                proc.join()
        if end is not None:
            end.close()


def watch_parent(end: Endpoint, parent_pid: int) -> None:
    """In a child: make queue reads fail once the parent process has gone."""
    if isinstance(end, QueueEnd):
        end.peer_alive = lambda: os.getppid() == parent_pid


def checksum(payload: Mapping[str, Any]) -> int:
    """A cheap deterministic digest of a small structured payload (ints, strs, lists, dicts)."""
    total = len(payload)
    for key, value in sorted(payload.items()):
        if isinstance(value, Mapping):
            part = checksum(value)
        elif isinstance(value, (list, tuple, str)):
            part = sum(value) if not isinstance(value, str) else len(value)
        else:
            part = int(value)
        total = (total * 31 + len(key) + part) & 0xFFFFFFFF
    return total


def _handle(end: Endpoint, msg: tuple[Any, ...], state: dict[str, int]) -> None:
    op = msg[0]
    if op == "ping":
        end.send((True, None))
    elif op == "inc":
        state["counter"] += 1
        end.send((True, state["counter"]))
    elif op == "checksum":
        end.send((True, checksum(msg[1])))
    elif op == "sum_bulk":
        end.send((True, sum(msg[1])))
    elif op == "sum_each":
        end.send((True, sum(end.recv() for _ in range(msg[1]))))
    elif op == "echo":
        end.send_bytes(end.recv_bytes())
    else:
        end.send((False, f"unknown request {op!r}"))


def serve(end: Endpoint, parent_pid: int) -> None:
    """Child main loop of :class:`PipeBridge`: answer requests until close or EOF."""
    watch_parent(end, parent_pid)
    state = {"counter": 0}
    try:
        while True:
            try:
                msg = end.recv()
            except EOFError:
                return
            if msg[0] == "close":
                return
            try:
                _handle(end, msg, state)
            except Exception as exc:  # noqa: BLE001 - report it to the caller, keep serving
                end.send((False, f"{type(exc).__name__}: {exc}"))
    finally:
        end.close()


class PipeBridge:
    """A child process answering calls over one OS channel (the ``ipc`` protocol)."""

    def __init__(self, channel: str = "pipe") -> None:
        parent, child = open_channel(spawn_context(), channel)
        self.channel = channel
        self._end: Endpoint | None = parent
        self._proc: SpawnProcess | None = start_child(serve, parent, child)

    def _call(self, *request: object) -> Any:
        end = self._live_end()
        end.send(request)
        return self._reply(end)

    def _live_end(self) -> Endpoint:
        if self._end is None:
            raise RuntimeError("the bridge is closed")
        return self._end

    @staticmethod
    def _reply(end: Endpoint) -> Any:
        ok, value = end.recv()
        if not ok:
            raise RuntimeError(f"ipc child failed: {value}")
        return value

    def ping(self) -> None:
        """One tiny round trip."""
        self._call("ping")

    def increment(self) -> int:
        """Increment a counter held by the child and return it."""
        return int(self._call("inc"))

    def checksum(self, payload: Mapping[str, Any]) -> int:
        """Send a small structured payload; the child returns its checksum."""
        return int(self._call("checksum", dict(payload)))

    def sum_bulk(self, values: list[int]) -> int:
        """Send the whole list as one message; the child sums it."""
        return int(self._call("sum_bulk", values))

    def sum_each(self, values: Iterable[int]) -> int:
        """Send the list one message per element; the child sums it."""
        items = list(values)
        end = self._live_end()
        end.send(("sum_each", len(items)))
        for v in items:
            end.send(v)
        return int(self._reply(end))

    def echo(self, data: bytes) -> bytes:
        """Send bytes and receive them back."""
        end = self._live_end()
        end.send(("echo",))
        end.send_bytes(data)
        return end.recv_bytes()

    def close(self) -> None:
        """Stop the child and close the channel (idempotent)."""
        proc, end = self._proc, self._end
        self._proc = self._end = None
        stop_child(proc, end)


def wire_size(obj: object) -> int:
    """Bytes one ``Connection.send(obj)`` puts on the wire: the pickle plus a 4-byte header."""
    return len(pickle.dumps(obj, protocol=pickle.DEFAULT_PROTOCOL)) + 4


def filled(nbytes: int) -> bytes:
    """``nbytes`` of written memory for a floor to send (a big ``bytes(n)`` is untouched
    memory: sending from it, or reading into it, measured slower than real transports)."""
    return (bytes(range(256)) * (nbytes // 256 + 1))[:nbytes]


def _read_n(fd: int, nbytes: int) -> bool:
    """Read and drop ``nbytes`` with bare ``os.read``, a pipe's worth at a time; False on EOF."""
    while nbytes > 0:
        got = len(os.read(fd, min(nbytes, READ_BYTES)))
        if not got:
            return False
        nbytes -= got
    return True


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def raw_echo(end: Endpoint, parent_pid: int, request: int, reads: int, reply: int) -> None:
    """Child loop of :class:`RawEcho`: read ``reads`` chunks, answer ``reply`` bytes."""
    assert isinstance(end, ConnEnd)
    rfd, wfd = end.rx.fileno(), end.tx.fileno()
    answer = filled(reply)
    try:
        while True:
            for _ in range(reads):
                if not _read_n(rfd, request):
                    return
            _write_all(wfd, answer)
    finally:
        end.close()


class RawEcho:
    """The physical floor of a round trip: bare reads and writes on an OS channel.

    ``roundtrip(chunk)`` writes ``chunk`` ``reads`` times (one syscall each) and reads back
    ``reply`` bytes.
    """

    def __init__(self, request: int, reply: int, reads: int = 1, channel: str = "pipe") -> None:
        # A queue is a pipe plus a feeder thread: its floor is the bare pipe.
        parent, child = open_channel(spawn_context(), "socket" if channel == "socket" else "pipe")
        assert isinstance(parent, ConnEnd)
        self.request, self.reply, self.reads = request, reply, reads
        self._rfd, self._wfd = parent.rx.fileno(), parent.tx.fileno()
        self._end: Endpoint | None = parent
        self._proc: SpawnProcess | None = start_child(
            raw_echo, parent, child, request, reads, reply
        )

    def roundtrip(self, chunk: bytes) -> None:
        """Write the chunk ``reads`` times, then read (and drop) the reply."""
        if len(chunk) != self.request:
            raise ValueError(f"chunk of {len(chunk)} bytes; this echo expects {self.request}")
        for _ in range(self.reads):
            _write_all(self._wfd, chunk)
        if not _read_n(self._rfd, self.reply):
            raise EOFError("the raw echo child exited")

    def close(self) -> None:
        """Stop the child (closing our ends is its EOF)."""
        proc, end = self._proc, self._end
        self._proc = self._end = None
        if end is not None:
            end.close()
        stop_child(proc, None)
