"""No process outlives perfctl: process groups, death with the parent, the sweep."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from perfctl.errors import RegimeLoadError
from perfctl.measure import procs
from perfctl.regimes import discovery
from tests.conftest import GitRepo, default_signals, worker_pids

pytestmark = [
    pytest.mark.skipif(
        not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc are Linux-only"
    ),
]


def alive(pid: int) -> bool:
    """A running (not zombie) process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def within(done: Callable[[], bool], seconds: float = 30.0) -> bool:
    """Poll until ``done()`` (a generous bound, not a speed check)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(0.1)
    return False


def gone_within(pids: list[int], seconds: float = 30.0) -> bool:
    """Poll until every pid has exited."""
    return within(lambda: not any(alive(p) for p in pids), seconds)


def write_pid(path: Path, pid: str) -> str:
    """Python source, for a child, that writes ``pid`` to ``path`` whole or not at all."""
    tmp = f"{str(path)!r} + '.tmp'"
    return f"open({tmp}, 'w').write(str({pid})); __import__('os').rename({tmp}, {str(path)!r})"


def outlasting_start_up(attempt: Callable[[float], None], started: Path) -> int:
    """``attempt(timeout)`` with a timeout that must outlast a child's start-up: 1.5 s,
    and again with four times as long where the machine was so busy that the child had
    not written ``started`` by then. The pid it wrote."""
    for timeout in (1.5, 6.0):
        attempt(timeout)
        if started.exists():
            break
    return int(started.read_text())


def wait_for_file(path: Path, seconds: float = 120.0) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            time.sleep(0.1)  # the writer finished its line
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


# A child that starts a grandchild (`sleep`) and waits; the grandchild's pid goes to argv[1].
FORKS = "import subprocess, sys, time\np = subprocess.Popen(['sleep', '300'])\n" + (
    "open(sys.argv[1], 'w').write(str(p.pid))\ntime.sleep(300)\n"
)


@pytest.mark.cli  # real processes
def test_group_kills_grandchildren_on_every_exit_path(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    with pytest.raises(RuntimeError), procs.group([sys.executable, "-c", FORKS, str(pidfile)]):
        grandchild = int(wait_for_file(pidfile))
        raise RuntimeError("perfctl fails while the child runs")
    assert gone_within([grandchild])


@pytest.mark.cli  # real processes
def test_probe_timeout_kills_what_the_probe_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pidfile = tmp_path / "pid"
    regimes = tmp_path / "slow_import.py"
    regimes.write_text(
        "import subprocess, time\n"
        f"p = subprocess.Popen(['sleep', '300'])\n{write_pid(pidfile, 'p.pid')}\n"
        "time.sleep(300)\n"
    )

    def attempt(timeout: float) -> None:
        monkeypatch.setattr(discovery, "PROBE_TIMEOUT", timeout)
        with pytest.raises(RegimeLoadError, match=f"took over {timeout:g} s"):
            discovery.probe(Path(sys.executable), [regimes], cwd=tmp_path)

    assert gone_within([outlasting_start_up(attempt, pidfile)])


# A stand-in for perfctl: starts FORKS through procs.group, in a scratch folder.
HOLDER = textwrap.dedent("""
    import sys, time
    from perfctl.measure import procs
    with procs.scratch("perfctl-cmp-") as tmp:
        open(sys.argv[2], "w").write(tmp)
        with procs.group([sys.executable, "-c", sys.argv[1], sys.argv[3]]) as child:
            time.sleep(300)
""")


@pytest.mark.cli  # real processes
def test_sigkill_of_perfctl_kills_child_and_the_sweep_takes_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch_note, pidfile = tmp_path / "scratch", tmp_path / "pid"
    # A temporary folder of its own: any perfctl starting meanwhile (another test's, in
    # another worker) sweeps /tmp and would take the orphans before this test looks.
    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, FORKS, str(scratch_note), str(pidfile)],
        start_new_session=True,
        env={**os.environ, "TMPDIR": str(private)},
    )
    grandchild = int(wait_for_file(pidfile))
    scratch = Path(wait_for_file(scratch_note))
    child = int(Path(f"/proc/{grandchild}/stat").read_text().rsplit(")", 1)[1].split()[1])
    os.kill(holder.pid, signal.SIGKILL)  # perfctl only: no cleanup code runs
    holder.wait()
    assert gone_within([child])  # the direct child died with its parent
    assert alive(grandchild) and scratch.is_dir()  # out of reach until the next start
    procs.sweep()
    assert gone_within([grandchild])
    assert not scratch.exists()


@pytest.mark.cli  # real processes
def test_sweep_leaves_a_running_perfctl_alone(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    with (
        procs.scratch("perfctl-cmp-") as tmp,
        procs.group([sys.executable, "-c", FORKS, str(pidfile)]),
    ):
        grandchild = int(wait_for_file(pidfile))
        procs.sweep()  # the owner (this test) is alive
        assert alive(grandchild) and Path(tmp).is_dir()
    assert gone_within([grandchild])


HANGS = """\
import time
from perfctl import regime

