"""`--measure instructions|memory`: callgrind and tracemalloc counters beside wall time.

The slow tests run real valgrind and real worker processes; they assert counts
that are exact by construction (allocations) or verdicts, never timings.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from perfctl.errors import UsageError
from perfctl.measure import counters, runner
from perfctl.measure.interleave import Schedule, round_order
from perfctl.model import RegimeInfo
from perfctl.stats.counters import compare_counts
from perfctl.stats.decision import decide
from tests.conftest import GitRepo, run_cli

needs_valgrind = pytest.mark.skipif(
    shutil.which("valgrind") is None, reason="valgrind is not installed"
)

PYPROJECT = """\
[project]
name = "toy"
version = "0.1"

[tool.perfctl]
regimes = ["bench/regimes.py"]
install = false
"""

# work() does N squarings and keeps KEEP objects per call: c2 doubles both.
CODE = """\
KEPT = []
def work():
    s = 0
    for i in range({n}):
        s += i * i
    KEPT.extend([object() for _ in range({keep})])
    return s
"""

REGIMES = """\
from perfctl import regime
import toy

@regime(family="toy", ops=1)
def work():
    \"\"\"Call toy.work once.\"\"\"
    return toy.work

@regime(family="toy", ops=1)
def steady():
    \"\"\"Code that no commit changes.\"\"\"
    return lambda: sum(range(300))

@regime(family="toy", ops=1, max_peak="64kB")
def hoard():
    \"\"\"Builds and drops an 800 kB list per call: over its 64 kB limit.\"\"\"
    return lambda: len([0] * 100_000)
"""

STANDALONE = """\
from perfctl import regime

@regime(family="alloc", ops=2)
def keep_three():
    \"\"\"Keeps three objects per call; a call is two ops.\"\"\"
    kept = []
    return lambda: kept.extend((object(), object(), object()))

@regime(family="alloc", ops=1)
def sort_once():
    data = list(range(300))
    return lambda: sorted(data, reverse=True)
