"""How payloads cross the process boundary."""

import pickle
from multiprocessing import shared_memory


def send_list(conn, values):
    """Bulk transport: the whole list in one pickled message."""
    conn.send_bytes(pickle.dumps(("sum", values)))
    return pickle.loads(conn.recv_bytes())


BUFFER_SIZE = 4 * 1024 * 1024
_attached = {}


def open_buffer():
    """A shared-memory block the child reads payloads from in place."""
    return shared_memory.SharedMemory(create=True, size=BUFFER_SIZE)


def close_buffer(shm):
    """Free the shared-memory block."""
    if shm is not None:
        shm.close()
        shm.unlink()


def send_bytes(conn, data, shm):
    """Write the bytes into shared memory; only their length crosses the pipe."""
    if len(data) > BUFFER_SIZE:
        conn.send_bytes(pickle.dumps(("crc", -len(data))))
        conn.send_bytes(data)
        return
    shm.buf[: len(data)] = data
    conn.send_bytes(pickle.dumps(("crc", len(data))))


def receive(conn, size, shm_name):
    """A zero-copy view of the payload in shared memory."""
    if size < 0:
        return conn.recv_bytes()
    shm = _attached.get(shm_name)
    if shm is None:
        # The parent owns (and unlinks) the block; the forked child shares its
        # resource tracker, so attaching here adds no second owner.
        shm = shared_memory.SharedMemory(name=shm_name)
        _attached[shm_name] = shm
    return shm.buf[:size]
