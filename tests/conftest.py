"""Shared test helpers: real temporary git repos and the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import inprocess

# The session's PostgreSQL server fixtures (pg_server, pg_url) for the shared-store tests.
pytest_plugins = ("tests.pg", "tests.tiers")

# Each pytest-xdist worker has a CPU of its own: counter processes side by side would
# take the other worker's CPU from under its wall-time measurements, in bursts. The
# side-by-side batch itself is tested with explicit limits (test_batch, test_counters).
os.environ.setdefault("PERFCTL_COUNTER_JOBS", "1")

GIT_ENV = {
    "GIT_AUTHOR_NAME": "perfctl tests",
    "GIT_AUTHOR_EMAIL": "tests@perfctl.invalid",
    "GIT_COMMITTER_NAME": "perfctl tests",
    "GIT_COMMITTER_EMAIL": "tests@perfctl.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
}


@dataclass
class GitRepo:
    """A real git repository in a temporary directory, with a fixed identity."""

    path: Path

    def git(self, *args: str) -> str:
        """Run git in the repo and return its stdout."""
        env = {**os.environ, **GIT_ENV, "HOME": str(self.path.parent)}
        out = subprocess.run(
            ["git", *args], cwd=self.path, env=env, check=True, capture_output=True, text=True
        )
        return out.stdout.strip()

    def write(self, rel: str, text: str) -> Path:
        """Write a (dedented) file relative to the repo root."""
        p = self.path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text), encoding="utf-8")
        return p

    def commit(self, message: str, date: str | None = None) -> str:
        """Stage everything and commit; returns the new sha."""
        self.git("add", "-A")
        args = ["commit", "-q", "--allow-empty", "-m", message]
        if date:
            args += ["--date", date]
            os.environ["GIT_COMMITTER_DATE"] = date
        try:
            self.git(*args)
        finally:
            os.environ.pop("GIT_COMMITTER_DATE", None)
        return self.git("rev-parse", "HEAD")

    def tag(self, name: str, ref: str = "HEAD") -> None:
        """Create a lightweight tag."""
        self.git("tag", name, ref)


@pytest.fixture
def git_repo(tmp_path: Path) -> GitRepo:
    """An empty git repository on branch main."""
    path = tmp_path / "proj"
    path.mkdir()
    repo = GitRepo(path)
    repo.git("init", "-q", "-b", "main")
    return repo


def run_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """Run the real `perfctl` CLI: its entry point in this process in the cli tier, a
    `python -m perfctl` subprocess in the e2e tier (or everywhere, with
    PERFCTL_TEST_CLI=process)."""
    # The terminal size of whoever started pytest (pytest-xdist's workers set
    # COLUMNS=80) must not decide how wide a piped table is; a test sets it to ask.
    inherited = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    full_env = {**inherited, **GIT_ENV, **(env or {})}
    full_env.pop("PYTHONPATH", None) if env is None or "PYTHONPATH" not in env else None
    argv = [sys.executable, "-m", "perfctl", *args]
    if inprocess.ENABLED[0] and os.environ.get("PERFCTL_TEST_CLI") != "process":
        return inprocess.run(argv, cwd=cwd, env=full_env, timeout=timeout)
    return subprocess.run(
        argv, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout
    )


def worker_pids(path: Path) -> list[int]:
    """PIDs of benchmark workers measuring regimes under ``path`` (their command lines
    name the regime and its file)."""
    found = subprocess.run(
        ["pgrep", "-f", f"perfctl-regime.*{path}"], capture_output=True, text=True
    )
    return [int(p) for p in found.stdout.split()]


@pytest.fixture
def cli():
    """The run_cli helper as a fixture."""
    return run_cli


def default_signals() -> None:
    """preexec_fn: a child that a test stops the way a terminal does.

    A suite started in the background (nohup, `&`) hands its children an ignored
    SIGINT, and Python then never raises KeyboardInterrupt; a terminal's Ctrl-C
    reaches a foreground process whose SIGINT is at its default.
    """
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


@pytest.fixture(autouse=True)
def _no_isolated_cpus(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """In-process perfctl sees a kernel that isolates no CPU, whatever this machine's does
    (isolated CPUs are the default placement; tests that want some point here)."""
    from perfctl.measure import machine

    monkeypatch.setattr(machine, "ISOLATED", tmp_path_factory.getbasetemp() / "no-isolated-cpus")
