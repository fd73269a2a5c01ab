"""History on a git branch (`perfctl sync`, `ci --history-branch`): real repos, real pushes.

Each "runner" is a fresh clone of one bare origin with its own store, as an
ephemeral CI runner would be; records move only through the branch.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from perfctl.errors import UsageError
from perfctl.git import history as branch_git
from perfctl.store.local import SqliteStore
from tests.conftest import GIT_ENV, GitRepo, run_cli
from tests.test_report import make_comparison, make_runs

BRANCH = "perfctl-data"
PYPERF = '{"version": "1.0", "benchmarks": [], "metadata": {"name": "%s"}}'


def _origin(tmp_path: Path) -> Path:
    seed = GitRepo(tmp_path / "seed")
    seed.path.mkdir()
    seed.git("init", "-q", "-b", "main")
    seed.write("pyproject.toml", '[project]\nname = "p"\nversion = "0"\n')
    seed.write(".gitignore", ".perfctl/\nreports/\n")
    seed.commit("c1")
    bare = tmp_path / "origin.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(seed.path), str(bare)], check=True)
    return bare


def _runner(tmp_path: Path, origin: Path, name: str) -> GitRepo:
    path = tmp_path / name
    subprocess.run(["git", "clone", "-q", str(origin), str(path)], check=True)
    return GitRepo(path)


def _store_runs(repo: GitRepo, first: int, count: int, comparisons: int = 0) -> list[str]:
    """Store ``count`` finished runs (with a pyperf file each) and some comparisons."""
    store = SqliteStore(repo.path / ".perfctl")
    runs = make_runs(n_runs=first + count, regimes=2)[::-1][first:]
    for run in runs:
        store.begin_run(replace(run, status="running", results=()))
        pyperf = repo.path.parent / f"{run.id}.json"
        pyperf.write_text(PYPERF % run.id)
        for result in run.results:
            store.save_result(run.id, result, pyperf)
        store.finish_run(run.id, "complete")
    for i in range(comparisons):
        store.save_comparison(replace(make_comparison(), id=f"20260301T00000{i}-{first:06d}"))
    return [r.id for r in runs]


def _branch_files(origin: Path, branch: str = BRANCH) -> list[str]:
    out = subprocess.run(
        ["git", "--git-dir", str(origin), "ls-tree", "-r", "--name-only", branch],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return out.stdout.split()


def test_two_runners_share_one_history_through_the_branch(tmp_path: Path) -> None:
    origin = _origin(tmp_path)
    a = _runner(tmp_path, origin, "a")
    first = _store_runs(a, 0, 3, comparisons=1)
    done = run_cli("sync", BRANCH, cwd=a.path)
    assert done.returncode == 0, done.stderr
    assert "pulled 0 runs and 0 comparisons" in done.stderr
    assert "pushed 3 runs and 1 comparison (commit " in done.stderr
    files = _branch_files(origin)
    assert "README.md" in files and "comparisons/20260301T000000-000000.json" in files
    assert {f"runs/{r}/run.json" for r in first} <= set(files)
    # The user's checkout is untouched: same branch, clean, no local history branch.
    assert a.git("status", "--porcelain") == "" and a.git("branch", "--show-current") == "main"
    assert BRANCH not in a.git("branch", "--list")

    b = _runner(tmp_path, origin, "b")
    second = _store_runs(b, 3, 1)
    done = run_cli("sync", BRANCH, cwd=b.path)
    assert done.returncode == 0, done.stderr
    assert "pulled 3 runs and 1 comparison" in done.stderr
    assert "pushed 1 run and 0 comparisons" in done.stderr
    again = run_cli("sync", BRANCH, cwd=b.path)
    assert "nothing new to push" in again.stderr, again.stderr

    c = _runner(tmp_path, origin, "c")  # a fresh runner reads every point
    done = run_cli("sync", BRANCH, "--pull-only", cwd=c.path)
    assert done.returncode == 0 and "pulled 4 runs and 1 comparison" in done.stderr, done.stderr
    listed = run_cli("runs", cwd=c.path)
    assert all(r[:15] in listed.stdout for r in first + second), listed.stdout
    store = SqliteStore(c.path / ".perfctl")
    run = store.load_run(first[0])
    pyperf = c.path / ".perfctl" / str(run.results[0].pyperf_file)
    assert json.loads(pyperf.read_text())["metadata"]["name"] == first[0]
    report = run_cli("report", "--history", "-o", "h.html", cwd=c.path)
    assert report.returncode == 0, report.stderr
    assert (c.path / "h.html").stat().st_size > 1000
    assert len(_branch_files(origin)) == len(files) + 3  # b's run.json + 2 pyperf files


def test_concurrent_pushes_all_land(tmp_path: Path) -> None:
    """Four runners push at once; the losers of each race refetch and retry, nothing is lost."""
    origin = _origin(tmp_path)
    runners = [_runner(tmp_path, origin, f"r{i}") for i in range(4)]
    ids = [_store_runs(r, 2 * i, 2) for i, r in enumerate(runners)]
    go = tmp_path / "go"
    # Each process waits for the same file, so the four pushes really race.
    start = (
        "import pathlib, runpy, sys, time\n"
        f"while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.005)\n"
        "sys.argv = ['perfctl', 'sync', " + repr(BRANCH) + "]\n"
        "runpy.run_module('perfctl', run_name='__main__')\n"
    )
    env = {**GIT_ENV, "PATH": __import__("os").environ["PATH"]}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", start],
            cwd=r.path,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        for r in runners
    ]
    time.sleep(1.5)  # let them all import and wait
    go.touch()
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], [o[1] for o in outs]
    files = set(_branch_files(origin))
    assert {f"runs/{r}/run.json" for group in ids for r in group} <= files
    log = subprocess.run(
        ["git", "--git-dir", str(origin), "log", "--format=%s", BRANCH],
        check=True, capture_output=True, text=True,
    ).stdout.splitlines()  # fmt: skip
    assert log.count("perfctl: add 2 runs and 0 comparisons") == 4  # one commit each, no force


def _plant(origin: Path, tmp_path: Path, files: dict[str, str]) -> None:
    """Push a hand-written commit to the history branch (what a hostile writer could do)."""
    work = _runner(tmp_path, origin, "planter")
    work.git("checkout", "-q", "--orphan", BRANCH)
    work.git("rm", "-rq", "--cached", ".")
    for path, text in files.items():
        work.write(path, text)
    work.git("add", "-f", *files)
    work.git("commit", "-qm", "planted")
    work.git("push", "-q", "origin", BRANCH)


def test_bad_records_on_the_branch_are_refused_by_name(tmp_path: Path) -> None:
    origin = _origin(tmp_path)
    from perfctl.model import to_dict

    good = make_comparison()
    other = replace(good, id="20260101T000000-999999")
    run = replace(make_runs(n_runs=1, regimes=1)[0], status="complete")
    bad_types = to_dict(replace(run, id="20260101T000000-000004"))
    bad_types["ref"]["dirty"] = "x"
    nan_run = to_dict(replace(run, id="20260101T000000-000005"))
    nan_run["results"][0]["processes"] = [[0.5]]

    _plant(
        origin,
        tmp_path,
        {
            f"comparisons/{good.id}.json": json.dumps(to_dict(good)),
            "comparisons/20260101T000000-000001.json": json.dumps(to_dict(other)),
            "comparisons/20260101T000000-000002.json": "not json",
            "runs/20260101T000000-000003/run.json": '{"schema": 99}',
            # Right schema, wrong types: would break the index if it were written.
            "runs/20260101T000000-000004/run.json": json.dumps(bad_types),
            "runs/20260101T000000-000005/run.json": json.dumps(nan_run).replace("0.5", "NaN"),
            "runs/20260101T000000-000006/run.json": "[" * 100_000 + "]" * 100_000,
            "README.md": "planted",
        },
    )
    c = _runner(tmp_path, origin, "c")
    done = run_cli("sync", BRANCH, "--pull-only", cwd=c.path)
    assert done.returncode == 0, done.stderr
    assert "pulled 0 runs and 1 comparison" in done.stderr
    refused = [line for line in done.stderr.splitlines() if "refused" in line]
    assert len(refused) == 6, done.stderr
    assert "holds comparison '20260101T000000-999999'" in done.stderr
    assert "ref.dirty: expected true or false" in done.stderr
    state = c.path / ".perfctl"
    assert sorted(p.name for p in (state / "comparisons").iterdir()) == [f"{good.id}.json"]
    assert not (state / "runs").exists()
    assert "Traceback" not in done.stderr
    listed = run_cli("runs", cwd=c.path)  # the store still works
    assert listed.returncode == 0, listed.stderr


def test_a_branch_that_is_not_a_history_branch_is_refused(tmp_path: Path) -> None:
    origin = _origin(tmp_path)
    a = _runner(tmp_path, origin, "a")
    _store_runs(a, 0, 1)
    done = run_cli("sync", "main", cwd=a.path)
    assert done.returncode == 2, done.stderr
    assert "does not look like a perfctl history branch: it holds" in done.stderr
    assert "runs/" not in " ".join(_branch_files(origin, "main"))


def test_an_interrupted_pull_is_finished_and_unexportable_runs_are_named(tmp_path: Path) -> None:
    origin = _origin(tmp_path)
    a = _runner(tmp_path, origin, "a")
    ids = _store_runs(a, 0, 2)
    # A run whose pyperf file is gone cannot be pushed whole: named, not pushed.
    (a.path / ".perfctl" / "runs" / ids[1] / "pyperf").rename(a.path / "moved")
    done = run_cli("sync", BRANCH, cwd=a.path)
    assert done.returncode == 0, done.stderr
    assert "pushed 1 run and 0 comparisons" in done.stderr
    assert f"not pushed: run {ids[1]}: runs/{ids[1]}/pyperf/" in done.stderr
    # A pull killed after the pyperf files and before run.json: the next one finishes it.
    b = _runner(tmp_path, origin, "b")
    leftover = b.path / ".perfctl" / "runs" / ids[0] / "pyperf" / "stale.json"
    leftover.parent.mkdir(parents=True)
    for name in {p.name for p in (a.path / ".perfctl" / "runs" / ids[0] / "pyperf").iterdir()}:
        (leftover.parent / name).write_text("{}")
    done = run_cli("sync", BRANCH, "--pull-only", cwd=b.path)
    assert "pulled 1 run and 0 comparisons" in done.stderr, done.stderr
    run = SqliteStore(b.path / ".perfctl").load_run(ids[0])
    assert json.loads((b.path / ".perfctl" / run.results[0].pyperf_file).read_text())["metadata"]


def test_errors_are_one_line_and_never_show_credentials(tmp_path: Path) -> None:
    origin = _origin(tmp_path)
    a = _runner(tmp_path, origin, "a")
    _store_runs(a, 0, 1)
    a.git("remote", "add", "secret", "http://someone:tok3nvalue@127.0.0.1:9/x.git")
    failed = run_cli("sync", BRANCH, "--remote", "secret", cwd=a.path)
    assert failed.returncode == 3, failed.stderr
    assert (
        "\nError: could not read the history branch 'perfctl-data' of remote 'secret': fatal:"
        in failed.stderr
    )
    assert "Hint:" in failed.stderr and "Traceback" not in failed.stderr
    assert "tok3nvalue" not in failed.stdout + failed.stderr
    bad = run_cli("sync", "a..b", cwd=a.path)
    assert bad.returncode == 2 and "is not a plain git name" in bad.stderr, bad.stderr
    pg = run_cli(
        "sync", BRANCH, cwd=a.path, env={"PERFCTL_STORE_URL": "postgresql://u:pw5ecret@h/db"}
    )
    assert pg.returncode == 2 and "PostgreSQL store" in pg.stderr, pg.stderr
    assert "pw5ecret" not in pg.stdout + pg.stderr
    ci = run_cli(
        "ci", "--history-branch", BRANCH, cwd=a.path,
        env={"PERFCTL_STORE_URL": "postgresql://u:pw5ecret@h/db"},
    )  # fmt: skip
    assert ci.returncode == 2 and "PostgreSQL store" in ci.stderr, ci.stderr
    # Nothing was lost: the run is still in the local store.
    assert len(SqliteStore(a.path / ".perfctl").list_runs()) == 1


@pytest.mark.parametrize("name", ["-x", "a..b", "x.lock", "a b", "", "a//b", "/a"])
def test_names_that_could_be_options_or_odd_refs_are_refused(name: str) -> None:
    with pytest.raises(UsageError):
        branch_git.check_names("origin", name)
    with pytest.raises(UsageError):
        branch_git.check_names(name, BRANCH)


def test_credentials_are_cleaned_from_git_messages() -> None:
    said = "fatal: unable to access 'https://x-access-token:ghs_abc@github.com/o/r.git/':\n 403"
    assert branch_git.clean(said) == (
        "fatal: unable to access 'https://***@github.com/o/r.git/': 403"
    )


@pytest.mark.fresh_process  # a lock is a process's own: this one must be another
def test_sync_waits_for_the_project_lock_only_as_long_as_asked(tmp_path: Path) -> None:
    from perfctl.store.lock import project_lock

    origin = _origin(tmp_path)
    a = _runner(tmp_path, origin, "a")
    _store_runs(a, 0, 1)
    with project_lock(a.path / ".perfctl", what="a test"):
        done = run_cli("sync", BRANCH, "--lock-wait", "0.5", cwd=a.path)
    assert done.returncode == 3, done.stderr
    assert "\nError: another perfctl process" in done.stderr
    assert "gave up after 0.5 s" in done.stderr
    assert "`--lock-wait SECONDS`" in done.stderr  # sync has the flag, so the hint names it
    branches = subprocess.run(
        ["git", "--git-dir", str(origin), "branch", "--list", BRANCH],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    assert branches == ""  # nothing pushed while another process held the lock
