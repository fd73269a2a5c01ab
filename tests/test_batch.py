"""Counter processes side by side (measure/batch.py): real child processes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from perfctl.measure import batch
from tests.test_procs import alive, gone_within, outlasting_start_up, write_pid

pytestmark = pytest.mark.cli  # real child processes, nothing measured

# Waits for its partner's file: it can only exit 0 if both run at the same time.
PARTNER = """
import pathlib, sys, time
here, partner = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
here.write_text("started")
deadline = time.monotonic() + 20
while not partner.exists():
    if time.monotonic() > deadline:
        sys.exit(7)
    time.sleep(0.01)
"""


def _cmd(tmp: Path, name: str, *argv: str, timeout: float = 60.0) -> batch.Command:
    return batch.Command((sys.executable, *argv), tmp, {}, tmp / f"{name}.log", timeout)


def test_commands_run_side_by_side_up_to_the_limit(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    pair = [
        _cmd(tmp_path, "a", "-c", PARTNER, str(a), str(b)),
        _cmd(tmp_path, "b", "-c", PARTNER, str(b), str(a)),
    ]
    finished: list[int] = []
    assert batch.call_all(pair, limit=2, done=finished.append) == {0: 0, 1: 0}
    assert sorted(finished) == [0, 1]
    # One at a time, the first never sees its partner start.
    a.unlink()
    b.unlink()
    one = [_cmd(tmp_path, "a", "-c", PARTNER.replace("20", "0.5"), str(a), str(b)), pair[1]]
    assert batch.call_all(one, limit=1)[0] == 7


def test_a_failure_stops_what_has_not_started(tmp_path: Path) -> None:
    cmds = [
        _cmd(tmp_path, f"c{i}", "-c", f"import sys; sys.exit({rc})")
        for i, rc in enumerate([0, 3, 0, 0])
    ]
    got = batch.call_all(cmds, limit=1, stop=lambda rc: rc != 0)
    assert got == {0: 0, 1: 3}
    assert batch.call_all(cmds, limit=1) == {0: 0, 1: 3, 2: 0, 3: 0}


def test_a_timeout_is_none_and_kills_the_whole_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild"
    spawn = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"{write_pid(pid_file, 'p.pid')}; time.sleep(60)"
    )

    def attempt(timeout: float) -> None:
        got = batch.call_all([_cmd(tmp_path, "slow", "-c", spawn, timeout=timeout)], limit=2)
        assert got == {0: None}

    grandchild = outlasting_start_up(attempt, pid_file)
    assert gone_within([grandchild]), "the timed-out command's grandchild is still running"
    assert not alive(grandchild)


def test_usable_cpus_follows_the_affinity_mask() -> None:
    import os

    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no affinity masks here")
    assert batch.usable_cpus() == len(os.sched_getaffinity(0)) >= 1
