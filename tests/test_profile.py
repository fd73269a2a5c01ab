"""End-to-end tests of `perfctl profile` with the real py-spy and real subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from perfctl.config import load_config
from perfctl.errors import ProfileFailed
from perfctl.jobs import profile as profiling
from perfctl.model import RefInfo
from perfctl.profile import hotspots, pyspy, recording, stacks
from tests.conftest import GitRepo, default_signals, run_cli

pytestmark = pytest.mark.slow

REGIMES = """
import os
import time

from perfctl import regime


def hot():
    t = 0
    for i in range(20000):
        t += i * i
    return t


def cold():
    return sum(range(500))


@regime(ops=10)
def hotloop():
    def run():
        hot()
        cold()
    return run


@regime
def boom():
    def run():
        raise ValueError("kaboom")
    return run


@regime
def flaky():
    if os.environ.get("PERFCTL_TEST_BOOM"):
        raise RuntimeError("set-up failed on purpose")
    return hot


@regime
def sleepy():
    return lambda: time.sleep(0.25)


@regime
def hang():
    return lambda: time.sleep(3600)


def parent_hot():
    # A third of each call, so even a loaded machine samples it without --subprocesses.
    t = 0
    for i in range(100000):
        t += i * i
    return t


def child_hot(n):
    t = 0
    for i in range(n):
        t += i * i
    return t


@regime
def pool():
    import multiprocessing

    workers = multiprocessing.get_context("fork").Pool(1)

    def run():
        parent_hot()
        workers.apply(child_hot, (200000,))

    yield run
    workers.close()
    workers.join()
"""

PYPROJECT = """
[project]
name = "demo"
version = "0"

[tool.perfctl]
regimes = ["bench/regimes.py"]
inherit_environ = ["PERFCTL_TEST_BOOM"]  # the set-up failure switch reaches the regime
"""

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project (not a git repo) with a regimes file of known hot spots."""
    root = tmp_path / "proj"
    (root / "bench").mkdir(parents=True)
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "bench" / "regimes.py").write_text(REGIMES)
    return root


def _err(r: subprocess.CompletedProcess[str]) -> list[str]:
    return [ln for ln in r.stderr.splitlines() if ln.startswith(("Error:", "Hint:"))]


def _titles_and_fills(svg: Path) -> dict[str, str]:
    out = {}
    for g in ET.parse(svg).getroot().iter(f"{SVG}g"):
        title, rect = g.find(f"{SVG}title"), g.find(f"{SVG}rect")
        assert title is not None and rect is not None
        out[str(title.text).splitlines()[0]] = rect.get("fill", "")
    return out


# -- one ref --------------------------------------------------------------------


def test_profile_puts_the_hot_function_on_top(project: Path) -> None:
    r = run_cli("profile", "hotloop", "--duration", "1", "--rate", "200", cwd=project)
    assert r.returncode == 0, r.stderr
    folder = project / "reports" / "profiles" / "hotloop" / "WORKTREE"
    for name in ("flame.svg", "profile.speedscope.json", "stacks.collapsed", "summary.json"):
        assert (folder / name).is_file()
        assert f"reports/profiles/hotloop/WORKTREE/{name}" in r.stdout
    # perfctl made reports/: git must not see it (WORKTREE would turn dirty).
    assert (project / "reports" / ".gitignore").read_text(encoding="utf-8").endswith("\n*\n")
    s = profiling.load_summary(folder)
    assert (s.top_self[0].function, s.top_self[0].file) == ("hot", "bench/regimes.py")
    assert s.top_self[0].share > 0.6
    assert s.ops == s.calls * 10 and s.settings["rate_hz"] == 200
    assert s.tree is not None and s.tree.function == "hotloop.<locals>.run"
    assert s.tree.children[0].function == "hot"
    # Per-op normalisation: the entry point carries (almost) all of the time per op.
    assert s.tree.per_op_s == pytest.approx(s.per_op_s, rel=0.1)
    assert s.per_op_s == pytest.approx((s.elapsed_s - s.wait_s) / s.ops)
    assert "bench/regimes.py:hot" in r.stdout
    tree = r.stdout.split("Call tree under the regime's entry point\n")[1]
    assert tree.startswith("hotloop.<locals>.run")
    assert "hot (bench/regimes.py) [" in tree
    titles = _titles_and_fills(folder / "flame.svg")
    assert "hot (bench/regimes.py)" in titles
    collapsed = (folder / "stacks.collapsed").read_text()
    assert "process " not in collapsed and "hot (bench/regimes.py) " in collapsed


