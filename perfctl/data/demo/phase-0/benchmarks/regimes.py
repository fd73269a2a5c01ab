"""minibridge's benchmark regimes (each phase of the plan moves some of them)."""

import os

from minibridge import Bridge, Graph

from perfctl import regime


@regime(family="ipc", ops=1, baseline="direct_sum")
def payload_large_sum():
    """Sum a 2,000-element list in the child process."""
    bridge = Bridge()
    data = list(range(2000))
    yield lambda: bridge.sum_list(data)
    bridge.close()


@regime(family="ipc", ops=1)
def direct_sum():
    """The same sum in-process: the floor for payload_large_sum."""
    data = list(range(2000))
    return lambda: sum(data)


@regime(family="ipc", ops=50)
def increment_small():
    """50 small increments of the child's counter."""
    bridge = Bridge()
    yield lambda: bridge.increment_many(50)
    bridge.close()


@regime(family="shm", ops=1)
def bytes_roundtrip_512kb():
    """Hand 512 KiB to the child and get its CRC32 back."""
    bridge = Bridge()
    data = os.urandom(512 * 1024)
    yield lambda: bridge.echo_bytes(data)
    bridge.close()


@regime(family="propagation", ops=1)
def propagation_update():
    """Update one root of 10 chains of 40 pages, then read every leaf."""
    graph = Graph(10, 40)
    state = {"v": 1}

    def run():
        state["v"] += 1
        graph.update((0, 0), state["v"])
        graph.read_all()

    yield run
