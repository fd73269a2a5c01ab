"""End-to-end tests of `perfctl list`, `perfctl run` and `perfctl runs` (real pyperf)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli

QUICK = ["--processes", "2", "--values", "2", "--min-time", "0.005"]

REGIMES = '''
import os, time
from perfctl import regime

@regime(family="demo", ops=100, params={"n": [10, 1000]}, baseline="direct")
def work(n):
    """Sum a range, a hundred times per call."""
    data = list(range(n))
    def run():
        for _ in range(100):
            sum(data)
    yield run

@regime(family="demo", ops=100, params={"n": [10, 1000]})
def direct(n):
    """The same sum, as the baseline."""
    def run():
        for _ in range(100):
            pass
    return run

@regime(family="demo", requires=["surely_not_installed_mod"])
def needs_missing():
    """Needs a module that is not installed."""
    return lambda: None
'''

BROKEN = '''
import os, time
from perfctl import regime

@regime(family="bad")
def raises():
    """Raises in setup."""
    raise RuntimeError("boom in setup")
    yield lambda: None

@regime(family="bad")
def crashes():
    """Kills the interpreter."""
    def run():
        os._exit(7)
    return run

@regime(family="bad", timeout=3)
def hangs():
    """Never finishes."""
    def run():
        time.sleep(60)
    return run

@regime(family="good")
def fine():
    """Does a little work."""
    return lambda: sum(range(50))
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A minimal project with a regimes file configured in pyproject.toml."""
    root = tmp_path / "proj"
    root.mkdir()
    (root / "pyproject.toml").write_text(
        '[project]\nname = "demo"\nversion = "0"\n\n[tool.perfctl]\nregimes = ["bench.py"]\n'
    )
    (root / "bench.py").write_text(REGIMES)
    return root


def test_list_expands_params_and_reports_skips(project: Path) -> None:
    proc = run_cli("list", "--format", "json", cwd=project)
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert set(rows) == {
        "work[n=10]",
        "work[n=1000]",
        "direct[n=10]",
        "direct[n=1000]",
        "needs_missing",
    }
    assert rows["work[n=10]"]["baseline"] == "direct[n=10]"
    assert rows["work[n=10]"]["ops"] == 100
    assert rows["work[n=10]"]["description"] == "Sum a range, a hundred times per call."
    assert "surely_not_installed_mod" in rows["needs_missing"]["skip_reason"]
    assert rows["work[n=10]"]["skip_reason"] is None


