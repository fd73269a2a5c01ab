"""Shared test helpers: real temporary git repos and a real CLI subprocess."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import textwrap
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

# The session's PostgreSQL server fixtures (pg_server, pg_url) for the shared-store tests.
pytest_plugins = ("tests.pg",)

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
    """Run the real `perfctl` CLI as a subprocess (python -m perfctl)."""
    # The terminal size of whoever started pytest (pytest-xdist's workers set
    # COLUMNS=80) must not decide how wide a piped table is; a test sets it to ask.
    inherited = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    full_env = {**inherited, **GIT_ENV, **(env or {})}
    full_env.pop("PYTHONPATH", None) if env is None or "PYTHONPATH" not in env else None
    return subprocess.run(
        [sys.executable, "-m", "perfctl", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
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


# -- test tiers (README, Development) -----------------------------------------------
# unit: in-process, no perfctl/pyperf/py-spy process (git for a temporary repository
# is allowed); cli: the real CLI or other tools as subprocesses, nothing measured;
# e2e (alias slow): real measurements. A test that names no tier gets one here.
_CLI_FIXTURES = frozenset({"cli", "git_repo"})
_CLI_NAMES = frozenset({"run_cli", "subprocess", "Popen"})
# git for a temporary repository; uname and file are how the platform module asks.
_UNIT_TOOLS = frozenset({"git", "uname", "file"})


def _names(fn: object) -> set[str]:
    """Global and attribute names a function uses, comprehensions and inner functions included."""
    code = getattr(fn, "__code__", fn)
    if not isinstance(code, types.CodeType):
        return set()
    inner = (_names(c) for c in code.co_consts if isinstance(c, types.CodeType))
    return set(code.co_names).union(*inner)


def _starts_processes(item: pytest.Item) -> bool:
    """Whether the test, or a helper of its module that it calls, runs subprocesses."""
    if _CLI_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    names = _names(getattr(item, "function", None))
    module = vars(getattr(item, "module", None) or object())
    helpers = (_names(module.get(n)) for n in names if callable(module.get(n)))
    return bool(_CLI_NAMES & names) or any(_CLI_NAMES & h for h in helpers)


def _tier(item: pytest.Item) -> str:
    marks = {m.name for m in item.iter_markers()}
    # A gpu test measures a real device, and the CUDA libraries may start processes as
    # they load (on an H200 the unit tier's guard failed CuPy's probe: "no GPU", skipped).
    if marks & {"e2e", "slow", "gpu"}:
        return "e2e"
    if marks & {"cli", "browser"}:  # headless Chromium is a real process too
        return "cli"
    if "unit" in marks:
        return "unit"
    return "cli" if _starts_processes(item) else "unit"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give every test exactly one tier; e2e and slow mark the same tests."""
    for item in items:
        tier = _tier(item)
        declared = {m.name for m in item.iter_markers()} & {"unit", "cli", "e2e"}
        if declared - {tier}:  # `-m cli` would select an e2e test too
            raise pytest.UsageError(f"{item.nodeid}: marked {sorted(declared)}, tier {tier}")
        item.add_marker(tier)
        if tier == "e2e":
            item.add_marker("slow")
    _heaviest_modules_first(items)


def _heaviest_modules_first(items: list[pytest.Item]) -> None:
    """Modules with the most e2e tests first, each module's tests kept in order.

    pytest-xdist (--dist loadscope) hands each module to one worker, and by default
    the modules with the most tests first: the demo's one 80 s test came last and
    left the other worker idle for a minute. With --no-loadscope-reorder (pyproject)
    it follows this order, and the hundreds of short unit tests fill the tail.
    """

    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::", 1)[0]

    weight = collections.Counter(module(i) for i in items if i.get_closest_marker("e2e"))
    # A stable sort: pytest collects module by module, so modules of one weight keep
    # their order and each module's tests stay together, in order.
    items.sort(key=lambda i: -weight[module(i)])


@pytest.fixture(autouse=True)
def _no_isolated_cpus(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """In-process perfctl sees a kernel that isolates no CPU, whatever this machine's does
    (isolated CPUs are the default placement; tests that want some point here)."""
    from perfctl.measure import machine

    monkeypatch.setattr(machine, "ISOLATED", tmp_path_factory.getbasetemp() / "no-isolated-cpus")


@pytest.fixture(autouse=True)
def _unit_tests_start_no_processes(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A unit test that starts anything but git fails: mark it `cli` (or `e2e`)."""
    if _tier(request.node) != "unit":
        return
    from perfctl.measure import machine

    # The machine fingerprint asks nvidia-smi, a process, where there is one: in a unit
    # test this machine has no GPU (tests that want some patch gpus themselves).
    monkeypatch.setattr(machine, "gpus", lambda: ())
    real = subprocess.Popen.__init__

    def guarded(self: subprocess.Popen[bytes], args: object, *a: object, **kw: object) -> None:
        argv = [args] if isinstance(args, str | bytes | os.PathLike) else list(args)  # type: ignore[call-overload]
        if Path(os.fsdecode(argv[0])).name not in _UNIT_TOOLS:
            raise AssertionError(f"a unit test started {argv[0]!r}: mark the test cli or e2e")
        real(self, args, *a, **kw)  # type: ignore[call-overload]

    monkeypatch.setattr(subprocess.Popen, "__init__", guarded)