"""


# -- the decision on counts (milliseconds) --------------------------------------------
def _verdict(base: list[float], head: list[float]) -> str:
    change = compare_counts([(v,) for v in base], [(v,) for v in head])
    verdict, _ = decide(change, change.p_value, threshold=0.005, alpha=0.05, base_cv=0, head_cv=0)
    return verdict


def test_three_processes_a_side_detect_one_percent() -> None:
    # Mann-Whitney cannot reach p < 0.05 with 3 vs 3; the t interval on counts can.
    assert _verdict([1000.0, 1000.2, 999.9], [1010.1, 1010.0, 1009.8]) == "regressed"
    assert _verdict([1000.0, 1000.2, 999.9], [990.0, 990.1, 989.9]) == "improved"


def test_identical_counts_are_no_change_and_zero_spread_is_a_point() -> None:
    assert _verdict([5000.0] * 3, [5000.0] * 3) == "no change"
    change = compare_counts([(5000.0,)] * 3, [(5100.0,)] * 3)
    assert (change.ci_low, change.ci_high, change.p_value) == (0.02, 0.02, 0.0)


def test_a_base_of_zero_blocks_is_floored_at_one() -> None:
    change = compare_counts([(0.0,)] * 3, [(2.0,)] * 3)
    assert change.change == pytest.approx(2.0)
    assert _verdict([0.0] * 3, [0.0] * 3) == "no change"


def test_valgrind_complaint_is_a_skip_not_a_failure(tmp_path: Path) -> None:
    part, side = tmp_path / "n.log", tmp_path / "side.log"
    part.write_text("vex amd64->IR: unhandled instruction bytes: 0x62 0xF1\n")
    got = counters._failed(part, side, 1, 10.0)
    assert got.skipped and "cannot run under callgrind: vex amd64->IR" in got.reason
    part.write_text("Traceback...\nValueError: boom\n")
    crashed = counters._failed(part, side, 1, 10.0)
    # Read from the process's own log, named by the side's log (the scratch one goes).
    assert not crashed.skipped and crashed.reason == f"ValueError: boom (exit code 1; log: {side})"


@pytest.mark.parametrize("measure", ["instructions", "memory"])
@pytest.mark.parametrize("cpus", [1, 4])
def test_a_failed_process_is_never_lost_whatever_ran_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, measure: str, cpus: int
) -> None:
    """The first value's first process fails; with one CPU nothing else started."""
    monkeypatch.setattr(counters, "require_valgrind", lambda: "valgrind")
    monkeypatch.setenv("PERFCTL_COUNTER_JOBS", str(cpus))
    worker = runner.Worker(Path(sys.executable), tmp_path, {}, (tmp_path / "r.py",))
    info = RegimeInfo("r", "f", {}, 1, None, (), "", "")

    def call_all(commands, *, limit, stop, done):
        assert limit == cpus
        ran = {i: (1 if i == 0 else 0) for i in range(min(limit, len(commands)))}
        for i in ran:
            commands[i].log.write_text("RuntimeError: the regime broke\n")
            done(i)
        return ran

    monkeypatch.setattr(counters.batch, "call_all", call_all)
    monkeypatch.setattr(counters, "loops_for", lambda workers, info, log, measure: (10, ""))
    jobs = [(worker, tmp_path / f"v{n}", tmp_path / "side.log") for n in range(3)]
    got = counters.samples(measure, info, 10, jobs)
    assert got[0] is not None and not got[0].ok and "the regime broke" in got[0].reason
    sched = Schedule(rounds=3, measure=measure)
    data = counters.measure_pair(
        {"base": worker, "head": worker}, info, sched,
        {"base": tmp_path / "b.log", "head": tmp_path / "h.log"}, tmp_path / "pair",
    )  # fmt: skip
    # The first process is the side the seed drew to go first (ABBA or BAAB).
    first = round_order(0, sched, random.Random(sched.seed))[0]
    assert not data[first].ok and "the regime broke" in data[first].reason
    assert "the regime broke" in (tmp_path / "side.log").read_text()  # appended as it ended


def test_the_peak_is_the_loops_own_not_the_readings() -> None:
    """A first call that leaves many objects from many lines (a cache, lazy imports)
    must not make the readings' own bookkeeping count as the loop's peak."""
    from perfctl.measure.workers.counters import memory_figures

    kept: list[object] = []
    source = compile("\n".join(f"KEPT.append([{i}])" for i in range(3000)), "<cache>", "exec")

    def run() -> None:
        if not kept:
            exec(source, {"KEPT": kept})  # once: 3,000 lines' worth of lasting objects
        bytearray(1024)  # then 1 kB a call, freed at once: the loop's true peak

    figures = memory_figures(run, 50, 1)
    assert 1024 <= figures["peak_traced_bytes"] < 10_000, figures
    assert figures["alloc_blocks_per_op"] == 0  # the cache was the first loops'


@pytest.mark.parametrize(
    ("measure", "calibrated", "want_loops", "want_min_time"),
    [
        ("instructions", 1, 1, 0.002),  # 2 ms or more a call: it warms within one
        ("instructions", 2, 8, 0.002),  # shorter: at least 8 warming loops
        ("instructions", 32, 32, 0.002),
        ("memory", 4, 8, 0.01),
    ],
)
def test_loop_count_outlasts_warming_and_memory_keeps_ten_ms(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    measure: str,
    calibrated: int,
    want_loops: int,
    want_min_time: float,
) -> None:
    asked: list[float] = []

    def calibrate(worker: object, info: object, *, min_time: float, **kw: object) -> object:
        asked.append(min_time)
        return runner.Outcome(ok=True, loops=calibrated)

    monkeypatch.setattr(runner, "calibrate", calibrate)
    worker = runner.Worker(Path(sys.executable), tmp_path, {}, ())
    info = RegimeInfo("r", "f", {}, 1, None, (), "", "")
    assert counters.loops_for([worker], info, tmp_path / "log", measure) == (want_loops, "")
    assert asked == [want_min_time]