def test_json_format_prints_the_summary_only(project: Path) -> None:
    r = run_cli("profile", "hotloop", "--duration", "0.5", "--format", "json", cwd=project)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    saved = project / "reports" / "profiles" / "hotloop" / "WORKTREE" / "summary.json"
    assert data == json.loads(saved.read_text())
    assert data["schema"] == 1 and data["top_self"][0]["where"] == "bench/regimes.py:hot"


def test_subprocess_samples_appear_only_with_subprocesses(project: Path) -> None:
    config = load_config(project)
    target = profiling.resolve_target(config, "WORKTREE")
    with_kids = profiling.profile_regime(config, "pool", target, duration=1.5)
    assert "child_hot (bench/regimes.py)" in with_kids.collapsed.read_text()
    assert "child_hot" in {h.function for h in with_kids.summary.top_self}
    assert "[subprocess]" in {h.function for h in with_kids.summary.top_inclusive}
    # The child's branch is a dozen wrapper frames deep (worker, loader, multiprocessing):
    # the tree reaches its function, and the mark sits on the top self-time function.
    assert with_kids.summary.tree is not None
    tree = "\n".join(hotspots.format_tree(with_kids.summary.tree))
    assert "child_hot (bench/regimes.py)" in tree
    marked = [ln for ln in tree.splitlines() if ln.endswith("← most self time")]
    assert len(marked) == 1 and f"{with_kids.summary.top_self[0].function} (" in marked[0]
    without = profiling.profile_regime(config, "pool", target, duration=1.5, subprocesses=False)
    assert "child_hot" not in without.collapsed.read_text()
    assert "parent_hot (bench/regimes.py)" in without.collapsed.read_text()


# -- two refs -----------------------------------------------------------------------

# cold is small beside hot, so even a busy machine cannot make its change the biggest.
SUBJECT = """
def hot():
    t = 0
    for _ in range({passes}):
        for i in range(20000):
            t += i * i
    return t


def cold():
    t = 0
    for i in range(4000):
        t += i * i
    return t
"""

PAIR_REGIMES = """
from perfctl import regime


@regime
def work():
    from subject import cold, hot

    def run():
        hot()
        cold()

    return run
"""


def _side(tmp: Path, name: str, passes: int) -> object:
    from perfctl.envs import Target

    folder = tmp / name
    folder.mkdir()
    (folder / "subject.py").write_text(SUBJECT.format(passes=passes))
    ref = RefInfo(name, name[0] * 40)
    return Target(ref, Path(sys.executable), folder, {"PYTHONPATH": str(folder)})


def test_profile_pair_shows_the_slower_function_growing(project: Path) -> None:
    (project / "bench" / "regimes.py").write_text(PAIR_REGIMES)
    config = load_config(project)
    before = _side(project.parent, "before", passes=1)
    after = _side(project.parent, "after", passes=3)
    d = profiling.profile_pair(config, "work", before, after, duration=1.5, rate=200)  # type: ignore[arg-type]
    top = d.diff.functions[0]
    assert (top.function, top.file, top.change) == ("hot", "subject.py", "grew")
    # 3x the work: more time per op (how much more depends on the machine's load).
    assert top.after_self_per_op_s > top.before_self_per_op_s
    nodes = {n.path[-1]: n for n in d.diff.nodes}
    assert nodes["hot (subject.py)"].change == "grew"
    fill = nodes["hot (subject.py)"].fill
    assert fill.startswith("#ff") and int(fill[5:7], 16) < 0xAA  # clearly red
    steps = d.diff.steps
    total = d.diff.after.per_op_s - d.diff.before.per_op_s
    assert sum(s.delta_per_op_s for s in steps) == pytest.approx(total, rel=0.02)
    # The biggest step is hot's time: as a child of the entry, or as the entry's own self
    # time when `cold` falls under the 5% floor and the entry descends into `hot`.
    assert "hot (subject.py)" in steps[0].path, steps[0]
    assert _titles_and_fills(d.diff_svg)["hot (subject.py)"] == fill
    assert "hot (subject.py)" in _titles_and_fills(d.diff_reverse_svg)
    assert profiling.load_diff(d.diff_json) == d.diff
    assert d.directory.name == "before-vs-after"
    assert set(d.artifacts()) >= {"diff_flamegraph", "head_flamegraph", "base_flamegraph"}


