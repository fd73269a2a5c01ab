"""What --pairing auto asks of a calibration worker: did the timed calls run a process?"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from perfctl.measure import spawns

pytestmark = pytest.mark.cli  # real child processes, nothing measured


def _calls(watch: spawns.Watch, run: Callable[[], object]) -> bool:
    def time_func(loops: int) -> float:
        for _ in range(loops):
            run()
        return 0.0

    timed = watch.wrap(time_func)
    for loops in (1, 2):
        timed(loops)
    return watch.started


def test_in_process_calls_start_nothing() -> None:
    assert _calls(spawns.Watch(), lambda: sum(range(1000))) is False


def test_a_short_child_per_call_is_seen_after_it_exited() -> None:
    """subprocess.run waits for its child: nothing is alive after the call, but the
    children's page faults in RUSAGE_CHILDREN grew."""
    assert _calls(spawns.Watch(), lambda: subprocess.run([sys.executable, "-c", "pass"])) is True


def test_a_child_started_in_set_up_and_alive_is_seen() -> None:
    before = spawns.live_children()  # no test leaves a child behind: 0
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        watch = spawns.Watch()  # after set-up: the child's start is not what it sees
        assert spawns.live_children() == before + 1
        # Kernels without /proc/PID/task/*/children: the parents in /proc/*/stat agree.
        assert spawns._scan_children(os.getpid()) == spawns.live_children()
        assert _calls(watch, lambda: None) is True
    finally:
        child.kill()
        child.wait()
    # Reaped: neither alive nor new to a watch started now.
    assert spawns.live_children() == before == 0
    assert _calls(spawns.Watch(), lambda: None) is False