def test_counter_jobs_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERFCTL_COUNTER_JOBS", "1")
    assert counters.jobs_limit() == 1
    monkeypatch.delenv("PERFCTL_COUNTER_JOBS")
    assert counters.jobs_limit() == counters.batch.usable_cpus() >= 1
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("PERFCTL_COUNTER_JOBS", bad)
        with pytest.raises(UsageError, match="PERFCTL_COUNTER_JOBS"):
            counters.jobs_limit()


def test_gpu_regime_is_skipped_under_callgrind_only() -> None:
    info = RegimeInfo("g", "f", {}, 1, None, ("gpu",), "", "")
    assert "needs a GPU" in (counters.skip_reason(info, "instructions") or "")
    assert counters.skip_reason(info, "memory") is None


@pytest.mark.parametrize("command", [["run", "--regimes", "r.py"], ["compare", "A", "B"], ["ci"]])
def test_missing_valgrind_is_an_error_with_the_install_hint(
    tmp_path: Path, command: list[str]
) -> None:
    """Checked before anything else (no project, no environment) by run, compare and ci."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "git").symlink_to(shutil.which("git") or "git")  # only valgrind is gone
    (tmp_path / "r.py").write_text(STANDALONE)
    proc = run_cli(
        *command, "--measure", "instructions",
        cwd=tmp_path, env={"PATH": str(tmp_path / "bin")},
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.splitlines() == [
        "Error: valgrind is not installed (--measure instructions runs regimes under callgrind)",
        "Hint: apt-get install valgrind",
    ]


@pytest.mark.parametrize("command", [["run", "--regimes", "r.py"], ["compare", "A", "B"]])
def test_a_bad_counter_jobs_setting_is_a_usage_error_before_anything_runs(
    tmp_path: Path, command: list[str]
) -> None:
    (tmp_path / "r.py").write_text(STANDALONE)
    env = {"PERFCTL_COUNTER_JOBS": "lots"}
    proc = run_cli(*command, "--measure", "memory", cwd=tmp_path, env=env)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "Error: PERFCTL_COUNTER_JOBS must be a whole number of at least 1, not 'lots'",
        "Hint: unset it for one process per CPU, or set 1 for one at a time",
    ]
    assert not (tmp_path / ".perfctl").exists()


# -- real processes ----------------------------------------------------------------
def _run_rows(tmp_path: Path, *args: str) -> dict[str, dict]:
    (tmp_path / "r.py").write_text(STANDALONE)
    proc = run_cli("run", "--regimes", "r.py", *args, "--format", "json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return {r["regime"]: r for r in json.loads(proc.stdout)["rows"]}


@pytest.mark.slow
def test_memory_blocks_per_op_are_exact(tmp_path: Path) -> None:
    rows = _run_rows(tmp_path, "--measure", "memory", "--regime", "keep_three")
    row = rows["keep_three"]
    # Three objects per call of two ops, in every process: exact to the block.
    assert row["unit"] == "blocks/op" and row["median_s"] == 1.5 and row["cv"] == 0
    assert row["metrics"]["alloc_blocks_per_op"] == 1.5
    assert row["metrics"]["peak_rss_bytes"] > 0


@pytest.mark.slow
@needs_valgrind
def test_instructions_agree_across_processes(tmp_path: Path) -> None:
    # One regime (six callgrind processes, ~3 s each): that the count follows the work
    # is asserted by the comparison test below (twice the squarings, 1.5-2.2x).
    rows = _run_rows(tmp_path, "--measure", "instructions", "--regime", "sort_once")
    once = rows["sort_once"]
    assert once["unit"] == "instructions/op" and once["processes"] == 3
    assert once["cv"] < 0.001  # A/A across processes
    assert once["median_s"] > 5_000  # a 300-item sort: thousands of instructions (23,563 here)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> GitRepo:
    """c1 (300 squarings, keeps 1 object), c2 (600 squarings, keeps 2 objects per call)."""
    path = tmp_path_factory.mktemp("counters") / "proj"
    path.mkdir()
    r = GitRepo(path)
    r.git("init", "-q", "-b", "main")
    r.write("pyproject.toml", PYPROJECT)
    r.write("bench/regimes.py", REGIMES)
    r.write("toy/__init__.py", CODE.format(n=300, keep=1))
    r.commit("c1")
    r.tag("c1")
    r.write("toy/__init__.py", CODE.format(n=600, keep=2))
    r.commit("c2")
    r.tag("c2")
    return r


def _compared(repo: GitRepo, measure: str, *extra: str) -> dict[str, Any]:
    proc = run_cli(
        "compare", "c1", "c2", "--measure", measure, *extra, "--format", "json", cwd=repo.path
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["threshold"] == 0.005 and data["settings"]["measure"] == measure
    return dict(data)


def _compare(repo: GitRepo, measure: str, *extra: str) -> dict[str, dict]:
    return {r["name"]: r for r in _compared(repo, measure, *extra)["regimes"]}


@pytest.fixture(scope="module")
def instructions(repo: GitRepo) -> dict[str, Any]:
    """`compare c1 c2 --measure instructions --regime work`, once for the module (12
    callgrind processes): the comparison test reads it, and a bisection of the same
    commits reuses it as its confirm step."""
    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed")
    return _compared(repo, "instructions", "--regime", "work")


@pytest.mark.slow
@pytest.mark.timeout(900)  # 12 callgrind processes: minutes on a loaded 2-core VM
@needs_valgrind
def test_compare_instructions_regressed(repo: GitRepo, instructions: dict[str, Any]) -> None:
    # One regime only: A/A agreement is checked by the `run` test above, more cheaply.
    rows = {r["name"]: r for r in instructions["regimes"]}
    assert rows["work"]["verdict"] == "regressed", rows["work"]["reason"]
    assert rows["work"]["unit"] == "instructions/op"
    assert len(rows["work"]["base_values"]) == 3
    assert 1.5 < rows["work"]["change"] + 1 < 2.2  # twice the squarings, more appends
    # Where the instructions moved: each side's first process's call graph, N/2N subtracted.
    work = rows["work"]
    found = work["artifacts"]
    assert {Path(found[k]).name for k in found} == {
        "diff.svg",
        "diff-reverse.svg",
        "functions.json",
    }
    moved = json.loads(Path(found["instructions_functions"]).read_text())
    # The graph sums to exactly that process's value: the same two callgrind runs.
    assert moved["before_total"] == pytest.approx(work["base_values"][0][0], rel=1e-9)
    assert moved["after_total"] == pytest.approx(work["head_values"][0][0], rel=1e-9)
    top = moved["functions"][0]
    assert top["after_self"] - top["before_self"] > 0.1 * (
        moved["after_total"] - moved["before_total"]
    )
    assert "instructions per op" in Path(found["instructions_diff_flamegraph"]).read_text()
    table = run_cli("compare", "c1", "c2", "--from-store", cwd=repo.path)
    assert "instructions/op" in table.stdout
    assert "Where the instructions moved in work" in table.stdout, table.stdout
    assert f"+{top['after_self'] - top['before_self']:,.0f}  {top['function']}" in table.stdout
    report = run_cli("report", "--output", str(repo.path / "r.html"), cwd=repo.path)
    assert report.returncode == 0, report.stderr
    page = (repo.path / "r.html").read_text()
    head = page.split('id="flamegraph-table"', 1)[1].split("</thead>", 1)[0]
    assert "<th>instructions diff</th>" in head and "<th>base</th>" not in head  # no py-spy ones
    # Recomputed without --measure: still judged with the counters' own 0.5% band.
    again = run_cli("compare", "c1", "c2", "--from-store", "--format", "json", cwd=repo.path)
    data = json.loads(again.stdout)
    assert data["threshold"] == 0.005 and data["settings"]["measure"] == "instructions"


@pytest.mark.slow
@pytest.mark.timeout(900)  # 6 more callgrind processes (the verification) and py-spy
@pytest.mark.skipif(shutil.which("py-spy") is None, reason="py-spy is not installed")
@needs_valgrind
def test_bisect_profile_adds_callgrind_differential_of_the_verified_ends(
    repo: GitRepo, instructions: dict[str, Any]
) -> None:
    """`bisect --measure instructions --profile` on c1..c2: the confirm reuses the stored
    comparison above (a newer recomputed one does not hide it), the verification measures
    the same pair anew, and callgrind's differential is read from the verification."""
    shas = [repo.git("rev-parse", tag) for tag in ("c1", "c2")]
    args = ["bisect", "c1", "c2", "-r", "work", "--measure", "instructions"]
    proc = run_cli(*args, "--profile", "--profile-duration", "2", "--format", "json", cwd=repo.path)
    assert proc.returncode == 0, proc.stderr
    (b,) = json.loads(proc.stdout)["bisections"]
    assert b["outcome"] == "culprit" and b["culprit"]["sha"] == shas[1], proc.stdout
    confirm = next(s for s in b["steps"] if s["kind"] == "confirm")
    assert confirm["comparisons"] == [instructions["id"]], proc.stderr
    verify = next(s for s in b["steps"] if s["kind"] == "verify")
    assert verify["rounds"] == 3  # a counter's verification: no more rounds than its steps
    assert verify["comparisons"] != confirm["comparisons"]
    link = b["callgrind"]
    assert link["error"] == "", link
    assert (link["before"]["sha"], link["after"]["sha"]) == (shas[0], shas[1])
    assert link["source"].startswith(f"comparison {verify['comparisons'][-1]} (the verification")
    table = json.loads(Path(link["files"]["functions_json"]).read_text())
    assert table["after_total"] > 1.5 * table["before_total"]  # twice the squarings
    top = table["functions"][0]  # the interpreter's loop: callgrind sees C functions
    moved = top["after_self"] - top["before_self"]
    assert moved > 0.1 * (table["after_total"] - table["before_total"])
    assert "instructions per op" in Path(link["files"]["diff_svg"]).read_text()
    assert Path(link["files"]["diff_reverse_svg"]).is_file()
    assert b["profile"]["error"] == "" and Path(b["profile"]["files"]["diff_svg"]).is_file()
    assert (b["profile"]["seconds"], link["seconds"]) == (2, 0)  # py-spy's length; callgrind's none
    # The re-run resumes: nothing measured, both differentials shown from the record.
    again = run_cli(*args, cwd=repo.path)
    assert again.returncode == 0, again.stderr
    assert "reused" in again.stderr and "profile:" not in again.stderr
    out = again.stdout
    assert f"callgrind differential {shas[0][:10]} → {shas[1][:10]} (self instructions/op" in out
    assert f"from comparison {verify['comparisons'][-1]} (the verification" in out
    assert f"\n  +{moved:,.0f} {top['function']}" in out, out  # indented, one line
    assert "py-spy differential" in out and link["files"]["diff_svg"] in out


