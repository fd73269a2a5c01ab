"""`--affinity`: every worker of both refs pinned to one CPU set, and the burst sample
reading only those CPUs (real worker processes, real /proc/stat)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import GitRepo, run_cli

if not hasattr(os, "sched_getaffinity"):
    pytest.skip("CPU affinity is Linux-only", allow_module_level=True)

ALLOWED = sorted(os.sched_getaffinity(0))
# The last CPU perfctl may use: pinning there differs from the default placement
# wherever there are two or more, so a worker left unpinned is caught.
CPU = ALLOWED[-1]

PYPROJECT = """\
[project]
name = "pin"
version = "0.1"

[tool.perfctl]
regimes = ["bench/regimes.py"]
install = false
"""

REGIMES = """\
import os
from perfctl import regime
import pin

@regime(family="pin", ops=1)
def pinned():
    \"\"\"Fails unless its worker process runs on CPU {cpu} only.\"\"\"
    mask = os.sched_getaffinity(0)
    if mask != {{{cpu}}}:
        raise RuntimeError(f"worker may run on CPUs {{sorted(mask)}}, not only {cpu}")
    return pin.work
"""

FAST = ["--rounds", "2", "--max-rounds", "2", "--min-time", "0.01", "--format", "json"]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> GitRepo:
    path = tmp_path_factory.mktemp("pin") / "proj"
    path.mkdir()
    r = GitRepo(path)
    r.git("init", "-q", "-b", "main")
    r.write("pyproject.toml", PYPROJECT)
    r.write("bench/regimes.py", REGIMES.format(cpu=CPU))
    r.write("pin/__init__.py", "def work():\n    return sum(range(300))\n")
    r.commit("c1")
    r.tag("c1")
    r.write("pin/__init__.py", "# same code\ndef work():\n    return sum(range(300))\n")
    r.commit("c2")
    r.tag("c2")
    return r


@pytest.mark.slow
@pytest.mark.parametrize("pairing", ["process", "same-process"])
def test_every_worker_runs_on_the_cpus_affinity_names(repo: GitRepo, pairing: str) -> None:
    proc = run_cli(
        "compare", "c1", "c2", "--affinity", str(CPU), "--pairing", pairing, *FAST,
        cwd=repo.path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    (row,) = data["regimes"]
    assert row["verdict"] != "failed", row
    assert data["settings"]["affinity"] == [CPU]
    # Said under the table, re-read from the store without measuring again.
    text = run_cli("compare", "c1", "c2", "--from-store", "--comparison", data["id"], cwd=repo.path)
    assert text.returncode == 0, text.stderr
    assert f"Placement: every worker of both refs was pinned to CPU {CPU} (--affinity)." in (
        text.stdout
    )


@pytest.mark.slow
def test_run_pins_its_workers_too(repo: GitRepo) -> None:
    few = ["--processes", "2", "--values", "1", "--min-time", "0.01"]
    proc = run_cli("run", "--affinity", str(CPU), *few, cwd=repo.path)
    assert proc.returncode == 0, proc.stderr
    assert f"Placement: every worker was pinned to CPU {CPU} (--affinity)." in proc.stdout
    if len(ALLOWED) > 1:  # the regime itself tells: unpinned, it fails
        unpinned = run_cli("run", *few, cwd=repo.path)
        assert unpinned.returncode == 3 and "not only" in unpinned.stdout, unpinned.stderr


@pytest.mark.slow
@pytest.mark.skipif(len(ALLOWED) < 2, reason="one CPU: every worker runs on it anyway")
def test_without_affinity_the_workers_are_not_pinned(repo: GitRepo) -> None:
    # The regime itself tells: so the test above cannot pass with the flag ignored.
    proc = run_cli("compare", "c1", "c2", *FAST, cwd=repo.path)
    assert proc.returncode == 3, proc.stderr
    (row,) = json.loads(proc.stdout)["regimes"]
    assert row["verdict"] == "failed" and "not only" in json.dumps(row)


@pytest.mark.cli
def test_a_cpu_no_worker_can_be_pinned_to_is_a_usage_error(repo: GitRepo) -> None:
    proc = run_cli("compare", "c1", "c2", "--affinity", "8000", cwd=repo.path)
    assert proc.returncode == 2
    assert proc.stderr.startswith(
        "Error: --affinity 8000: CPU 8000 cannot be used here (offline, or outside this "
        "machine's or container's CPU set)\nHint: choose among CPUs "
    )
    assert "Traceback" not in proc.stderr


@pytest.mark.cli
@pytest.mark.parametrize(
    "command",
    [["compare", "A", "B"], ["ci"], ["bisect", "A", "B", "-r", "work"], ["run"]],
)
def test_placement_flags_with_counters_alone_are_usage_errors(
    tmp_path: Path, command: list[str]
) -> None:
    """Refused before anything else (no project needed): a counter ignores both."""
    flags = [("--affinity", "0"), ("--burst-wait", "5")][: 1 if command == ["run"] else 2]
    for flag, value in flags:
        proc = run_cli(*command, "--measure", "memory", flag, value, cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        error, hint = proc.stderr.splitlines()
        assert error == (
            f"Error: {flag} applies to timed rounds, and --measure memory times nothing "
            "(counts do not depend on where or when a process runs)"
        )
        assert hint.startswith(f"Hint: drop {flag}, or ")


@pytest.mark.cli
def test_placement_flags_are_refused_where_nothing_is_measured_and_hints_never_mislead(
    tmp_path: Path,
) -> None:
    stored = run_cli("compare", "A", "B", "--from-store", "--burst-wait", "3", cwd=tmp_path)
    assert stored.returncode == 2 and stored.stderr.splitlines() == [
        "Error: --burst-wait shapes measuring; --from-store measures nothing",
        "Hint: drop --burst-wait (the stored comparison says how it was measured)",
    ]
    # A shard takes one signal: the hint cannot be "add time" (that is refused next).
    for command in (["compare", "A", "B"], ["ci"]):
        proc = run_cli(*command, "--shard", "1/2", "--measure", "memory", "--affinity", "0",
                       cwd=tmp_path)  # fmt: skip
        assert proc.returncode == 2
        assert (
            proc.stderr.splitlines()[1]
            == "Hint: drop --affinity, or measure the time: --measure time"
        )


@pytest.mark.cli
def test_the_burst_sample_reads_only_the_cpus_asked_for() -> None:
    from perfctl.measure.machine import cpus_busy

    # A spinning process pinned to each CPU: every CPU reads busy, so a sample of one
    # CPU reads about 1, and one that counted them all would read about their number.
    code = "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass"
    spin = [subprocess.Popen([sys.executable, "-c", code, str(n)]) for n in ALLOWED]
    try:
        time.sleep(0.3)
        one = cpus_busy([CPU], 0.3)
        every = cpus_busy(ALLOWED, 0.3)
    finally:
        for s in spin:
            s.kill()
            s.wait()
    assert one is not None and 0.8 <= one <= 1.0 + 1e-9
    assert every is not None and every >= 0.8 * len(ALLOWED)


def test_mixed_runs_placed_differently_are_warned_and_alike_are_said() -> None:
    from perfctl.jobs.recompute import _mixed_settings, _mixed_warnings
    from perfctl.jobs.settings import COMPARE_DEFAULT
    from perfctl.model import Comparison, Machine, RefInfo, Run

    machine = Machine("m", "cpu", 2, 2**30, "6", "none", "3.11")

    def run(name: str, cpus: list[int]) -> Run:
        ref = RefInfo(name, "1" * 40)
        return Run(name, "p", ref, machine, "now", settings={"affinity": cpus})

    none: dict[str, Comparison | None] = {"base": None, "head": None}
    apart = {"base": run("b", [0]), "head": run("h", [])}
    (said,) = [w for w in _mixed_warnings(apart, none) if "placed differently" in w]
    assert "(--affinity: base 0, head not pinned)" in said
    assert _mixed_settings(apart, none, COMPARE_DEFAULT)["affinity"] == []
    alike = {"base": run("b", [1]), "head": run("h", [1])}
    assert not [w for w in _mixed_warnings(alike, none) if "placed differently" in w]
    assert _mixed_settings(alike, none, COMPARE_DEFAULT)["affinity"] == [1]


# `perfctl` on a machine whose kernel isolates CPU {CPU}: the sysfs file read from a test file.
ON_ISOLATED = (
    "import pathlib, sys\n"
    "from perfctl.measure import machine\n"
    "machine.ISOLATED = pathlib.Path(sys.argv.pop(1))\n"
    "from perfctl.cli.app import main\n"
    "main()\n"
)

UNDER_PYPERFS_NOSE = """\
import os
import pyperf._runner
from perfctl import regime

