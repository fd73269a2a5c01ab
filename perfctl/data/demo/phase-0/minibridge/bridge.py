"""A parent/child bridge over a multiprocessing pipe."""

import multiprocessing as mp
import pickle
import zlib

from minibridge import transport


def _serve(conn, shm_name):
    state = 0
    acc = 0
    while True:
        op, arg = pickle.loads(conn.recv_bytes())
        if op == "stop":
            conn.send_bytes(pickle.dumps(None))
            return
        if op == "add":
            acc += arg
            continue
        if op == "total":
            conn.send_bytes(pickle.dumps(acc))
            acc = 0
        elif op == "sum":
            conn.send_bytes(pickle.dumps(sum(arg)))
        elif op == "inc":
            state += arg
            conn.send_bytes(pickle.dumps(state))
        elif op == "inc_batch":
            out = []
            for step in arg:
                state += step
                out.append(state)
            conn.send_bytes(pickle.dumps(out))
        elif op == "crc":
            conn.send_bytes(pickle.dumps(zlib.crc32(transport.receive(conn, arg, shm_name))))


class Bridge:
    """A child process that runs requests for the parent."""

    def __init__(self):
        ctx = mp.get_context("fork")
        self._conn, child = ctx.Pipe()
        self._shm = transport.open_buffer()
        name = self._shm.name if self._shm is not None else None
        self._proc = ctx.Process(target=_serve, args=(child, name), daemon=True)
        self._proc.start()

    def _call(self, op, arg=None):
        self._conn.send_bytes(pickle.dumps((op, arg)))
        return pickle.loads(self._conn.recv_bytes())

    def sum_list(self, values):
        """Sum a list in the child."""
        return transport.send_list(self._conn, values)

    def increment_many(self, n):
        """Increment the child's counter n times; returns the last value."""
        last = None
        for _ in range(n):
            last = self._call("inc", 1)
        return last

    def echo_bytes(self, data):
        """Send bytes to the child; it returns their CRC32."""
        transport.send_bytes(self._conn, data, self._shm)
        return pickle.loads(self._conn.recv_bytes())

    def close(self):
        """Stop the child and free resources."""
        try:
            self._call("stop")
        finally:
            self._proc.join(5)
            transport.close_buffer(self._shm)