@regime(timeout=300)
def hangs():
    \"\"\"Never returns.\"\"\"
    return lambda: time.sleep(3600)
"""


@pytest.mark.slow
@pytest.mark.parametrize("command", ["compare", "run"])
def test_sigkill_of_perfctl_leaves_no_worker(git_repo: GitRepo, command: str) -> None:
    git_repo.write("pyproject.toml", '[tool.perfctl]\ninstall = false\nregimes = ["hang.py"]\n')
    git_repo.write("hang.py", HANGS)
    git_repo.commit("c1")
    git_repo.commit("c2")
    args = ["HEAD~1", "HEAD", "--rounds", "2"] if command == "compare" else ["--fast"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "perfctl", command, *args, "--min-time", "0.01"],
        cwd=git_repo.path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    marker = git_repo.path / "hang.py"
    deadline = time.monotonic() + 120
    while not worker_pids(marker) and time.monotonic() < deadline:
        assert proc.poll() is None
        time.sleep(0.1)
    time.sleep(1.0)  # pyperf's master has started its worker (perfctl run)
    workers = worker_pids(marker)
    assert workers
    os.kill(proc.pid, signal.SIGKILL)  # perfctl alone: its workers get no signal from us
    proc.wait()
    assert gone_within(workers), worker_pids(marker)


# perfctl building a ref with a custom `build` command, stopped like a cancelled CI job.
BUILDS = textwrap.dedent("""
    import sys
    from pathlib import Path
    from perfctl.cli import common
    from perfctl.config import Config
    from perfctl.envs import prepare_target

    common.stop_cleanly_on_signals()
    root = Path(sys.argv[1])
    config = Config(root=root, state_dir=root / ".perfctl", install=False, build=sys.argv[2])
    prepare_target(config, "HEAD")
""")


@pytest.mark.cli  # real processes
def test_sigterm_during_a_build_kills_the_build_tree(git_repo: GitRepo, tmp_path: Path) -> None:
    git_repo.write("forks.py", FORKS)
    git_repo.commit("c1")
    pidfile = tmp_path / "pid"
    build = f"python forks.py {pidfile}"
    proc = subprocess.Popen(
        [sys.executable, "-c", BUILDS, str(git_repo.path), build],
        start_new_session=True,
        stderr=subprocess.PIPE,
    )
    grandchild = int(wait_for_file(pidfile))
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert gone_within([grandchild])


# Every fork in this process sends it a Ctrl-C from the fork's own Python hook, which
# CPython runs in the parent between fork and exec (Popen with a preexec_fn).
FORK_HOOKED = """\
import os, signal, sys
from perfctl.measure import procs
hooked = []
def ctrl_c():
    hooked.append(1)
    os.kill(os.getpid(), signal.SIGINT)
os.register_at_fork(after_in_parent=ctrl_c)
try:
    with procs.group([sys.executable, "-c", "import time; time.sleep(300)", sys.argv[1]]):
        print("the block ran: the Ctrl-C was lost")
except KeyboardInterrupt:
    print("interrupted", len(hooked))
"""


@pytest.mark.cli  # real processes
def test_a_ctrl_c_while_a_child_starts_is_never_lost(tmp_path: Path) -> None:
    token = f"perfctl-test-{os.getpid()}-{time.monotonic_ns()}"
    done = subprocess.run(
        [sys.executable, "-c", FORK_HOOKED, token],
        capture_output=True, text=True, timeout=60, preexec_fn=default_signals,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "interrupted 1\n"  # raised once the child was known, not lost
    assert "Exception ignored" not in done.stderr
    # ... and the child it had started went with the group.
    assert gone_within_pattern(token)


# Two signals while a child starts: the last is delivered (Ctrl-C then SIGTERM is a
# SIGTERM, as cli/common reads it), and every handler is back afterwards.
TWO_SIGNALS = """\
import os, signal, sys
from perfctl.measure import procs
class Terminated(Exception):
    pass
