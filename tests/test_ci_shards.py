"""`perfctl init --ci github --shards N`: the matrix of shard jobs and the fan-in job."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from perfctl import __version__
from perfctl.errors import UsageError
from perfctl.jobs import scaffold
from perfctl.model import to_dict
from tests.conftest import run_cli
from tests.test_report import make_comparison

yaml = pytest.importorskip("yaml")


def _init(tmp_path: Path, shards: int) -> tuple[dict[Any, Any], str, dict[Any, Any]]:
    scaffold.init_project(tmp_path, "github", shards=shards)
    wf = tmp_path / ".github" / "workflows"
    text = (wf / "perfctl.yml").read_text()
    return yaml.safe_load(text), text, yaml.safe_load((wf / "perfctl-comment.yml").read_text())


def _step(job: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [s for s in job["steps"] if s.get("name") == name]
    return found


def test_sharded_workflow_has_a_matrix_and_one_fan_in_job(tmp_path: Path) -> None:
    wf, text, post = _init(tmp_path, 4)
    assert "__PERFCTL" not in text and f"pip install perfctl=={__version__}\n" in text
    assert set(wf[True]) == {"pull_request", "schedule", "workflow_dispatch"}
    shard, merge = wf["jobs"]["shard"], wf["jobs"]["merge"]
    assert shard["strategy"] == {"fail-fast": False, "matrix": {"shard": [1, 2, 3, 4]}}
    measure = _step(shard, "Compare one shard")["run"]
    assert measure.count('--shard "$SHARD/4" --shard-run "$SHARD_RUN"') == 2
    upload = _step(shard, "Upload the shard")
    assert upload["with"]["name"] == "perfctl-shard-${{ matrix.shard }}"
    assert merge["needs"] == "shard" and "!cancelled()" in merge["if"]
    assert _step(merge, "Download every shard")["with"]["pattern"] == "perfctl-shard-*"
    assert "perfctl merge shards --fail-on-regression" in _step(merge, "Merge")["run"]
    comment = _step(merge, "Comment on the pull request")
    assert "head.repo.full_name == github.repository" in comment["if"]
    # Forks: the same artefact as the unsharded workflow, for perfctl-comment.yml as it is.
    fork = _step(merge, "Upload the comparison for perfctl-comment.yml")["with"]
    assert fork["name"] == "perfctl-comment"
    assert fork["path"].split() == ["reports/ci/comparison.json", "reports/ci/pr-number.txt"]
    assert post[True]["workflow_run"]["workflows"] == [wf["name"]]
    assert merge["steps"][-1]["name"] == "Gate"
    # Pull requests never write to the shared history store.
    assert "github.event_name != 'pull_request'" in wf["env"]["PERFCTL_STORE_URL"]
    # Without one, nightly shards push to the history branch and the merge job pulls it.
    assert shard["permissions"] == {"contents": "write"}
    assert merge["permissions"] == {"contents": "write", "pull-requests": "write"}
    for job in (shard, merge):  # in PRs the token is not left in the checkout
        checkout = job["steps"][0]["with"]["persist-credentials"]
        assert checkout == "${{ github.event_name != 'pull_request' }}"
    nightly = measure.split("else", 1)[1]
    assert "history=(--history-branch perfctl-data)" in nightly and '"${history[@]}"' in nightly
    assert '[ "$EVENT_NAME" = "schedule" ] && [ -z "$PERFCTL_STORE_URL" ]' in nightly
    assert "--history-branch" not in measure.split("else", 1)[0]
    report = _step(merge, "History report")
    assert 'perfctl sync perfctl-data "${push[@]}"' in report["run"]
    assert report["if"] == "always() && github.event_name != 'pull_request'"


def test_one_shard_is_the_plain_workflow_and_bad_counts_are_refused(tmp_path: Path) -> None:
    wf, _, _ = _init(tmp_path, 1)
    assert set(wf["jobs"]) == {"compare"}
    with pytest.raises(UsageError, match="--shards takes 1 to 64"):
        scaffold.plan_init(tmp_path, "github", shards=0)
    with pytest.raises(UsageError, match="--shards only shapes CI workflows"):
        scaffold.plan_init(tmp_path, None, shards=3)
    out = run_cli("init", "--ci", "github", "--shards", "2", "--force", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "matrix" in (tmp_path / ".github" / "workflows" / "perfctl.yml").read_text()


@pytest.mark.parametrize("shards", [1, 3])
def test_every_run_script_is_valid_bash(tmp_path: Path, shards: int) -> None:
    wf, _, post = _init(tmp_path, shards)
    scripts = [s.get("run") for doc in (wf, post) for j in doc["jobs"].values() for s in j["steps"]]
    assert scripts
    for script in filter(None, scripts):
        out = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
        assert out.returncode == 0, (script, out.stderr)


def _shard_file(folder: Path, index: int, names: set[str]) -> str:
    c = make_comparison()
    c = replace(
        c,
        id=f"2026010{index}T000000-00000{index}",
        regimes=tuple(r for r in c.regimes if r.name in names),
        settings={**c.settings, "shard": {"index": index, "count": 2, "run": "77-1"}},
    )
    (folder / f"perfctl-shard-{index}").mkdir(parents=True)
    (folder / f"perfctl-shard-{index}" / "comparison.json").write_text(json.dumps(to_dict(c)))
    return c.id


def test_the_fan_in_script_merges_summarises_and_gates(tmp_path: Path) -> None:
    """The merge job's own script, run by bash on two shards' artefacts."""
    wf, _, _ = _init(tmp_path, 2)
    ok = {r.name for r in make_comparison().regimes if r.verdict != "failed"}
    first = {n for n in ok if n.startswith("fam0")}
    ids = [
        _shard_file(tmp_path / "shards", 1, first),
        _shard_file(tmp_path / "shards", 2, ok - first),
    ]
    (tmp_path / "shards" / "perfctl-shard-2" / "pr-number.txt").write_text("42\n")
    summary, output = tmp_path / "summary.md", tmp_path / "output.txt"
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_OUTPUT": str(output),
    }
    script = _step(wf["jobs"]["merge"], "Merge")["run"]
    assert shutil.which("perfctl", path=env["PATH"])
    done = subprocess.run(
        ["bash", "-e", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert output.read_text() == "status=1\n"  # make_comparison has a regression: the gate fails
    merged = json.loads((tmp_path / "reports" / "ci" / "comparison.json").read_text())
    assert [m["comparison"] for m in merged["settings"]["merged_from"]] == ids
    assert "perfctl" in summary.read_text() and "regressed" in summary.read_text().lower()
    assert (tmp_path / "reports" / "ci" / "pr-number.txt").read_text() == "42\n"


def test_nightly_history_survives_the_runner_through_the_cache(tmp_path: Path) -> None:
    """What the plain workflow caches is enough to rebuild the store's history elsewhere."""
    from perfctl.store.local import SqliteStore
    from tests.test_report import make_runs

    (tmp_path / "p").mkdir()
    wf, _, _ = _init(tmp_path / "p", 1)
    steps = wf["jobs"]["compare"]["steps"]
    names = [s.get("name") for s in steps]
    restore, save = (
        _step(wf["jobs"]["compare"], "Restore the result history"),
        _step(wf["jobs"]["compare"], "Save the result history"),
    )
    assert names.index("Restore the result history") < names.index("Compare")
    assert names.index("History report") < names.index("Save the result history")
    assert restore["with"]["path"] == save["with"]["path"]
    assert restore["with"]["key"] == save["with"]["key"]  # unique per run: never overwritten
    assert restore["with"]["restore-keys"].strip() == "perfctl-history-"
    assert "github.event_name != 'pull_request'" in save["if"]
    assert "env.PERFCTL_STORE_URL == ''" in save["if"]
    # A nightly runner writes history; the next one gets only the cached paths.
    first, second = tmp_path / "runner1" / ".perfctl", tmp_path / "runner2" / ".perfctl"
    store = SqliteStore(first)
    for run in make_runs(6, 2):
        store.begin_run(run)
    store.save_comparison(make_comparison())
    for rel in restore["with"]["path"].split():
        src = tmp_path / "runner1" / rel
        dest = tmp_path / "runner2" / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, dest)
    assert SqliteStore(second).list_runs() == store.list_runs()
    assert SqliteStore(second).list_comparisons() == [make_comparison()]


