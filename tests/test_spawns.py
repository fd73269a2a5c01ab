"""What --pairing auto asks of a calibration worker: did the timed calls run a process?

Each case runs in a fresh interpreter, as a calibration worker does: a test process may
hold children of its own (GitPython keeps `git cat-file` running), which would be seen.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.cli  # real child processes, nothing measured

CASE = """
import json, os, subprocess, sys
from perfctl.measure import spawns

def calls(run):
    watch = spawns.Watch()
    def time_func(loops):
        for _ in range(loops):
            run()
        return 0.0
    timed = watch.wrap(time_func)
    for loops in (1, 2):
        timed(loops)
    return watch.started

out = {"none": calls(lambda: sum(range(1000)))}
# subprocess.run waits for its child: nothing is alive after the call, but the
# children's page faults in RUSAGE_CHILDREN grew.
out["short"] = calls(lambda: subprocess.run([sys.executable, "-c", "pass"]))
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
out["alive"] = spawns.live_children()
out["scanned"] = spawns._scan_children(os.getpid())
out["set_up"] = calls(lambda: None)  # a child started in set-up and still alive
child.kill()
child.wait()
out["after"] = spawns.live_children()
out["reaped"] = calls(lambda: None)  # neither alive nor new to a watch started now
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def seen() -> dict[str, object]:
    """The cases' answers from one fresh interpreter."""
    out = subprocess.run([sys.executable, "-c", CASE], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_in_process_calls_start_nothing(seen: dict[str, object]) -> None:
    assert seen["none"] is False


def test_a_short_child_per_call_is_seen_after_it_exited(seen: dict[str, object]) -> None:
    assert seen["short"] is True


def test_a_child_started_in_set_up_and_alive_is_seen(seen: dict[str, object]) -> None:
    assert seen["alive"] == 1 and seen["set_up"] is True
    # Kernels without /proc/PID/task/*/children: the parents in /proc/*/stat agree.
    assert seen["scanned"] == 1
    assert seen["after"] == 0 and seen["reaped"] is False
