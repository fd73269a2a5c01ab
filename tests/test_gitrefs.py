"""The git stage on real temporary repositories: refs, worktrees, fingerprints."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from perfctl.errors import EXIT_USAGE, GitError
from perfctl.git import refs as gitrefs
from tests.conftest import GIT_ENV, GitRepo


@pytest.fixture
def repo(git_repo: GitRepo) -> GitRepo:
    """main: c1 -> c2 -> c3; branch `feature` and tag `v1.0` at c1."""
    git_repo.write("app.py", "VALUE = 1\n")
    git_repo.write(".gitignore", "*.log\n")
    git_repo.commit("first commit")
    git_repo.tag("v1.0")
    git_repo.git("branch", "feature")
    git_repo.write("app.py", "VALUE = 2\n")
    git_repo.commit("second commit")
    git_repo.write("app.py", "VALUE = 3\n")
    git_repo.commit("third commit", date="2026-01-02T03:04:05+00:00")
    return git_repo


def sha(repo: GitRepo, ref: str) -> str:
    return repo.git("rev-parse", ref)


def test_resolve_branches_tags_shas_and_expressions(repo: GitRepo) -> None:
    c1, c2, c3 = sha(repo, "v1.0"), sha(repo, "HEAD~1"), sha(repo, "HEAD")
    cases = {
        "main": c3,
        "feature": c1,
        "v1.0": c1,
        c3: c3,
        c2[:7]: c2,
        "HEAD~1": c2,
        "HEAD~2": c1,
        "main^": c2,
    }
    for ref, expected in cases.items():
        info = gitrefs.resolve_ref(repo.path, ref)
        assert (info.ref, info.sha, info.dirty) == (ref, expected, False)
    repo.git("tag", "-a", "v2.0", "-m", "annotated", "HEAD~1")
    assert gitrefs.resolve_ref(repo.path, "v2.0").sha == c2  # peeled to its commit
    head = gitrefs.resolve_ref(repo.path, "HEAD")
    assert head.subject == "third commit"
    assert datetime.fromisoformat(head.date) == datetime.fromisoformat("2026-01-02T03:04:05+00:00")


def test_worktree_pseudo_ref_tracks_uncommitted_changes(repo: GitRepo) -> None:
    clean = gitrefs.resolve_ref(repo.path, gitrefs.WORKTREE)
    assert (clean.ref, clean.sha, clean.dirty) == ("WORKTREE", sha(repo, "HEAD"), False)
    repo.write("debug.log", "ignored files do not count\n")
    assert not gitrefs.resolve_ref(repo.path, "WORKTREE").dirty
    repo.write("app.py", "VALUE = 4\n")
    assert gitrefs.resolve_ref(repo.path, "WORKTREE").dirty
    repo.git("checkout", "--", "app.py")
    repo.write("new.py", "x = 1\n")
    assert gitrefs.resolve_ref(repo.path, "WORKTREE").short.endswith("+dirty")


def test_unknown_ref_names_it_with_close_matches(repo: GitRepo) -> None:
    with pytest.raises(GitError) as info:
        gitrefs.resolve_ref(repo.path, "featur")
    assert info.value.message == "unknown ref `featur`"
    assert info.value.hint.startswith("did you mean `feature`?")
    assert "WORKTREE" in info.value.hint
    assert info.value.exit_code == EXIT_USAGE == 2


def test_unknown_ref_without_close_match(repo: GitRepo) -> None:
    with pytest.raises(GitError) as info:
        gitrefs.resolve_ref(repo.path, "zzzzzzzzzz")
    assert "did you mean" not in info.value.hint
    assert "HEAD~3" in info.value.hint


HOSTILE = [
    "--upload-pack=touch pwned",
    "--output=pwned",
    "-h",
    "$(touch pwned)",
    "`touch pwned`",
    "; touch pwned",
    "main; touch pwned",
    "main && touch pwned",
    "| touch pwned",
    "main\ntouch pwned",
    "main\0x",
    "",
]


@pytest.mark.parametrize("ref", HOSTILE)
def test_hostile_ref_names_are_just_unknown(repo: GitRepo, ref: str, monkeypatch) -> None:
    monkeypatch.chdir(repo.path)
    before = repo.git("status", "--porcelain")
    with pytest.raises(GitError) as info:
        gitrefs.resolve_ref(repo.path, ref)
    assert info.value.message.startswith("unknown ref")
    with pytest.raises(GitError, match="unknown ref"):
        gitrefs.ensure_worktree(repo.path, repo.path / ".perfctl", ref)
    assert not list(repo.path.parent.rglob("pwned"))
    assert repo.git("status", "--porcelain") == before
    assert not (repo.path / ".perfctl" / "worktrees").exists()


def test_not_a_git_repository(tmp_path: Path) -> None:
    with pytest.raises(GitError) as info:
        gitrefs.open_repo(tmp_path)
    assert "not inside a git repository" in info.value.message
    assert info.value.exit_code == 2


def test_empty_repository(git_repo: GitRepo) -> None:
    info = gitrefs.resolve_ref(git_repo.path, "WORKTREE")
    assert (info.sha, info.dirty) == ("", False)
    with pytest.raises(GitError, match="no commits yet"):
        gitrefs.resolve_ref(git_repo.path, "main")


def test_commits_between_newest_first_with_limit(repo: GitRepo) -> None:
    c1, c2, c3 = sha(repo, "v1.0"), sha(repo, "HEAD~1"), sha(repo, "HEAD")
    commits = gitrefs.commits_between(repo.path, c1, c3)
    assert [c.sha for c in commits] == [c3, c2]
    assert [c.subject for c in commits] == ["third commit", "second commit"]
    assert commits[0].ref == c3[:10]
    assert [c.sha for c in gitrefs.commits_between(repo.path, c1, c3, limit=1)] == [c3]
    assert gitrefs.commits_between(repo.path, c3, c1) == ()


def test_merge_base(repo: GitRepo) -> None:
    repo.git("checkout", "-q", "feature")
    repo.write("other.py", "y = 1\n")
    repo.commit("on feature")
    repo.git("checkout", "-q", "main")
    assert gitrefs.merge_base(repo.path, "main", "feature") == sha(repo, "v1.0")


def test_default_branch(repo: GitRepo) -> None:
    assert gitrefs.default_branch(repo.path) == "main"
    repo.git("update-ref", "refs/remotes/origin/develop", "HEAD~1")
    repo.git("symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/develop")
    assert gitrefs.default_branch(repo.path) == "origin/develop"


def test_default_branch_master_or_none(git_repo: GitRepo) -> None:
    git_repo.commit("first")
    git_repo.git("branch", "-m", "master")
    assert gitrefs.default_branch(git_repo.path) == "master"
    git_repo.git("branch", "-m", "trunk")
    with pytest.raises(GitError, match="default branch"):
        gitrefs.default_branch(git_repo.path)


# --- worktrees -------------------------------------------------------------------------


def worktree_list(repo: GitRepo) -> list[str]:
    out = repo.git("worktree", "list", "--porcelain")
    return [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("worktree ")]


def test_worktree_is_created_detached_and_reused(repo: GitRepo) -> None:
    state, c1 = repo.path / ".perfctl", sha(repo, "v1.0")
    tree = gitrefs.ensure_worktree(repo.path, state, "v1.0")
    assert tree == state / "worktrees" / c1
    assert (tree / "app.py").read_text() == "VALUE = 1\n"
    assert (
        subprocess.run(
            ["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        == c1
    )
    (tree / "build-product.so").write_text("kept: untracked files do not spoil a worktree")
    assert gitrefs.ensure_worktree(repo.path, state, c1) == tree
    assert (tree / "build-product.so").exists()
    assert [Path(p) for p in worktree_list(repo)] == [repo.path, tree]
    assert not list((state / "worktrees").glob(".partial-*"))


def test_worktree_with_edited_tracked_file_is_remade(repo: GitRepo) -> None:
    state = repo.path / ".perfctl"
    tree = gitrefs.ensure_worktree(repo.path, state, "v1.0")
    (tree / "app.py").write_text("edited\n")
    assert gitrefs.ensure_worktree(repo.path, state, "v1.0") == tree
    assert (tree / "app.py").read_text() == "VALUE = 1\n"


def test_worktree_repaired_after_killed_add(repo: GitRepo) -> None:
    """A killed `git worktree add` leaves a locked registration and a half-made dir."""
    state, c1 = repo.path / ".perfctl", sha(repo, "v1.0")
    base = state / "worktrees"
    partial = base / f".partial-{c1}-99999"
    repo.git("worktree", "add", "--detach", "--lock", str(partial), c1)
    (partial / "app.py").unlink()
    # ...and a dir under the final name that is not a worktree at all.
    (base / c1).mkdir()
    (base / c1 / "junk.txt").write_text("half-made")
    tree = gitrefs.ensure_worktree(repo.path, state, c1)
    assert (tree / "app.py").read_text() == "VALUE = 1\n"
    assert not (tree / "junk.txt").exists()
    assert [Path(p) for p in worktree_list(repo)] == [repo.path, tree]
    assert sorted(p.name for p in base.iterdir()) == [c1]


def test_worktree_repaired_after_lost_registration(repo: GitRepo) -> None:
    state = repo.path / ".perfctl"
    tree = gitrefs.ensure_worktree(repo.path, state, "HEAD~1")
    shutil.rmtree(repo.path / ".git" / "worktrees")
    assert gitrefs.ensure_worktree(repo.path, state, "HEAD~1") == tree
    assert (tree / "app.py").read_text() == "VALUE = 2\n"
    assert [Path(p) for p in worktree_list(repo)] == [repo.path, tree]


def test_worktree_dir_deleted_behind_gits_back(repo: GitRepo) -> None:
    state = repo.path / ".perfctl"
    tree = gitrefs.ensure_worktree(repo.path, state, "HEAD~1")
    shutil.rmtree(tree)
    assert gitrefs.ensure_worktree(repo.path, state, "HEAD~1") == tree
    assert (tree / "app.py").read_text() == "VALUE = 2\n"


def quiet_git(repo: GitRepo, *args: str) -> bytes:
    """git without optional locks, so observing the index does not rewrite it."""
    env = {**os.environ, **GIT_ENV, "GIT_OPTIONAL_LOCKS": "0"}
    return subprocess.run(
        ["git", *args], cwd=repo.path, env=env, check=True, capture_output=True
    ).stdout


def snapshot(repo: GitRepo) -> dict[str, object]:
    index = (repo.path / ".git" / "index").read_bytes()
    files = {p.name: p.read_bytes() for p in repo.path.iterdir() if p.is_file()}
    return {
        "index": hashlib.sha256(index).hexdigest(),
        "status": quiet_git(repo, "status", "--porcelain", "--ignored"),
        "stash": quiet_git(repo, "stash", "list"),
        "branches": quiet_git(repo, "for-each-ref"),
        "head": quiet_git(repo, "symbolic-ref", "HEAD"),
        "files": files,
    }


def test_users_checkout_index_stash_and_branches_untouched(repo: GitRepo) -> None:
    repo.write("app.py", "stashed work\n")
    repo.git("stash", "-q")
    repo.write("app.py", "VALUE = 'unstaged edit'\n")
    repo.write("staged.py", "z = 1\n")
    repo.git("add", "staged.py")
    repo.write("untracked.py", "u = 1\n")
    repo.write("debug.log", "ignored\n")
    state = repo.path / ".perfctl"
    (state).mkdir()
    (state / ".gitignore").write_text("*\n")
    before = snapshot(repo)
    gitrefs.resolve_ref(repo.path, "WORKTREE")
    gitrefs.worktree_fingerprint(repo.path)
    for ref in ("v1.0", "HEAD~1", "main"):
        gitrefs.ensure_worktree(repo.path, state, ref)
    gitrefs.ensure_worktree(repo.path, state, "v1.0")
    assert gitrefs.remove_worktrees(repo.path, state) == 3
    assert snapshot(repo) == before


def test_remove_worktrees_also_clears_stale_registrations(repo: GitRepo) -> None:
    state = repo.path / ".perfctl"
    gitrefs.ensure_worktree(repo.path, state, "v1.0")
    gone = gitrefs.ensure_worktree(repo.path, state, "HEAD")
    shutil.rmtree(gone)
    repo.git("worktree", "lock", str(gone))
    assert gitrefs.remove_worktrees(repo.path, state) == 1
    assert list((state / "worktrees").iterdir()) == []
    assert worktree_list(repo) == [str(repo.path)]
    assert gitrefs.remove_worktrees(repo.path, state) == 0


def test_remove_worktrees_outside_git(tmp_path: Path) -> None:
    base = tmp_path / ".perfctl" / "worktrees"
    (base / ("a" * 40)).mkdir(parents=True)
    (base / "notes").mkdir()  # not a name perfctl gives a worktree: kept
    assert gitrefs.remove_worktrees(tmp_path, tmp_path / ".perfctl") == 1
    assert [p.name for p in base.iterdir()] == ["notes"]


def test_project_in_a_subdirectory(repo: GitRepo) -> None:
    repo.write("sub/pyproject.toml", "[project]\nname = 'sub'\n")
    repo.commit("subproject")
    assert gitrefs.project_subdir(repo.path / "sub") == Path("sub")
    assert gitrefs.resolve_ref(repo.path / "sub", "HEAD").subject == "subproject"


def test_worktree_snapshot_holds_uncommitted_changes(repo: GitRepo) -> None:
    repo.write("sub/new.py", "untracked\n")
    repo.write("staged.py", "staged\n")
    repo.git("add", "staged.py")
    repo.write("app.py", "VALUE = 'edited'\n")
    repo.git("rm", "-q", ".gitignore")
    repo.write("debug.log", "ignored? not any more: .gitignore is deleted\n")
    (repo.path / "link").symlink_to("app.py")
    state = repo.path / ".perfctl"
    with gitrefs.worktree_snapshot(repo.path, state) as snap:
        assert snap.parent == state / "worktrees" and snap.name.startswith(".snapshot-")
        assert (snap / "app.py").read_text() == "VALUE = 'edited'\n"
        assert (snap / "staged.py").read_text() == "staged\n"
        assert (snap / "sub" / "new.py").read_text() == "untracked\n"
        assert (snap / "debug.log").exists() and not (snap / ".gitignore").exists()
        assert os.readlink(snap / "link") == "app.py"
        assert not (snap / ".perfctl").exists()
    assert not snap.exists()
    assert worktree_list(repo) == [str(repo.path)]


# --- fingerprint -------------------------------------------------------------------------


def test_fingerprint_follows_uncommitted_state(repo: GitRepo) -> None:
    fp = gitrefs.worktree_fingerprint
    clean = fp(repo.path)
    assert clean == fp(repo.path) and len(clean) == 16
    repo.write("debug.log", "ignored files do not count\n")
    (repo.path / ".perfctl").mkdir()
    (repo.path / ".perfctl" / ".gitignore").write_text("*\n")
    assert fp(repo.path) == clean
    repo.write("app.py", "VALUE = 'edited'\n")
    edited = fp(repo.path)
    assert edited != clean
    repo.git("add", "app.py")
    assert fp(repo.path) == edited  # staged or not, the same content
    repo.write("new.py", "a = 1\n")
    untracked = fp(repo.path)
    assert untracked != edited
    repo.write("new.py", "a = 2\n")
    assert fp(repo.path) != untracked
    repo.git("reset", "-q", "--hard")
    (repo.path / "new.py").unlink()
    assert fp(repo.path) == clean


def test_fingerprint_differs_per_commit(repo: GitRepo) -> None:
    first = gitrefs.worktree_fingerprint(repo.path)
    repo.commit("empty commit")
    assert gitrefs.worktree_fingerprint(repo.path) != first


LIMITED = """
import resource, sys
from pathlib import Path
resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))
from perfctl.git import refs
print(refs.worktree_fingerprint(Path(sys.argv[1])))
"""


def test_fingerprint_of_a_huge_untracked_file_does_not_read_it_whole(repo: GitRepo) -> None:
    big = repo.path / "data.bin"
    with open(big, "wb") as fh:
        fh.truncate(3 * 2**30)  # sparse: 3 GB that take no disk
    # 2 GB of address space: reading the file whole fails with MemoryError.
    cmd = [sys.executable, "-c", LIMITED, str(repo.path)]
    first = subprocess.run(cmd, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr[-500:]
    assert len(first.stdout.strip()) == 16
    os.utime(big, ns=(1, 1))  # touched: a big file counts by size and mtime
    second = subprocess.run(cmd, capture_output=True, text=True)
    assert second.stdout.strip() != first.stdout.strip()


def test_perfctl_output_in_the_checkout_is_not_a_change(repo: GitRepo) -> None:
    # A reports/ folder made before perfctl gave it a .gitignore (or by the user,
    # untracked) made WORKTREE dirty and changed its environment's key.
    from perfctl.config import load_config
    from perfctl.envs import env_spec

    repo.write("pyproject.toml", '[project]\nname = "p"\n[tool.perfctl]\ninstall = false\n')
    repo.commit("config")
    config = load_config(repo.path)
    before = env_spec(config, "WORKTREE")
    assert not before.ref.dirty
    repo.write("reports/comparison-1.html", "<!DOCTYPE html>\n")
    repo.write("reports/profiles/x/summary.json", "{}\n")
    assert gitrefs.resolve_ref(repo.path, "WORKTREE").dirty  # without perfctl's outputs
    after = env_spec(config, "WORKTREE")
    assert (after.ref.dirty, after.key) == (False, before.key)
    repo.write("notes.txt", "the user's own change\n")
    changed = env_spec(config, "WORKTREE")
    assert changed.ref.dirty and changed.key != before.key


@pytest.mark.fresh_process  # GitPython is imported already in this process
@pytest.mark.parametrize(
    "command", [["compare", "HEAD~1", "HEAD"], ["ci"], ["bisect", "v1.0", "HEAD", "-r", "x"]]
)
def test_missing_git_is_an_error_with_a_hint(
    repo: GitRepo, tmp_path: Path, command: list[str]
) -> None:
    """GitPython refuses to import without git; that is one Error/Hint line, exit 3."""
    from tests.conftest import run_cli

    (tmp_path / "bin").mkdir()
    proc = run_cli(*command, cwd=repo.path, env={"PATH": str(tmp_path / "bin")})
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.splitlines() == [
        "Error: git is not installed or not on PATH (perfctl reads refs and builds worktrees with it)",
        "Hint: install git (apt-get install git), or set GIT_PYTHON_GIT_EXECUTABLE to its path",
    ]