def test_list_table_and_family_filter(project: Path) -> None:
    proc = run_cli("list", "--family", "demo", cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert "work[n=1000]" in proc.stdout and "skip:" in proc.stdout


@pytest.mark.slow  # measures with real pyperf workers
def test_run_measures_stores_and_pyperf_reads_it(project: Path) -> None:
    proc = run_cli(
        "run", "--regime", "work*", "--regime", "direct*", *QUICK, "--format", "json", cwd=project
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    rows = {r["regime"]: r for r in out["rows"]}
    small, big = rows["work[n=10]"], rows["work[n=1000]"]
    assert small["status"] == big["status"] == "ok"
    # 100x more data to sum: per-op time is larger (a real measurement; its size is noise).
    assert big["median_s"] > small["median_s"]
    assert big["vs_baseline"] and big["vs_baseline"] > 1
    run = out["run"]
    assert run["status"] == "complete" and run["machine"]["cores"] >= 1
    assert run["ref"]["ref"] in ("WORKTREE", "")
    for key in ("python_version", "perfctl_version", "pyperf_version", "started", "finished"):
        assert run[key]
    assert all(r["seconds"] > 0 for r in run["results"])  # each regime's measuring time
    state = project / ".perfctl"
    files = sorted((state / "runs" / run["id"] / "pyperf").glob("*.json"))
    assert len(files) == 4
    stats = subprocess.run(
        [sys.executable, "-m", "pyperf", "stats", str(files[0])], capture_output=True, text=True
    )
    assert stats.returncode == 0 and "Median" in stats.stdout
    # pyperf's own comparison reads the same regime's files from two stored runs.
    second = run_cli("run", "--regime", "work[n=10]", *QUICK, "--format", "json", cwd=project)
    assert second.returncode == 0, second.stderr
    other = json.loads(second.stdout)["run"]["id"]
    first_f = next(f for f in files if f.name.startswith("work_n_10-"))
    (second_f,) = (state / "runs" / other / "pyperf").glob("work_n_10-*.json")
    compared = subprocess.run(
        [sys.executable, "-m", "pyperf", "compare_to", str(first_f), str(second_f)],
        capture_output=True,
        text=True,
    )
    assert compared.returncode == 0, compared.stderr
    # One benchmark: "Mean +- std dev: … slower/faster", or "hidden because not significant".
    assert "Mean +- std dev" in compared.stdout or "work[n=10]" in compared.stdout
    listing = run_cli("runs", "--format", "json", cwd=project)
    assert [r["id"] for r in json.loads(listing.stdout)][:2] == [other, run["id"]]  # newest first


def test_skipped_regime_is_not_failed(project: Path) -> None:
    proc = run_cli("run", "--regime", "needs_missing", *QUICK, "--format", "json", cwd=project)
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)["rows"]
    assert row["status"] == "skipped" and "surely_not_installed_mod" in row["reason"]


@pytest.mark.slow  # measures with real pyperf workers
def test_failures_are_isolated(project: Path) -> None:
    (project / "broken.py").write_text(BROKEN)
    proc = run_cli("run", "--regimes", "broken.py", *QUICK, "--format", "json", cwd=project)
    assert proc.returncode == 3
    rows = {r["regime"]: r for r in json.loads(proc.stdout)["rows"]}
    assert rows["fine"]["status"] == "ok"
    for name in ("raises", "crashes", "hangs"):
        assert rows[name]["status"] == "failed", name
    assert "boom in setup" in rows["raises"]["reason"]
    assert "timed out" in rows["hangs"]["reason"]
    assert "Error: 3 regime(s) failed" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow  # measures with real pyperf workers
def test_sigkill_midway_leaves_a_consistent_store(project: Path) -> None:
    slow = (
        REGIMES
        + '''
@regime(family="slow", params={"i": list(range(6))})
def slow(i):
    """Slow enough to be killed midway."""
    return lambda: time.sleep(0.002)
'''
    )
    (project / "bench.py").write_text(slow)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "perfctl", "run", "--regime", "slow*", *QUICK],
        cwd=project,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    runs_dir = project / ".perfctl" / "runs"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and _recorded(runs_dir) < 2:
        # The run record, not the pyperf files: a file is written before the record
        # lists it, and a kill between the two (a loaded machine) left one result.
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    listing = run_cli("runs", "--format", "json", cwd=project)
    assert listing.returncode == 0, listing.stderr
    (run,) = json.loads(listing.stdout)
    assert run["status"] == "running" and run["regimes"] >= 2
    record = json.loads(next(runs_dir.glob("*/run.json")).read_text())
    for result in record["results"]:
        path = project / ".perfctl" / result["pyperf_file"]
        assert json.loads(path.read_text())["benchmarks"]
    assert not list(runs_dir.rglob("*.tmp"))
    # A new run afterwards works and does not disturb the killed one.
    again = run_cli("run", "--regime", "work[[]n=10]", *QUICK, cwd=project)
    assert again.returncode == 0, again.stderr
    assert len(json.loads(run_cli("runs", "--format", "json", cwd=project).stdout)) == 2


def _recorded(runs_dir: Path) -> int:
    """How many results the (atomically written) run record lists so far."""
    for path in runs_dir.glob("*/run.json"):
        with contextlib.suppress(OSError, ValueError):
            return len(json.loads(path.read_text())["results"])
    return 0