def test_vs_between_git_refs_end_to_end(git_repo: GitRepo) -> None:
    from perfctl import envs

    if not hasattr(envs, "prepare_target"):
        pytest.skip("perfctl.envs.prepare_target is not available yet")
    git_repo.write("pyproject.toml", PYPROJECT + 'install = false\npythonpath = ["src"]\n')
    git_repo.write(".gitignore", ".perfctl/\nreports/\n")
    git_repo.write("bench/regimes.py", PAIR_REGIMES)
    git_repo.write("src/subject.py", SUBJECT.format(passes=1))
    git_repo.commit("base")
    git_repo.tag("base")
    git_repo.write("src/subject.py", SUBJECT.format(passes=3))
    git_repo.commit("hot got three times slower")
    r = run_cli(
        "profile",
        "work",
        "--vs",
        "base",
        "--ref",
        "HEAD",
        "--duration",
        "1",
        "--rate",
        "200",
        "--format",
        "json",
        cwd=git_repo.path,
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    top = data["diff"]["functions"][0]
    assert (top["where"], top["change"]) == ("subject.py:hot", "grew")
    assert data["before"]["ref"]["ref"] == "base" and data["after"]["ref"]["ref"] == "HEAD"
    assert Path(data["diff"]["files"]["diff_svg"]).is_file()
    # --vs from the default WORKTREE (an uncommitted edit): it gets a built environment of
    # its own, like the other side, instead of perfctl's interpreter.
    envs_dir = git_repo.path / ".perfctl" / "envs"
    before = {p.name for p in envs_dir.iterdir()}
    git_repo.write("src/subject.py", SUBJECT.format(passes=6))
    r = run_cli(
        "profile", "work", "--vs", "HEAD", "--duration", "1", "--rate", "200",
        "--format", "json", cwd=git_repo.path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["after"]["ref"]["ref"] == "WORKTREE" and data["after"]["ref"]["dirty"]
    assert len({p.name for p in envs_dir.iterdir()} - before) == 1
    top = data["diff"]["functions"][0]
    assert (top["where"], top["change"]) == ("subject.py:hot", "grew")


def test_a_profile_diff_of_the_compared_commits_is_linked_into_the_report(
    git_repo: GitRepo,
) -> None:
    git_repo.write("pyproject.toml", PYPROJECT + 'install = false\npythonpath = ["src"]\n')
    git_repo.write(".gitignore", ".perfctl/\nreports/\n")
    git_repo.write("bench/regimes.py", PAIR_REGIMES)
    git_repo.write("src/subject.py", SUBJECT.format(passes=1))
    git_repo.commit("base")
    git_repo.tag("base")
    git_repo.write("src/subject.py", SUBJECT.format(passes=3))
    git_repo.commit("hot got three times slower")
    r = run_cli("compare", "base", "HEAD", "--fast", "--format", "json", cwd=git_repo.path)
    assert r.returncode == 0, r.stderr
    cid = json.loads(r.stdout)["id"]
    report = git_repo.path / "reports" / f"comparison-{cid}.html"
    r = run_cli("report", cid, cwd=git_repo.path)
    assert r.returncode == 0, r.stderr
    hint = "No profile artefacts for this comparison. Run <code>perfctl profile REGIME --ref "
    assert hint in report.read_text(encoding="utf-8")
    # The hint's command, as a user would run it (other ref spellings resolve to the same
    # commits): its diff is linked, and the hint is gone.
    r = run_cli(
        "profile", "work", "--ref", "HEAD", "--vs", "base", "--duration", "1", "--rate", "200",
        cwd=git_repo.path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = run_cli("report", cid, cwd=git_repo.path)
    assert r.returncode == 0, r.stderr
    html = report.read_text(encoding="utf-8")
    assert "No profile artefacts" not in html
    assert "profiles/work/base-vs-" in html and "diff.svg" in html
    assert "profiles/work/base/flame.svg" in html
    # A diff of other commits is not this comparison's.
    r = run_cli("compare", "base", "base", "--fast", "--format", "json", cwd=git_repo.path)
    assert r.returncode == 0, r.stderr
    r = run_cli("report", json.loads(r.stdout)["id"], cwd=git_repo.path)
    assert r.returncode == 0, r.stderr
    assert "No profile artefacts" in Path(r.stdout.strip()).read_text(encoding="utf-8")


# -- failures -----------------------------------------------------------------------


def _venv_without_py_spy(tmp: Path) -> Path:
    """A real virtual environment sharing perfctl's packages but not its bin folder."""
    prefix = Path(sys.prefix)
    if not (prefix / "pyvenv.cfg").is_file():
        pytest.skip("perfctl must run from a virtual environment to build one without py-spy")
    venv = tmp / "no-py-spy"
    (venv / "bin").mkdir(parents=True)
    shutil.copy(prefix / "pyvenv.cfg", venv / "pyvenv.cfg")
    (venv / "lib").symlink_to(prefix / "lib")
    (venv / "bin" / "python").symlink_to(Path(sys.executable).resolve())
    return venv / "bin" / "python"


def test_missing_py_spy_is_an_error_with_a_hint(project: Path, tmp_path: Path) -> None:
    python = _venv_without_py_spy(tmp_path)
    path = os.pathsep.join([str(python.parent), "/usr/bin", "/bin"])
    if shutil.which("py-spy", path=path):
        pytest.skip("py-spy is installed system-wide")
    env = {k: v for k, v in os.environ.items() if k not in ("PERFCTL_PY_SPY", "PYTHONPATH")}
    r = subprocess.run(
        [str(python), "-m", "perfctl", "profile", "hotloop"],
        cwd=project,
        env={**env, "PATH": path},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 3
    assert _err(r) == [
        f"Error: py-spy is not installed (not beside {python} and not on PATH)",
        "Hint: install it where perfctl runs (`pip install py-spy`), or set PERFCTL_PY_SPY "
        "to its path",
    ]
    assert not (project / "reports").exists()


def test_py_spy_override_must_exist(project: Path) -> None:
    r = run_cli("profile", "hotloop", cwd=project, env={"PERFCTL_PY_SPY": "/nowhere/py-spy"})
    assert r.returncode == 3
    assert _err(r)[0] == "Error: PERFCTL_PY_SPY=/nowhere/py-spy is not an executable py-spy"


def test_ptrace_refusal_is_profiler_unavailable(project: Path, tmp_path: Path) -> None:
    # A stand-in printing py-spy's own refusal text (its exit path for EPERM), as
    # a container without CAP_SYS_PTRACE makes the real one do.
    shim = tmp_path / "py-spy"
    shim.write_text(
        "#!/bin/sh\ncat >&2 <<'EOF'\nPermission Denied: Try running again with "
        "elevated permissions by going 'sudo env \"PATH=$PATH\" !!'\nEOF\nexit 1\n"
    )
    shim.chmod(0o755)
    r = run_cli(
        "profile", "hotloop", "--duration", "0.5", cwd=project, env={"PERFCTL_PY_SPY": str(shim)}
    )
    assert r.returncode == 3
    err = _err(r)
    assert err[0].startswith("Error: py-spy may not read the worker's memory (Permission Denied")
    assert "CAP_SYS_PTRACE" in err[1] and "ptrace_scope" in err[1]
    assert not (project / "reports" / "profiles" / "hotloop").exists()


def test_failing_regime_leaves_no_profile(project: Path) -> None:
    r = run_cli("profile", "boom", "--duration", "0.5", cwd=project)
    assert r.returncode == 3
    log = project / ".perfctl" / "logs" / "profile-boom-WORKTREE.log"
    assert _err(r) == [
        "Error: regime `boom` failed under the profiler: ValueError: kaboom",
        f"Hint: fix the regime (its full traceback is in the log); log: {log}",
    ]
    assert "Traceback" in log.read_text() and "kaboom" in log.read_text()
    assert not (project / "reports" / "profiles" / "boom").exists()


def test_failed_attempt_keeps_the_previous_finished_profile(project: Path) -> None:
    assert run_cli("profile", "flaky", "--duration", "0.3", cwd=project).returncode == 0
    folder = project / "reports" / "profiles" / "flaky"
    before = (folder / "WORKTREE" / "summary.json").read_text()
    r = run_cli(
        "profile", "flaky", "--duration", "0.3", cwd=project, env={"PERFCTL_TEST_BOOM": "1"}
    )
    assert r.returncode == 3
    assert "RuntimeError: set-up failed on purpose" in _err(r)[0]
    assert (folder / "WORKTREE" / "summary.json").read_text() == before
    assert sorted(p.name for p in folder.iterdir()) == ["WORKTREE"]  # no temporary left


def test_unknown_regime_names_close_matches(project: Path) -> None:
    r = run_cli("profile", "hotlop", cwd=project)
    assert r.returncode == 2
    assert _err(r) == ["Error: unknown regime `hotlop`", "Hint: did you mean: hotloop?"]


def test_zero_samples_in_the_regime_is_an_error(project: Path) -> None:
    r = run_cli("profile", "sleepy", "--duration", "0.5", cwd=project)
    assert r.returncode == 3
    err = _err(r)[0]
    assert err.startswith("Error: ") and "samples of `sleepy` inside its timed loop, too few" in err
    assert "--idle" in _err(r)[1]
    assert not (project / "reports" / "profiles" / "sleepy").exists()


def test_a_hanging_regime_is_stopped_and_fails(project: Path, monkeypatch) -> None:
    monkeypatch.setattr(recording, "SETUP_GRACE_S", 1.0)
    config = load_config(project)
    target = profiling.resolve_target(config, "WORKTREE")
    started = time.monotonic()
    with pytest.raises(ProfileFailed, match="did not finish within 2 s"):
        profiling.profile_regime(config, "hang", target, duration=0.5)
    assert time.monotonic() - started < 30
    assert not (project / "reports" / "profiles" / "hang").exists()


def test_sigint_stop_keeps_the_profile_and_the_status(project: Path, tmp_path: Path) -> None:
    out, status = tmp_path / "p.json", tmp_path / "status.json"
    worker = [
        sys.executable,
        str(recording.WORKER),
        str(project / "bench" / "regimes.py"),
        "hotloop",
        "30",
        str(status),
    ]
    argv = pyspy.command(pyspy.find_py_spy(), out, pyspy.RecordSettings(duration=30), worker)
    started = time.monotonic()
    rec = pyspy.record(
        argv, cwd=project, env=dict(os.environ), log_path=tmp_path / "log", timeout_s=1.5
    )
    assert time.monotonic() - started < 20
    assert rec.stopped == "timeout"
    data = json.loads(status.read_text())
    assert data["ok"] and data["interrupted"] and data["calls"] > 0
    assert rec.samples and rec.samples > 0
    assert stacks.load_stacks(out).total_s > 0


@pytest.mark.parametrize(
    ("sig", "code", "said"),
    [
        (signal.SIGINT, 130, "Error: interrupted\n"),  # what a terminal's Ctrl-C sends
        (signal.SIGTERM, 143, "Error: interrupted (SIGTERM)\n"),  # a CI job cancelled
    ],
)
def test_ctrl_c_keeps_a_shortened_profile(
    project: Path, sig: signal.Signals, code: int, said: str
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "perfctl", "profile", "hotloop", "--duration", "60"],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,
    )
    regime_dir = project / "reports" / "profiles" / "hotloop"
    deadline = time.monotonic() + 60
    while not list(regime_dir.glob(".WORKTREE.tmp-*/py-spy.log")):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    time.sleep(1.0)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert said in err and err.count("Error:") == 1, err  # said once, with its signal
    s = profiling.load_summary(regime_dir / "WORKTREE")
    assert s.interrupted and 0 < s.elapsed_s < 30
    assert any(w.startswith("stopped early") for w in s.warnings)
