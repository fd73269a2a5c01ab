"""`perfctl clean` removes what perfctl made, and nothing of the user's (#13.5).

These run in the gate (`.ci/run`): none is marked slow.
"""

from __future__ import annotations

from pathlib import Path

from perfctl.git import refs as gitrefs
from perfctl.model import RefInfo, Run
from perfctl.store.local import open_store
from tests.conftest import GitRepo, run_cli
from tests.test_store import MACHINE, comparison

KEY = "0123456789abcdef"


def _project(repo: GitRepo, store: str) -> None:
    repo.write("pyproject.toml", f'[tool.perfctl]\nregimes = ["r.py"]\nstore = "{store}"\n')
    repo.write("r.py", "")


def _user_files(base: Path) -> list[Path]:
    """Files of the user's where perfctl keeps its own: the reported losses."""
    files = [base / "runs" / "notes.md", base / "envs" / "conda-specs" / "env.yml"]
    files += [base / "comparisons" / "mine.json", base / "worktrees" / "README"]
    for f in files:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("mine\n")
    return files


def test_a_store_at_the_project_root_is_refused(git_repo: GitRepo) -> None:
    _project(git_repo, ".")
    notes = _user_files(git_repo.path)
    git_repo.commit("tracked notes")
    out = run_cli("clean", cwd=git_repo.path)
    assert out.returncode == 2, out.stderr
    error, hint = out.stderr.splitlines()
    assert error.endswith("`store` = '.' is the project root or a folder above it")
    assert hint.startswith("Hint: give perfctl a directory of its own")
    assert all(f.read_text() == "mine\n" for f in notes)
    assert not (git_repo.path / ".gitignore").exists()  # no `*` written over the project


def test_a_store_holding_tracked_files_is_refused(git_repo: GitRepo) -> None:
    _project(git_repo, "data")
    notes = _user_files(git_repo.path / "data")
    git_repo.commit("tracked data")
    open_store(git_repo.path / "data").save_comparison(comparison("c1", "2026-01-01T00:00:00"))
    out = run_cli("clean", "--results", cwd=git_repo.path)
    assert out.returncode == 2, out.stderr
    error, hint = out.stderr.splitlines()
    assert error.startswith("Error: ") and "holds files git tracks (data/" in error
    assert hint.startswith("Hint: give perfctl a directory of its own")
    assert all(f.read_text() == "mine\n" for f in notes)
    assert (git_repo.path / "data" / "comparisons" / "c1.json").is_file()


def _kept(f: Path, state: Path) -> bool:
    if f.exists():
        return f.read_text() == "mine\n"
    return any(m.read_text() == "mine\n" for m in (state / "damaged").rglob(f.name))


def test_clean_removes_only_what_perfctl_made(git_repo: GitRepo) -> None:
    _project(git_repo, ".perfctl")
    sha = git_repo.commit("first")
    state = git_repo.path / ".perfctl"
    mine = _user_files(state)  # untracked (the store's .gitignore hides them)
    store = open_store(state)
    store.save_comparison(comparison("20260101T000000-aaaaaa", "2026-01-01T00:00:00"))
    store.begin_run(Run("20260101T000000-bbbbbb", "p", RefInfo("main", sha), MACHINE, "2026"))
    env = state / "envs" / KEY
    (env / "bin").mkdir(parents=True)
    (env / "perfctl-env.json").write_text("{}")
    (state / "envs" / "fedcba9876543210").mkdir()  # a key's name, but no marker: not ours
    (state / "logs").mkdir()
    (state / "logs" / f"{KEY}.log").write_text("build log")
    tree = gitrefs.ensure_worktree(git_repo.path, state, sha)
    out = run_cli("clean", cwd=git_repo.path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "removed 1 worktree(s)",
        "removed 1 environment(s)",
        "removed 2 stored record(s)",
    ]
    assert not tree.exists() and not env.exists() and not (state / "logs" / f"{KEY}.log").exists()
    assert not (state / "runs" / "20260101T000000-bbbbbb").exists()
    assert not (state / "comparisons" / "20260101T000000-aaaaaa.json").exists()
    # A file among the stored records that is not one is set aside under damaged/
    # (named in a warning), never deleted; everything else stays where it was.
    assert all(_kept(f, state) for f in mine)
    assert (state / "envs" / "fedcba9876543210").is_dir()