def test_merge_by_shard_run_takes_the_stored_shards_newest_rerun_first(tmp_path: Path) -> None:
    from perfctl.model import comparison_from_dict
    from perfctl.store.local import SqliteStore

    (tmp_path / "perfctl.toml").write_text('regimes = ["bench.py"]\n')
    ok = {r.name for r in make_comparison().regimes if r.verdict != "failed"}
    first = {n for n in ok if n.startswith("fam0")}
    ids = [_shard_file(tmp_path / "a", 1, first), _shard_file(tmp_path / "a", 2, ok - first)]
    store = SqliteStore(tmp_path / ".perfctl")
    for k in (1, 2):
        c = json.loads((tmp_path / "a" / f"perfctl-shard-{k}" / "comparison.json").read_text())
        store.save_comparison(comparison_from_dict(c))
    rerun = replace(
        store.load_comparison(ids[0]), id="20260201T000000-rerun1", created="2026-02-01T00:00:00"
    )
    store.save_comparison(rerun)
    out = run_cli("merge", "--shard-run", "77-1", "--format", "json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    merged = json.loads(out.stdout)
    assert [m["comparison"] for m in merged["settings"]["merged_from"]] == [rerun.id, ids[1]]
    assert {r["name"] for r in merged["regimes"]} == ok
    unknown = run_cli("merge", "--shard-run", "nope", cwd=tmp_path)
    assert unknown.returncode == 2
    assert unknown.stderr.startswith("Error: no stored shard of sharded run `nope`")
    nothing = run_cli("merge", cwd=tmp_path)
    assert nothing.returncode == 2 and nothing.stderr.startswith("Error: nothing to merge")