def terminated(signum, frame):
    raise Terminated
signal.signal(signal.SIGTERM, terminated)
before = {s: signal.getsignal(s) for s in procs.HELD}
with procs.group([sys.executable, "-c", "pass"]) as proc:
    proc.wait()
assert {s: signal.getsignal(s) for s in procs.HELD} == before, "handlers not restored"
def both():
    os.kill(os.getpid(), signal.SIGINT)
    os.kill(os.getpid(), signal.SIGTERM)
os.register_at_fork(after_in_parent=both)
try:
    with procs.group([sys.executable, "-c", "pass"]):
        print("the block ran")
except Terminated:
    print("terminated")
except KeyboardInterrupt:
    print("interrupted")
assert {s: signal.getsignal(s) for s in procs.HELD} == before, "handlers not restored"
assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == set(), "signals left blocked"
"""


@pytest.mark.cli  # real processes
def test_the_last_of_two_signals_wins_and_handlers_and_mask_are_restored() -> None:
    done = subprocess.run(
        [sys.executable, "-c", TWO_SIGNALS],
        capture_output=True, text=True, timeout=60, preexec_fn=default_signals,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "terminated\n"


def gone_within_pattern(pattern: str, seconds: float = 30.0) -> bool:
    """Poll until no process's command line matches ``pattern`` (pgrep finds none)."""
    return within(
        lambda: subprocess.run(["pgrep", "-f", pattern], capture_output=True).returncode == 1,
        seconds,
    )


@pytest.mark.cli  # real processes
def test_a_missing_command_fails_in_perfctl_as_popen_would(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as missing:
        procs.run(["perfctl-no-such-tool"], timeout=10)
    assert missing.value.filename == "perfctl-no-such-tool"
    script = tmp_path / "tool.sh"
    script.write_text('#!/bin/sh\necho ran in "$PWD"\n')
    script.chmod(0o755)
    # A relative path is found from the child's working folder, as Popen finds it.
    done = procs.run(["./tool.sh"], timeout=10, cwd=tmp_path)
    assert done.stdout == f"ran in {tmp_path}\n"


@pytest.mark.cli  # real processes
def test_call_gives_the_exit_status_or_none_when_the_timeout_passes() -> None:
    assert procs.call([sys.executable, "-c", "raise SystemExit(3)"], timeout=30) == 3
    with procs.group([sys.executable, "-c", "import time; time.sleep(30)"]) as proc:
        with pytest.raises(subprocess.TimeoutExpired):
            procs.wait(proc, 0.2)
        assert proc.poll() is None  # a timeout leaves the child to the caller
    assert within(lambda: not alive(proc.pid))  # and the group's end kills it


@pytest.mark.cli  # real processes
@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "polling"])
def test_wait_wakes_on_the_exit_with_or_without_a_pidfd(
    monkeypatch: pytest.MonkeyPatch, pidfd: bool
) -> None:
    opened: list[int] = []
    real = getattr(os, "pidfd_open", None)
    if pidfd and real is None:
        pytest.skip("no os.pidfd_open here")

    def pidfd_open(pid: int, flags: int = 0) -> int:
        opened.append(pid)
        if not pidfd or real is None:
            raise OSError("pidfd_open refused (a kernel before 5.3)")
        return real(pid, flags)

    monkeypatch.setattr(os, "pidfd_open", pidfd_open, raising=False)
    with procs.group([sys.executable, "-c", "raise SystemExit(5)"]) as proc:
        assert procs.wait(proc, 30) == 5
    assert opened == [proc.pid]  # the pidfd was asked for; refused, Popen.wait polled
    assert procs.wait(proc, 30) == 5 and opened == [proc.pid]  # reaped: no pidfd again


@pytest.mark.cli  # real processes
def test_an_endless_timeout_waits_as_popen_does() -> None:
    # A regime may declare timeout=math.inf; poll() takes a C int of milliseconds.
    assert procs.call([sys.executable, "-c", "raise SystemExit(4)"], timeout=math.inf) == 4
    assert procs.call([sys.executable, "-c", "pass"], timeout=1e12) == 0
