"""A real PostgreSQL server for the tests: initdb into a temporary directory, then pg_ctl.

The server runs on a free local TCP port with password (scram-sha-256) logins,
as a non-root user when the suite runs as root (PostgreSQL refuses to run as
root). Tests that need it are skipped, saying why, only when the server
binaries are not installed (`.ci/run` installs Debian's `postgresql`).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

USER = "perfctl"
PASSWORD = "Sup3r-s3cret-pw"  # what the tests look for in every output
RUN_AS = ("postgres", "nobody")  # the first of these that exists, when running as root


def binaries() -> Path | None:
    """The directory holding initdb and pg_ctl, if any."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    return Path(versions[0]).parent if versions else None


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class PgServer:
    """A running server: where it listens and how to log in."""

    host: str
    port: int
    user: str
    password: str

    def url(self, database: str = "postgres", password: str | None = None) -> str:
        """A postgresql:// URL for a database (with another password if given)."""
        pw = self.password if password is None else password
        return f"postgresql://{self.user}:{pw}@{self.host}:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A fresh, empty database; returns its URL."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


class ServerMissing(Exception):
    """The server cannot be started here (the reason is the message)."""


def _runner(folder: Path) -> list[str]:
    """The command prefix that runs the server tools as a non-root user when we are root."""
    if os.geteuid() != 0:
        return []
    for name in RUN_AS:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        for path in (folder, *folder.rglob("*")):
            os.chown(path, entry.pw_uid, entry.pw_gid)
        return ["runuser", "-u", name, "--"]
    raise ServerMissing("running as root and neither a `postgres` nor a `nobody` user exists")


def _run(cmd: list[str]) -> None:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")


@contextlib.contextmanager
def running_server() -> Iterator[PgServer]:
    """A fresh PostgreSQL server in a temporary directory, stopped and removed on exit."""
    bin_dir = binaries()
    if bin_dir is None:
        raise ServerMissing("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    # Not under pytest's tmp dir: that is private to root, and the server runs as another user.
    folder = Path(tempfile.mkdtemp(prefix="perfctl-pg-"))
    try:
        folder.chmod(0o755)
        (folder / "pwfile").write_text(PASSWORD + "\n")
        (folder / "sock").mkdir()
        as_user = _runner(folder)
        data, port = folder / "data", free_port()
        _run([*as_user, str(bin_dir / "initdb"), "-D", str(data), "-U", USER, "-A",
              "scram-sha-256", f"--pwfile={folder / 'pwfile'}", "-E", "UTF8", "--no-sync"])  # fmt: skip
        opts = f"-p {port} -k {folder / 'sock'} -c listen_addresses=127.0.0.1 -c fsync=off"
        ctl = [*as_user, str(bin_dir / "pg_ctl"), "-D", str(data)]
        _run([*ctl, "-o", opts, "-l", str(folder / "log"), "-w", "-t", "60", "start"])
        try:
            yield PgServer("127.0.0.1", port, USER, PASSWORD)
        finally:
            subprocess.run([*ctl, "-m", "fast", "-w", "stop"], capture_output=True, timeout=120)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One PostgreSQL server for the whole session (skipped, saying why, only without one)."""
    try:
        server = running_server()
        started = server.__enter__()
    except ServerMissing as exc:
        pytest.skip(str(exc))
    try:
        yield started
    finally:
        server.__exit__(None, None, None)


@pytest.fixture
def pg_url(pg_server: PgServer, request: pytest.FixtureRequest) -> str:
    """The URL of a fresh database for one test."""
    import secrets

    return pg_server.create_database(f"t_{secrets.token_hex(6)}")