def test_a_recomputed_counter_comparison_keeps_its_band() -> None:
    from perfctl.jobs.recompute import _as_measured
    from perfctl.jobs.settings import settings_for
    from perfctl.model import Comparison, Machine, RefInfo

    machine = Machine("m", "cpu", 2, 2**30, "6", "none", "3.11")
    source = Comparison("id", "now", RefInfo("a", "1" * 40), RefInfo("b", "2" * 40), machine,
                        (), settings={"measure": "instructions"}, threshold=0.005)  # fmt: skip
    plain = settings_for()  # what `compare A B --from-store` parses
    assert plain.threshold == 0.01  # stats.band.DEFAULT_BAND
    kept = _as_measured(plain, source)
    assert kept.threshold == 0.005 and kept.schedule.measure == "instructions"
    asked = settings_for(measure="instructions", threshold=0.01)
    assert _as_measured(asked, source).threshold == 0.01  # --measure given: the flags win
    assert _as_measured(settings_for(threshold=0.03), source).threshold == 0.03  # --threshold
    timed = Comparison("id", "now", source.base, source.head, machine, (), threshold=0.02)
    assert _as_measured(plain, timed) is plain


@pytest.mark.slow
def test_compare_memory_detects_one_more_block_per_op(repo: GitRepo) -> None:
    rows = _compare(repo, "memory")
    work = rows["work"]
    assert work["verdict"] == "regressed", work["reason"]
    assert work["metrics_base"]["alloc_blocks_per_op"] == 1.0
    assert work["metrics_head"]["alloc_blocks_per_op"] == 2.0
    assert rows["steady"]["verdict"] == "no change", rows["steady"]["reason"]
    # max_peak: hoard keeps nothing (no change) but its peak is over its declared limit.
    hoard = rows["hoard"]
    assert hoard["verdict"] == "no change" and hoard["max_peak"] == 64_000
    assert hoard["metrics_head"]["peak_traced_bytes"] > 790_000
    assert hoard["over_limit"].endswith("kB is over max_peak 64 kB"), hoard["over_limit"]
    assert rows["steady"]["over_limit"] == "" and rows["steady"]["max_peak"] is None
    # --fail-on-regression enforces it (re-decided from the store: nothing measured).
    gate = run_cli(
        "compare", "c1", "c2", "--from-store", "--regime", "hoard", "--fail-on-regression",
        cwd=repo.path,
    )  # fmt: skip
    assert gate.returncode == 1, gate.stderr
    assert "is over max_peak 64 kB (the regime's memory limit)" in gate.stdout + gate.stderr
    quiet = run_cli("compare", "c1", "c2", "--from-store", "--regime", "hoard", cwd=repo.path)
    assert quiet.returncode == 0, quiet.stderr


