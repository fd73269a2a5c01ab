"""The test tiers themselves: which `-m` gets more workers, and that the in-process CLI
puts back everything of the test's process that it borrowed."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from perfctl import __version__
from tests import inprocess
from tests.tiers import _refusal, _selects_no_e2e


@pytest.mark.parametrize(
    ("markexpr", "no_e2e"),
    [
        ("", False),
        ("not e2e", True),
        ("not slow", True),
        ("unit", True),
        ("cli", True),
        ("unit or cli", True),
        ("cli and not browser", True),
        ("e2e", False),
        ("gpu", False),  # a gpu test is an e2e test
        ("not gpu", False),
        ("not e2e or gpu", False),
        ("browser", False),  # known to be cli only by the tiers, not by its markers
        ("slow(reason=1)", False),  # pytest's own syntax: assume it may
        ("not True", False),  # to pytest, True, a+b, a/b and 1 are marker names
        ("not e2e+e2e", False),
        ("not e2e/slow", False),
        ("not 1", False),
        ("e2e if unit else cli", False),
    ],
)
def test_only_a_selection_without_e2e_tests_gets_more_workers(markexpr: str, no_e2e: bool) -> None:
    assert _selects_no_e2e(markexpr) is no_e2e


def test_each_tier_refuses_the_processes_above_it() -> None:
    from perfctl.measure.workers import WORKERS

    git, probe = ["git", "status"], [sys.executable, str(WORKERS / "probe.py")]
    bench, spy = [sys.executable, str(WORKERS / "bench.py"), "--loops", "1"], ["py-spy", "record"]
    assert _refusal("unit", git) is None
    assert "a unit test started" in (_refusal("unit", probe) or "")
    # A cli test may build and probe; measuring (a worker, a profiler) is the e2e tier's.
    assert _refusal("cli", probe) is None and _refusal("cli", git) is None
    assert "a cli test measured (python" in (_refusal("cli", bench) or "")
    assert "mark it e2e" in (_refusal("cli", spy) or "")
    assert _refusal("cli", [sys.executable, "/elsewhere/bench.py"]) is None  # not perfctl's


@pytest.mark.cli
def test_the_in_process_cli_puts_back_what_it_borrowed(tmp_path: Path) -> None:
    before_env, before_cwd, before_argv = dict(os.environ), os.getcwd(), list(sys.argv)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    streams = sys.stdout, sys.stderr
    argv = [sys.executable, "-m", "perfctl", "init", "--bogus"]
    env = {**os.environ, "PERFCTL_SOMETHING": "1"}
    proc = inprocess.run(argv, cwd=tmp_path, env=env, timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("Error: No such option: --bogus\n")
    assert dict(os.environ) == before_env
    assert (os.getcwd(), sys.argv) == (before_cwd, before_argv)
    assert {s: signal.getsignal(s) for s in handlers} == handlers
    assert (sys.stdout, sys.stderr) == streams
    proc = inprocess.run([*argv[:3], "--version"], cwd=tmp_path, env=env, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"perfctl {__version__}\n", "")
