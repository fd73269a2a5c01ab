"""How a failing worker is reported: the same words from `run` and `compare`, bounded logs."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from perfctl.measure import interleave, runner
from perfctl.measure.interleave import SIDES, SideData
from perfctl.model import RegimeInfo
from tests.conftest import GitRepo, run_cli

REGIMES = """\
import os, signal
from perfctl import regime

@regime
def segfaults():
    \"\"\"Dies by SIGSEGV in the timed loop.\"\"\"
    return lambda: os.kill(os.getpid(), signal.SIGSEGV)

@regime
def fine():
    \"\"\"Works.\"\"\"
    return lambda: sum(range(100))
"""


def test_durations_never_read_minus_zero() -> None:
    assert runner.seconds(-0.02) == "0 s"
    assert runner.seconds(0.1) == "0.1 s"
    assert runner.seconds(299.6) == "300 s"


@pytest.mark.cli  # a real worker process
def test_a_side_left_no_time_is_not_measured_rather_than_timed_out(tmp_path: Path) -> None:
    regimes = tmp_path / "r.py"
    regimes.write_text("from perfctl import regime\n@regime\ndef a():\n    return lambda: None\n")
    worker = runner.Worker(Path(sys.executable), tmp_path, {}, (regimes,))
    info = RegimeInfo("a", "default", {}, 1, None, (), "", str(regimes), timeout=5)
    data = {s: SideData() for s in SIDES}
    logs = {s: tmp_path / f"{s}.log" for s in SIDES}
    loops = interleave.calibrate_pair(
        {s: worker for s in SIDES},
        info,
        logs,
        data,
        deadline=time.monotonic() - 0.02,
        min_time=0.05,
    ).loops
    assert loops == 0
    for side in SIDES:
        assert not data[side].ok
        assert data[side].reason == "not measured: the other side used up the regime's timeout"


@pytest.mark.cli  # a real worker process
def test_worker_logs_keep_their_last_mebibyte(tmp_path: Path) -> None:
    log = tmp_path / "w.log"
    chatty = "import sys\nfor i in range(60_000): print(f'line {i:06d} ' + 'x' * 40)\n"
    for _ in range(2):  # appended per process, trimmed after each
        rc = runner.spawn([sys.executable, "-c", chatty], cwd=tmp_path, env={}, log=log, timeout=60)
        assert rc == 0
    text = log.read_text()
    assert log.stat().st_size <= runner.LOG_KEEP_BYTES + 100
    assert text.startswith("[perfctl: the first ") and "bytes of this log were cut]" in text
    assert text.rstrip().endswith("line 059999 " + "x" * 40)


@pytest.mark.slow
def test_a_crash_reads_the_same_from_run_and_compare(git_repo: GitRepo) -> None:
    git_repo.write("pyproject.toml", '[tool.perfctl]\ninstall = false\nregimes = ["r.py"]\n')
    git_repo.write("r.py", REGIMES)
    git_repo.commit("c1")
    git_repo.commit("c2")
    quick = ["--min-time", "0.01", "--format", "json"]
    ran = run_cli("run", "--processes", "2", "--values", "2", *quick, cwd=git_repo.path)
    compared = run_cli("compare", "HEAD~1", "HEAD", "--fast", *quick, cwd=git_repo.path)
    assert ran.returncode == compared.returncode == 3, (ran.stderr, compared.stderr)
    run_row = {r["regime"]: r for r in json.loads(ran.stdout)["rows"]}["segfaults"]
    cmp_row = {r["name"]: r for r in json.loads(compared.stdout)["regimes"]}["segfaults"]
    said = "killed by signal 11 (SIGSEGV)"
    assert run_row["reason"].startswith(said), run_row["reason"]
    assert said in cmp_row["reason"], cmp_row["reason"]
    runs = json.loads(run_cli("runs", "--format", "json", cwd=git_repo.path).stdout)
    assert [r["status"] for r in runs] == ["failed"] * 3  # one from run, two from compare
