"""Shared test helpers: real temporary git repos and a real CLI subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

# The session's PostgreSQL server fixtures (pg_server, pg_url) for the shared-store tests.
pytest_plugins = ("tests.pg",)

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
    """Run the real `perfctl` CLI as a subprocess (python -m perfctl)."""
    full_env = {**os.environ, **GIT_ENV, **(env or {})}
    full_env.pop("PYTHONPATH", None) if env is None or "PYTHONPATH" not in env else None
    return subprocess.run(
        [sys.executable, "-m", "perfctl", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


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