@pytest.mark.parametrize(
    ("args", "setup", "message", "hint"),
    [
        (["run", "--regime", "nope*"], None, "Error: no regime matches `nope*`", "Hint:"),
        (
            ["list", "--regimes", "missing.py"],
            None,
            "Error: regimes file `missing.py` does not exist",
            "Hint: check the path",
        ),
        (["list"], "badkey", "Error: ", "Hint: did you mean `regimes`?"),
        (["list", "--regimes", "syntax.py"], "syntax", "syntax.py:3: SyntaxError", "Hint:"),
        (
            ["list", "--regimes", "imports.py"],
            "imports",
            "imports.py:2: ModuleNotFoundError",
            "Hint:",
        ),
    ],
)
def test_cli_error_texts(
    project: Path, args: list[str], setup: str | None, message: str, hint: str
) -> None:
    if setup == "badkey":
        (project / "pyproject.toml").write_text('[tool.perfctl]\nregimez = ["bench.py"]\n')
    if setup == "syntax":
        (project / "syntax.py").write_text("from perfctl import regime\n\ndef broken(:\n")
    if setup == "imports":
        (project / "imports.py").write_text("import os\nimport no_such_module_xyz\n")
    proc = run_cli(*args, cwd=project)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and hint in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 2


def test_not_a_project(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    proc = run_cli("list", cwd=bare)
    assert proc.returncode == 2
    assert "is not inside a project" in proc.stderr and "Hint:" in proc.stderr


@pytest.mark.slow  # measures with real pyperf workers
def test_explicit_regimes_need_no_project(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "regimes.py").write_text(REGIMES)
    proc = run_cli("list", "--regimes", "regimes.py", "--format", "json", cwd=bare)
    assert proc.returncode == 0, proc.stderr
    assert "work[n=10]" in {r["name"] for r in json.loads(proc.stdout)}
    proc = run_cli(
        "run", "--regimes", "regimes.py", "--regime", "direct*", *QUICK, "--format", "json",
        cwd=bare,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["run"]["status"] == "complete"
    assert (bare / ".perfctl" / ".gitignore").is_file()  # the current directory is the project
    # Without --regimes there is still nothing to go on.
    assert "is not inside a project" in run_cli("list", cwd=bare).stderr


def test_usage_error_is_one_line(project: Path) -> None:
    proc = run_cli("run", "--no-such-flag", cwd=project)
    assert proc.returncode == 2
    assert proc.stderr.startswith("Error: ") and "Hint:" in proc.stderr


ENV_REGIME = '''
import os
from perfctl import regime

@regime(family="env")
def sees_env():
    """Reports whether the worker saw PERFCTL_TEST_VAR."""
    seen = float("PERFCTL_TEST_VAR" in os.environ)
    yield (lambda: None), (lambda: {"seen": seen})
'''


@pytest.mark.slow  # real pyperf workers measure (what they see is the point)
@pytest.mark.parametrize("inherit", [False, True])
def test_workers_get_only_the_environment_asked_for(project: Path, inherit: bool) -> None:
    (project / "envcheck.py").write_text(ENV_REGIME)
    if inherit:
        (project / "pyproject.toml").write_text(
            '[tool.perfctl]\nregimes = ["bench.py"]\ninherit_environ = ["PERFCTL_TEST_VAR"]\n'
        )
    proc = run_cli(
        "run",
        "--regimes",
        "envcheck.py",
        *QUICK,
        "--format",
        "json",
        cwd=project,
        env={"PERFCTL_TEST_VAR": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)["rows"]
    assert row["metrics"] == {"seen": 1.0 if inherit else 0.0}


def test_run_table_stats_are_the_comparison_summaries():
    # #11.3: the process is the unit. Three processes with equal means but a
    # wide spread inside each: the pooled values' CV is 37.5%, the process means'
    # is 0, and the run table must say what a comparison's summary says.
    from perfctl.model import OK, RegimeResult
    from perfctl.render.tables import result_stats
    from perfctl.stats.decision import summarize

    procs = ((1e-6, 3e-6), (1.5e-6, 2.5e-6), (2e-6, 2e-6), (1e-6, 3e-6))
    row = result_stats(RegimeResult("r", "f", OK, processes=procs))
    s = summarize(procs)
    assert (row["median_s"], row["q1_s"], row["q3_s"], row["cv"]) == (
        s.median_s,
        s.q1_s,
        s.q3_s,
        s.cv,
    )
    assert row["cv"] < 1e-9  # pooled values: 0.375