@pytest.mark.slow
def test_compare_several_signals_one_verdict_each(repo: GitRepo) -> None:
    # Memory and time (no valgrind, so quick): each in its own processes and comparison.
    proc = run_cli(
        "compare", "c1", "c2", "--measure", "memory,time", "--fast", "--regime", "work",
        "--format", "json", "--fail-on-regression", cwd=repo.path,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr  # gated: work regressed
    data = json.loads(proc.stdout)
    assert data["kind"] == "perfctl-signals" and data["signals"] == ["memory", "time"]
    memory, time = data["comparisons"]
    assert (memory["settings"]["measure"], time["settings"]["measure"]) == ("memory", "time")
    assert memory["settings"]["signals_group"] == time["settings"]["signals_group"]
    assert memory["base_run"] != time["base_run"]  # measured apart: own runs, own processes
    assert (memory["threshold"], time["threshold"]) == (0.005, 0.01)  # each its own band
    (work,) = data["regimes"]
    # One more kept object per call, and twice the squarings: both signals see it.
    assert work["verdicts"] == {"memory": "regressed", "time": "regressed"}, work
    assert work["flagged_by"] == ["memory", "time"] and work["note"] is None
    # Both comparisons are stored: each can be reported and re-decided on its own.
    again = run_cli("compare", "c1", "c2", "--from-store", "--comparison", memory["id"],
                    "--format", "json", cwd=repo.path)  # fmt: skip
    assert json.loads(again.stdout)["regimes"][0]["verdict"] == "regressed", again.stderr
    bad = run_cli("compare", "c1", "c2", "--measure", "time,memory", "--from-store", cwd=repo.path)
    assert bad.returncode == 2 and "Error: --from-store takes one signal at a time" in bad.stderr
    assert "Traceback" not in bad.stderr
    typo = run_cli("compare", "c1", "c2", "--measure", "time,cycles", cwd=repo.path)
    assert typo.returncode == 2 and "Hint: for example --measure time" in typo.stderr


@pytest.mark.parametrize(
    ("given", "size"),
    [(4096, 4096), ("24MB", 24_000_000), ("24 MiB", 24 * 2**20), ("1.5kB", 1500), ("7", 7),
     ("2 GiB", 2 * 2**30)],
)  # fmt: skip
def test_max_peak_sizes(given: int | str, size: int) -> None:
    from perfctl.regimes.api import parse_size

    assert parse_size(given) == size


@pytest.mark.parametrize("bad", ["24 MBs", "", "-3MB", 0, "0kB", 2.5, True, "MB"])
def test_max_peak_refuses_what_is_not_a_size(bad: object) -> None:
    from perfctl.regimes.api import parse_size

    with pytest.raises(ValueError, match="max_peak"):
        parse_size(bad)  # type: ignore[arg-type]


def test_limits_are_checked_on_memory_runs_only_and_gate() -> None:
    from dataclasses import replace

    from perfctl.jobs.ci import gate_exit_code
    from perfctl.jobs.results import with_limits
    from perfctl.model import OK, Comparison, Machine, RefInfo, RegimeResult
    from perfctl.stats import verdicts

    def compare(peak: float, measure: str) -> Comparison:
        sides = {
            side: RegimeResult("r", "f", OK, processes=((3.0,),) * 3, unit="blocks/op",
                               metrics={"peak_traced_bytes": peak}, max_peak=1000)
            for side in ("base", "head")
        }  # fmt: skip
        rows = verdicts.decide_all({"r": sides}, threshold=0.005, alpha=0.05)
        machine = Machine("m", "cpu", 2, 2**30, "6", "none", "3.11")
        c = Comparison("id", "now", RefInfo("a", "1" * 40), RefInfo("b", "2" * 40), machine,
                       tuple(rows), settings={"measure": measure})  # fmt: skip
        return with_limits(c)

    over = compare(1500.0, "memory")
    assert over.regimes[0].over_limit == "peak traced memory 1.5 kB is over max_peak 1 kB"
    assert over.warnings == ("r: peak traced memory 1.5 kB is over max_peak 1 kB "
                             "(the regime's memory limit)",)  # fmt: skip
    assert gate_exit_code(over, fail_on_regression=True) == 1
    assert gate_exit_code(over, fail_on_regression=False) == 0
    under = compare(900.0, "memory")
    assert under.warnings == () and gate_exit_code(under, fail_on_regression=True) == 0
    timed = compare(1500.0, "time")  # (a time run has no peak; the warning says so)
    assert "max_peak of r not checked" in timed.warnings[-1]
    assert replace(timed, regimes=()).warnings == timed.warnings


def test_tables_name_the_unit_and_the_test() -> None:
    from dataclasses import replace

    from perfctl.model import OK, Comparison, Machine, RefInfo, RegimeResult
    from perfctl.render.tables import format_compare_markdown
    from perfctl.stats.verdicts import decide_all

    sides = {
        s: RegimeResult("r", "f", OK, processes=((v,),) * 3, unit="instructions/op")
        for s, v in (("base", 12345.0), ("head", 24690.0))
    }
    row = decide_all({"r": sides}, threshold=0.005, alpha=0.05)[0]
    assert row.verdict == "regressed" and row.unit == "instructions/op"
    # A band the regime declares is for its time: counts keep theirs (+0.6%: beyond 0.5%).
    declared = {s: replace(r, threshold=0.1, processes=((v,),) * 3)
                for (s, r), v in zip(sides.items(), (1000.0, 1006.0), strict=True)}  # fmt: skip
    counted = decide_all({"r": declared}, threshold=0.005, alpha=0.05)[0]
    assert (counted.verdict, counted.threshold) == ("regressed", None)
    machine = Machine("m", "cpu", 2, 2**30, "6", "none", "3.11")
    c = Comparison(
        "id", "now", RefInfo("a", "1" * 40), RefInfo("b", "2" * 40), machine, (row,),
        settings={"measure": "instructions"}, threshold=0.005,
    )  # fmt: skip
    md = format_compare_markdown(c)
    assert "| r | 12,345 instructions/op | 24,690 instructions/op | +100.0%" in md
    assert "Welch's t on per-process instructions counts" in md and "±0.5%" in md
    from perfctl.render.html_report import comparison_context

    html_row = comparison_context(c, Path("."), Path("."))["rows"][0]
    assert (html_row["base"], html_row["head"]) == (
        "12,345 instructions/op",
        "24,690 instructions/op",
    )


def test_a_time_run_against_a_counter_run_is_not_compared() -> None:
    from perfctl.model import OK, RegimeResult
    from perfctl.stats.verdicts import decide_all

    base = RegimeResult("r", "f", OK, processes=((1e-6,),) * 3)
    head = RegimeResult("r", "f", OK, processes=((5000.0,),) * 3, unit="instructions/op")
    row = decide_all({"r": {"base": base, "head": head}}, threshold=0.02, alpha=0.05)[0]
    assert row.verdict == "failed"
    assert row.reason == "base measured s, head instructions/op: not comparable"


def test_counter_settings_band_rounds_and_pairing() -> None:
    from perfctl.config import Config
    from perfctl.errors import UsageError
    from perfctl.jobs.compare import settings_for

    config = Config(root=Path("."), install=False)
    s = settings_for(config=config, measure="instructions")
    assert (s.threshold, s.schedule.rounds, s.schedule.measure) == (0.005, 3, "instructions")
    assert settings_for(config=config, measure="memory", threshold=0.01, rounds=5).threshold == 0.01
    assert settings_for(config=config).threshold == 0.01  # wall time keeps its ±1% band
    with pytest.raises(UsageError, match="own processes"):
        settings_for(config=config, measure="instructions", pairing="same-process")


# What a counter worker imports runs ~50x slower under callgrind, in every process.
HEAVY = ("dataclasses", "inspect", "typing", "hashlib", "argparse", "traceback", "json")


@pytest.mark.cli  # a fresh interpreter: this one has imported everything
def test_the_counter_worker_imports_stay_light(tmp_path: Path) -> None:
    import subprocess

    (tmp_path / "regimes.py").write_text(
        "from perfctl import regime\n\n@regime\ndef r():\n    return lambda: None\n"
    )
    probe = (
        "import sys\n"
        "from perfctl.measure.workers import counters\n"
        "from perfctl.regimes import loader\n"
        f"defs = loader.load_files([__import__('pathlib').Path({str(tmp_path / 'regimes.py')!r})])\n"
        "with loader.open_regime(*loader.find(defs, 'r')) as instance:\n"
        "    counters.timed_loop(instance.run, 2)\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[]\n"


def test_the_counter_worker_refuses_a_command_line_perfctl_would_not_write() -> None:
    from perfctl.measure.workers.counters import parse_args

    good = ["--perfctl-regime", "r", "--perfctl-files", "f.py", "--mode", "instructions",
            "--loops", "008"]  # fmt: skip
    assert parse_args(good)["--loops"] == "008"
    for bad in (good[:-1], [*good, "--extra", "1"], good[:-2], good[:5] + ["cycles"] + good[6:],
                [*good[:5], "memory", *good[6:]]):  # fmt: skip
        with pytest.raises(SystemExit):
            parse_args(bad)