# pyperf, left to itself, pins a worker to the isolated CPUs once timing starts.
pyperf._runner.get_isolated_cpus = lambda: [{cpu}]

@regime(family="pin", ops=1)
def stays():
    \"\"\"Fails if its worker is pinned while timed.\"\"\"
    def work():
        if os.sched_getaffinity(0) != {allowed}:
            raise RuntimeError("pinned by pyperf while timed, not by perfctl")
    return work
"""


@pytest.mark.slow
@pytest.mark.skipif(len(ALLOWED) < 2, reason="one CPU: every worker runs on it anyway")
def test_isolated_cpus_are_named_and_no_worker_is_pinned_behind_perfctls_back(
    repo: GitRepo, tmp_path: Path
) -> None:
    isolated = tmp_path / "isolated"
    isolated.write_text(f"{CPU}\n")
    regimes = tmp_path / "stays.py"
    regimes.write_text(UNDER_PYPERFS_NOSE.format(cpu=CPU, allowed=set(ALLOWED)))
    few = ["run", "--regimes", str(regimes), "--processes", "2", "--values", "1"]
    proc = subprocess.run(
        [sys.executable, "-c", ON_ISOLATED, str(isolated), *few, "--min-time", "0.01"],
        cwd=repo.path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr  # the regime checks its mask
    assert (
        f"the kernel isolates CPU {CPU} (isolcpus); the workers are not pinned there "
        f"(pyperf's own pinning is off too): --affinity {CPU} measures on them"
    ) in proc.stderr
    assert "Placement" not in proc.stdout
