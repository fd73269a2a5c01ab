"""Recording with py-spy: find it, run a worker as its child, stop it safely.

py-spy's exit code cannot be trusted (0 when the child failed or nothing was
sampled, sometimes non-zero after a valid profile), so :func:`record` only
reports what happened: the exit code, py-spy's ``Samples: N Errors: M`` line
and its output. The caller judges success from the worker's status file, the
output file and that line.

py-spy runs in its own session so that a Ctrl-C in the terminal reaches only
perfctl, which then stops the *worker* with SIGINT: the worker ends its loop and
writes its status, py-spy sees its child exit and writes the profile. SIGTERM
is never sent (it leaves no profile and orphans the child); the last resort for
a worker that ignores SIGINT is SIGINT to py-spy, then SIGKILL.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from perfctl.errors import ProfilerUnavailable
from perfctl.measure import procs
from perfctl.profile import PROFILE_SECONDS

ENV_VAR = "PERFCTL_PY_SPY"  # path (or name on PATH) of the py-spy to use
INSTALL_HINT = f"install it where perfctl runs (`pip install py-spy`), or set {ENV_VAR} to its path"
PTRACE_HINT = (
    "py-spy must be allowed to read the worker's memory: run as the same user, "
    "set kernel.yama.ptrace_scope to 0 or 1, and in containers grant CAP_SYS_PTRACE "
    "(docker run --cap-add SYS_PTRACE)"
)
_SAMPLES = re.compile(r"Samples: (\d+) Errors: (\d+)")
_DENIED = re.compile(r"permission denied|operation not permitted|sys_ptrace|ptrace", re.I)
STOP_GRACE_S = 15.0  # for the worker to write its status after SIGINT
WRITE_GRACE_S = 10.0  # for py-spy to write its profile after SIGINT


@dataclass(frozen=True)
class RecordSettings:
    """How to sample: duration of the loop, rate and py-spy's options."""

    duration: float = PROFILE_SECONDS
    rate: int = 100
    native: bool = False
    subprocesses: bool = True
    idle: bool = False
    gil: bool = False

    def as_dict(self) -> dict[str, object]:
        """The settings as recorded in summary.json."""
        return {
            "duration_s": self.duration,
            "rate_hz": self.rate,
            "native": self.native,
            "subprocesses": self.subprocesses,
            "idle": self.idle,
            "gil": self.gil,
            "nolineno": True,
        }


@dataclass(frozen=True)
class Recording:
    """What one py-spy run did (not whether it succeeded: the caller decides)."""

    returncode: int | None
    samples: int | None  # from py-spy's "Samples: N Errors: M" line
    errors: int | None
    log: str  # py-spy's combined stdout/stderr
    stopped: str = ""  # "" | "timeout" | "interrupt": why perfctl stopped it early
    signum: int = 0  # with "interrupt": the signal that stopped perfctl (SIGINT, SIGTERM, …)


def stop_as_signalled(rec: Recording) -> NoReturn:
    """Stop as the signal that interrupted ``rec`` would: its handler (cli/common.py)
    raises what it raised the first time, so a SIGTERM still exits 143, not 130."""
    signal.raise_signal(rec.signum or signal.SIGINT)
    raise KeyboardInterrupt  # the signal is ignored here (nohup): stop all the same


def find_py_spy() -> Path:
    """The py-spy executable: $PERFCTL_PY_SPY, else beside this Python, else on PATH."""
    override = os.environ.get(ENV_VAR)
    if override:
        found = shutil.which(override)
        if found is None:
            raise ProfilerUnavailable(
                f"{ENV_VAR}={override} is not an executable py-spy", INSTALL_HINT
            )
        return Path(found)
    # py-spy is a dependency of perfctl, so it sits in perfctl's own bin folder
    # even when that virtual environment is not activated.
    beside = Path(sys.executable).parent / ("py-spy.exe" if os.name == "nt" else "py-spy")
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("py-spy")
    if found is None:
        raise ProfilerUnavailable(
            f"py-spy is not installed (not beside {sys.executable} and not on PATH)", INSTALL_HINT
        )
    return Path(found)


def command(py_spy: Path, output: Path, settings: RecordSettings, worker: list[str]) -> list[str]:
    """The py-spy argv recording ``worker`` into a speedscope file."""
    # Line numbers move between commits; without them functions pair across refs.
    argv = [
        str(py_spy),
        "record",
        "--output",
        str(output),
        "--format",
        "speedscope",
        "--rate",
        str(settings.rate),
        "--nolineno",
    ]
    flags = (
        ("--subprocesses", settings.subprocesses),
        ("--native", settings.native),
        ("--idle", settings.idle),
        ("--gil", settings.gil),
    )
    argv += [flag for flag, on in flags if on]
    return [*argv, "--", *worker]


def permission_denied(log: str) -> bool:
    """Whether py-spy's output says it may not read the process (ptrace)."""
    return _DENIED.search(log) is not None


def samples_line(log: str) -> tuple[int | None, int | None]:
    """(samples, errors) from py-spy's last ``Samples: N Errors: M`` line."""
    found = _SAMPLES.findall(log)
    if not found:
        return None, None
    samples, errors = found[-1]
    return int(samples), int(errors)


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _signal(pid: int, sig: int, group: bool = False) -> None:
    try:
        (os.killpg if group else os.kill)(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # already gone


def _wait(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    try:
        procs.wait(proc, timeout)
    except subprocess.TimeoutExpired:
        return False
    return True


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop early, keeping the profile: SIGINT the worker, then py-spy, then SIGKILL."""
    workers = _children(proc.pid)
    for pid in workers:
        _signal(pid, signal.SIGINT)
    if not workers:
        _signal(proc.pid, signal.SIGINT, group=True)
    if _wait(proc, STOP_GRACE_S):
        return
    _signal(proc.pid, signal.SIGINT)
    if not _wait(proc, WRITE_GRACE_S):
        _signal(proc.pid, signal.SIGKILL, group=True)
        proc.wait()


def record(
    argv: list[str], *, cwd: Path, env: dict[str, str], log_path: Path, timeout_s: float
) -> Recording:
    """Run py-spy (and so the worker) to completion, or stop it after ``timeout_s``."""
    stopped, signum = "", 0
    # py-spy and the worker run in their own process group; whatever the regime
    # left running in it (a leaked child) is killed when the block ends.
    with (
        open(log_path, "wb") as log,
        procs.group(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        ) as proc,
    ):
        try:
            if not _wait(proc, timeout_s):
                stopped = "timeout"
                stop(proc)
        except KeyboardInterrupt as exc:
            # cli/common.py raises SIGTERM and SIGHUP as a KeyboardInterrupt with a signum.
            stopped, signum = "interrupt", getattr(exc, "signum", signal.SIGINT)
            try:
                stop(proc)
            except KeyboardInterrupt:
                _signal(proc.pid, signal.SIGKILL, group=True)
                proc.wait()
                raise
    text = log_path.read_text(encoding="utf-8", errors="replace")
    samples, errors = samples_line(text)
    return Recording(proc.returncode, samples, errors, text, stopped, signum)
