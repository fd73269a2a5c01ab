"""The project lock against real holder processes (flock, SIGKILL)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from perfctl.errors import EXIT_FAILURE, LockTimeout
from perfctl.store.lock import project_lock, read_owner

# Lock holders are real processes: the cli tier.
pytestmark = pytest.mark.cli

HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from perfctl.store.lock import project_lock

    with project_lock(Path(sys.argv[1]), what="perfctl compare main HEAD"):
        print("locked", flush=True)
        time.sleep(float(sys.argv[2]))
""")


def start_holder(state: Path, hold: float) -> subprocess.Popen[str]:
    """A real process that takes the lock, says so, and holds it ``hold`` seconds."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(state), str(hold)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == "locked\n"
    return proc


def stop(proc: subprocess.Popen[str]) -> None:
    """Kill the holder if it still runs, reap it and close its pipe."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    assert proc.stdout is not None
    proc.stdout.close()


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    proc = start_holder(tmp_path / ".perfctl", 60)
    yield proc
    stop(proc)


def test_lock_creates_state_dir_ignored_by_git(tmp_path: Path) -> None:
    state = tmp_path / "deep" / ".perfctl"
    with project_lock(state, what="test"):
        owner = read_owner(state / "lock")
        assert (owner["pid"], owner["what"]) == (os.getpid(), "test")
    assert (state / ".gitignore").read_text().endswith("*\n")
    assert read_owner(state / "lock") == {}


def test_lock_is_reentrant_within_a_process(tmp_path: Path) -> None:
    state = tmp_path / ".perfctl"
    with project_lock(state, wait=0), project_lock(state, wait=0), project_lock(state, wait=0):
        pass
    with project_lock(state, wait=0):
        pass


def test_held_lock_times_out_naming_the_holder(tmp_path: Path, holder, capsys) -> None:
    started = time.monotonic()
    with pytest.raises(LockTimeout) as info:
        with project_lock(tmp_path / ".perfctl", wait=0.5):
            pytest.fail("must not get the lock")
    assert 0.4 < time.monotonic() - started < 5
    err = info.value
    assert f"pid {holder.pid} (perfctl compare main HEAD)" in err.message
    assert f"wait for pid {holder.pid}" in err.hint and "`--lock-wait SECONDS`" in err.hint
    assert err.exit_code == EXIT_FAILURE == 3
    waiting = capsys.readouterr().err
    assert "waiting up to 0.5 s for the project lock" in waiting
    assert f"pid {holder.pid}" in waiting


def test_a_command_without_lock_wait_is_not_told_to_use_it(
    tmp_path: Path, holder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ci, profile and clean wait the default (wait=None) and have no --lock-wait.
    monkeypatch.setattr("perfctl.store.lock.DEFAULT_WAIT", 0.3)
    with pytest.raises(LockTimeout) as info:
        with project_lock(tmp_path / ".perfctl"):
            pytest.fail("must not get the lock")
    assert "--lock-wait" not in info.value.hint
    assert info.value.hint == (
        f"wait for pid {holder.pid} to finish (or stop it), then run it again (gave up after 0.3 s)"
    )


def test_ci_history_sync_is_not_told_to_use_a_flag_ci_lacks(
    tmp_path: Path, holder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `ci --history-branch` syncs with history.sync's default wait (ci has no --lock-wait).
    from perfctl.config import load_config
    from perfctl.jobs import history

    monkeypatch.setattr("perfctl.store.lock.DEFAULT_WAIT", 0.3)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n')
    with pytest.raises(LockTimeout) as info:
        history.sync(load_config(tmp_path), "perfctl-data")
    assert "--lock-wait" not in info.value.hint and "then run it again" in info.value.hint


@pytest.mark.parametrize("vs", [False, True])
def test_profile_measures_only_while_it_holds_the_lock(
    tmp_path: Path, holder, monkeypatch: pytest.MonkeyPatch, vs: bool
) -> None:
    # profile measures (py-spy on a worker), so it never runs beside a compare's workers.
    from perfctl.config import load_config
    from perfctl.envs import current_target
    from perfctl.jobs import profile

    monkeypatch.setattr("perfctl.store.lock.DEFAULT_WAIT", 0.3)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n')
    config = load_config(tmp_path)
    target = current_target(config)
    with pytest.raises(LockTimeout) as info:
        if vs:
            other = replace(target, ref=replace(target.ref, ref="main"))
            profile.profile_pair(config, "work", other, target)
        else:
            profile.profile_regime(config, "work", target)
    assert f"pid {holder.pid}" in info.value.message
    assert "then run it again" in info.value.hint  # profile has no --lock-wait


def test_compare_profile_waits_as_long_as_compares_lock_wait(tmp_path: Path, holder) -> None:
    # `compare --profile` takes the lock again after compare's: it keeps --lock-wait.
    from perfctl.config import load_config
    from perfctl.jobs.annotate import profile_comparison
    from perfctl.model import REGRESSED
    from tests.test_comment import comparison, regime

    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n')
    c = comparison([regime("work", REGRESSED, change=0.05)])
    with pytest.raises(LockTimeout) as info:
        profile_comparison(load_config(tmp_path), c, "regressed", lock_wait=0.3)
    assert "`--lock-wait SECONDS`" in info.value.hint and "after 0.3 s" in info.value.hint


def test_no_wait_fails_at_once(tmp_path: Path, holder) -> None:
    started = time.monotonic()
    with pytest.raises(LockTimeout):
        with project_lock(tmp_path / ".perfctl", wait=0):
            pass
    assert time.monotonic() - started < 10  # not the default 600 s wait


def test_waits_until_the_holder_finishes(tmp_path: Path, capsys) -> None:
    proc = start_holder(tmp_path / ".perfctl", 0.5)
    started = time.monotonic()
    with project_lock(tmp_path / ".perfctl", wait=30, what="second"):
        # We got in only once the holder let go, not before and not much later.
        assert 0.3 < time.monotonic() - started < 10
        assert read_owner(tmp_path / ".perfctl" / "lock")["what"] == "second"
    stop(proc)
    assert f"held by pid {proc.pid}" in capsys.readouterr().err


def test_sigkilled_holder_releases_the_lock(tmp_path: Path, holder) -> None:
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    # The lock file still names the dead holder, but flock died with it.
    assert read_owner(tmp_path / ".perfctl" / "lock")["pid"] == holder.pid
    started = time.monotonic()
    with project_lock(tmp_path / ".perfctl", wait=0):
        assert read_owner(tmp_path / ".perfctl" / "lock")["pid"] == os.getpid()
    assert time.monotonic() - started < 10  # at once: wait=0 would have raised
