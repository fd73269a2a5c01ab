"""Git stage: resolve refs and keep one detached worktree per measured commit.

Refs are branches, tags, full or short shas and expressions such as ``HEAD~3``,
plus the pseudo-ref :data:`WORKTREE` (the user's checkout, uncommitted changes
included). Every git call goes through gitpython with an argv list, never a
shell, and a ref is only ever passed after ``--end-of-options`` (and never when
it starts with ``-``), so a hostile name like ``--upload-pack=x`` is just an
unknown ref.

Worktrees live in ``<state_dir>/worktrees/<sha>``. They are created under a
``.partial-`` name and moved into place only when complete, so a killed run
never leaves a directory that looks finished; a broken one is removed and
re-added. The user's working copy, index, stash and branches are never
touched: read-only commands run with ``GIT_OPTIONAL_LOCKS=0`` so that even
``git status`` does not rewrite the index. Callers should hold
:func:`perfctl.store.lock.project_lock`; the functions that change the state dir
take it themselves (it is re-entrant).
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import os
import re
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

from perfctl.errors import GitError
from perfctl.files import feed_file
from perfctl.git.gitlib import git, gitexc
from perfctl.model import RefInfo
from perfctl.store.lock import project_lock

WORKTREE = "WORKTREE"
PARTIAL_PREFIX = ".partial-"
SNAPSHOT_PREFIX = ".snapshot-"
REF_HINT = "use a branch, tag, commit sha, an expression like HEAD~3, or WORKTREE"


def open_repo(root: Path) -> git.Repo:
    """The git repository containing ``root`` (GitError if there is none)."""
    try:
        repo = git.Repo(root, search_parent_directories=True)
    except (gitexc.InvalidGitRepositoryError, gitexc.NoSuchPathError) as exc:
        raise GitError(
            f"{root} is not inside a git repository",
            "run perfctl in a git checkout (or `git init` one)",
        ) from exc
    if repo.working_tree_dir is None:
        raise GitError(f"{root} is a bare git repository", "run perfctl in a checkout")
    # Read-only commands must not refresh (rewrite) the user's index.
    repo.git.update_environment(GIT_OPTIONAL_LOCKS="0")
    return repo


def _top(repo: git.Repo) -> Path:
    return Path(str(repo.working_tree_dir))


def project_subdir(root: Path) -> Path:
    """Where the project sits inside its repository (``.`` at the top)."""
    with open_repo(root) as repo:
        return root.resolve().relative_to(_top(repo).resolve())


def _rev_parse(repo: git.Repo, expr: str) -> str | None:
    """The commit sha of ``expr``, or None; ``expr`` is never read as an option."""
    if not expr or expr.startswith("-") or "\0" in expr:
        return None
    try:
        out = repo.git.rev_parse("--verify", "--quiet", "--end-of-options", expr + "^{commit}")
    except (gitexc.GitCommandError, ValueError):
        return None
    return str(out).strip() or None


def _ref_names(repo: git.Repo) -> list[str]:
    names = [r.name for r in repo.refs]
    return sorted({n for n in names if not n.endswith("/HEAD")})


def _unknown(repo: git.Repo, ref: str) -> GitError:
    shown = ref if len(ref) <= 80 else ref[:77] + "..."
    if _rev_parse(repo, "HEAD") is None:
        return GitError(
            f"unknown ref `{shown}`: the repository has no commits yet",
            "commit something first, or measure WORKTREE",
        )
    # A low cutoff so that short names (tags like `c1`) still find their neighbours.
    close = difflib.get_close_matches(ref, _ref_names(repo), n=3, cutoff=0.5)
    hint = "did you mean " + ", ".join(f"`{c}`" for c in close) + "? " if close else ""
    return GitError(f"unknown ref `{shown}`", hint + REF_HINT)


def _must(repo: git.Repo, ref: str) -> str:
    sha = _rev_parse(repo, ref)
    if sha is None:
        raise _unknown(repo, ref)
    return sha


def _info(repo: git.Repo, ref: str, sha: str, dirty: bool = False) -> RefInfo:
    commit = repo.commit(sha)
    date = commit.committed_datetime.isoformat()
    return RefInfo(ref=ref, sha=sha, subject=str(commit.summary), date=date, dirty=dirty)


def _pathspec(repo: git.Repo, outputs: Sequence[Path]) -> list[str]:
    """``-- :/ :(top,exclude)reports …``: the whole checkout less perfctl's own output.

    Reports and state perfctl writes into the checkout are not the user's changes:
    they must neither mark ``WORKTREE`` dirty nor change its environment's key.
    """
    top = _top(repo).resolve()
    excluded = []
    for path in outputs:
        try:
            rel = path.resolve().relative_to(top)
        except ValueError:
            continue  # outside the checkout: git never sees it
        if rel.parts:
            excluded.append(f":(top,exclude,literal){rel.as_posix()}")
    return ["--", ":/", *excluded] if excluded else []


def _is_dirty(repo: git.Repo, outputs: Sequence[Path] = ()) -> bool:
    args = ("--porcelain", "--untracked-files=normal", *_pathspec(repo, outputs))
    return bool(repo.git.status(*args).strip())


def _worktree_info(repo: git.Repo, outputs: Sequence[Path] = ()) -> RefInfo:
    head = _rev_parse(repo, "HEAD")
    if head is None:
        return RefInfo(ref=WORKTREE, sha="", dirty=_is_dirty(repo, outputs))
    return _info(repo, WORKTREE, head, dirty=_is_dirty(repo, outputs))


def resolve_ref(root: Path, ref: str, *, outputs: Sequence[Path] = ()) -> RefInfo:
    """Resolve a ref (or WORKTREE) to its commit; GitError naming close matches.

    ``outputs``: folders perfctl writes into the checkout (``Config.outputs``), which
    never make ``WORKTREE`` dirty.
    """
    with open_repo(root) as repo:
        if ref == WORKTREE:
            return _worktree_info(repo, outputs)
        return _info(repo, ref, _must(repo, ref))


def commits_between(
    root: Path, base_sha: str, head_sha: str, limit: int = 50
) -> tuple[RefInfo, ...]:
    """Commits reachable from head but not base, newest first (at most ``limit``)."""
    with open_repo(root) as repo:
        span = f"{_must(repo, base_sha)}..{_must(repo, head_sha)}"
        commits = list(repo.iter_commits(span, max_count=limit))
        return tuple(_info(repo, c.hexsha[:10], c.hexsha) for c in commits)


def merge_base(root: Path, a: str, b: str) -> str:
    """The sha of the best common ancestor of two refs."""
    with open_repo(root) as repo:
        bases = repo.merge_base(_must(repo, a), _must(repo, b))
    if not bases or bases[0] is None:
        raise GitError(
            f"`{a}` and `{b}` have no common ancestor",
            "compare refs that share history, or name the base explicitly",
        )
    return str(bases[0].hexsha)


def _origin_head(repo: git.Repo) -> str | None:
    try:
        target = str(repo.git.symbolic_ref("--quiet", "refs/remotes/origin/HEAD")).strip()
    except gitexc.GitCommandError:
        return None
    return target.removeprefix("refs/remotes/") if _rev_parse(repo, target) else None


def default_branch(root: Path) -> str:
    """origin/HEAD's branch if set, else ``main`` or ``master`` (whichever exists)."""
    with open_repo(root) as repo:
        origin = _origin_head(repo)
        heads = {h.name for h in repo.heads}
    if origin:
        return origin
    for name in ("main", "master"):
        if name in heads:
            return name
    raise GitError(
        "cannot tell the default branch (no origin/HEAD, main or master)",
        "name the base ref explicitly, e.g. `perfctl compare develop HEAD`",
    )


# --- worktrees -----------------------------------------------------------------


def _registrations(repo: git.Repo) -> dict[Path, bool]:
    """Every worktree git knows of, mapped to whether it is still valid."""
    out: dict[Path, bool] = {}
    for block in str(repo.git.worktree("list", "--porcelain")).split("\n\n"):
        lines = block.splitlines()
        if lines and lines[0].startswith("worktree "):
            path = Path(lines[0].removeprefix("worktree ")).resolve()
            out[path] = not any(line.startswith("prunable") for line in lines)
    return out


def _healthy(repo: git.Repo, path: Path, sha: str) -> bool:
    """A registered worktree at ``path`` with HEAD == sha and unmodified tracked files."""
    if not (path / ".git").is_file() or not _registrations(repo).get(path.resolve()):
        return False
    try:
        # No parent search: a half-made dir must never find the user's repo above it.
        with git.Repo(path) as wt:
            head = str(wt.git.rev_parse("--verify", "HEAD")).strip()
            changed = str(wt.git.status("--porcelain", "--untracked-files=no")).strip()
    except (gitexc.GitError, OSError, ValueError):
        return False
    return head == sha and not changed


def _rmtree(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def _discard(repo: git.Repo | None, path: Path) -> None:
    """Remove a worktree dir and its registration, even if locked or half-made."""
    if repo is not None:
        # Twice --force also drops a registration left locked by a killed `add`.
        with contextlib.suppress(gitexc.GitCommandError):
            repo.git.worktree("remove", "--force", "--force", str(path))
    _rmtree(path)


def _ours(repo: git.Repo, base: Path) -> list[Path]:
    """Registered worktrees inside ``base`` (perfctl's), whether valid or not."""
    base = base.resolve()
    return [p for p in _registrations(repo) if p.parent == base]


def _discard_partials(repo: git.Repo, base: Path, sha: str) -> None:
    stale = [p for p in _ours(repo, base) if p.name.startswith(PARTIAL_PREFIX + sha)]
    stale += list(base.glob(PARTIAL_PREFIX + sha + "*"))
    for path in stale:
        _discard(repo, path)
    repo.git.worktree("prune")


def _create(repo: git.Repo, base: Path, sha: str) -> Path:
    partial, final = base / f"{PARTIAL_PREFIX}{sha}-{os.getpid()}", base / sha
    try:
        repo.git.worktree("add", "--detach", str(partial), sha)
        # Only a complete checkout ever carries the final name.
        repo.git.worktree("move", str(partial), str(final))
    except gitexc.GitCommandError as exc:
        _discard(repo, partial)
        detail = " ".join(str(exc.stderr).split())[:300]
        raise GitError(
            f"could not check out {sha[:10]} into {final}: {detail}",
            "run `perfctl clean --worktrees` and try again",
        ) from exc
    return final


def ensure_worktree(root: Path, state_dir: Path, sha: str) -> Path:
    """A healthy detached worktree of ``sha`` in state_dir/worktrees/<sha> (reused or made)."""
    with open_repo(root) as repo:
        return _ensure(repo, state_dir, _must(repo, sha))


def _ensure(repo: git.Repo, state_dir: Path, full: str) -> Path:
    base = state_dir / "worktrees"
    with project_lock(state_dir, what=f"checking out {full[:10]}"):
        base.mkdir(parents=True, exist_ok=True)
        if _healthy(repo, base / full, full):
            return base / full
        _discard(repo, base / full)
        _discard_partials(repo, base, full)
        return _create(repo, base, full)


_WORKTREE_NAME = re.compile(rf"(?:{re.escape(PARTIAL_PREFIX)})?[0-9a-f]{{40,64}}(?:-\d+)?")


def remove_worktrees(root: Path, state_dir: Path) -> int:
    """Remove every perfctl worktree and prune git's list; returns how many there were."""
    base = state_dir / "worktrees"
    try:
        repo: git.Repo | None = open_repo(root)
    except GitError:
        repo = None  # still remove the directories
    try:
        with project_lock(state_dir, what="removing worktrees"):
            # Only what perfctl names (a commit's sha, a partial checkout) or git lists.
            found = [p for p in sorted(base.glob("*")) if _WORKTREE_NAME.fullmatch(p.name)]
            gone = set(_ours(repo, base)) if repo is not None else set()
            for path in [*found, *gone]:
                _discard(repo, path)
            if repo is not None:
                repo.git.worktree("prune")
    finally:
        if repo is not None:
            repo.close()
    return sum(1 for p in found if not p.name.startswith("."))


# --- a snapshot of WORKTREE --------------------------------------------------------


def _changed(repo: git.Repo, spec: list[str]) -> list[bytes]:
    """Paths that differ from HEAD: edited, added, deleted, or untracked."""
    args = ("HEAD", "--name-only", "--no-renames", "-z", *spec)
    diff = repo.git.diff(*args, stdout_as_string=False)
    return [n for n in bytes(diff).split(b"\0") if n] + _untracked(repo, False, spec)


def _copy_changes(repo: git.Repo, dest: Path, spec: list[str]) -> None:
    top = _top(repo)
    for name in map(os.fsdecode, _changed(repo, spec)):
        src, dst = top / name, dest / name
        _rmtree(dst)  # deleted in the checkout, or about to be replaced
        if src.is_symlink() or src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst, follow_symlinks=False)


@contextlib.contextmanager
def worktree_snapshot(root: Path, state_dir: Path, outputs: Sequence[Path] = ()) -> Iterator[Path]:
    """A throwaway worktree of HEAD plus the checkout's uncommitted changes (less ``outputs``).

    Building from it leaves the user's checkout untouched (no build/ or
    *.egg-info), and it has a .git, so setuptools-scm and the like still work.
    """
    base = state_dir / "worktrees"
    with open_repo(root) as repo, project_lock(state_dir, what="snapshotting WORKTREE"):
        head, path = _must(repo, "HEAD"), base / f"{SNAPSHOT_PREFIX}{os.getpid()}"
        for stale in base.glob(SNAPSHOT_PREFIX + "*"):
            _discard(repo, stale)  # left by a killed run (we hold the lock)
        base.mkdir(parents=True, exist_ok=True)
        try:
            repo.git.worktree("add", "--detach", str(path), head)
            _copy_changes(repo, path, _pathspec(repo, outputs))
            yield path
        finally:
            _discard(repo, path)
            repo.git.worktree("prune")


# --- fingerprint of uncommitted changes ----------------------------------------


def _untracked(repo: git.Repo, everything: bool, spec: Sequence[str] = ()) -> list[bytes]:
    args = ["--others", "--exclude-standard", "-z"] + (["--cached"] if everything else [])
    out = repo.git.ls_files(*args, *spec, stdout_as_string=False)
    return sorted(name for name in bytes(out).split(b"\0") if name)


def worktree_fingerprint(root: Path, outputs: Sequence[Path] = ()) -> str:
    """A short hash of the checkout's uncommitted state (diff to HEAD + untracked files),
    perfctl's own ``outputs`` left out."""
    with open_repo(root) as repo:
        return _fingerprint(repo, _pathspec(repo, outputs))


def _fingerprint(repo: git.Repo, spec: list[str]) -> str:
    digest = hashlib.sha256()
    head = _rev_parse(repo, "HEAD") or ""
    digest.update(head.encode() + b"\0")
    if head:
        plain = ("--binary", "--no-color", "--no-ext-diff", "--no-textconv")
        diff = repo.git.diff("HEAD", *plain, *spec, stdout_as_string=False)
        digest.update(bytes(diff) + b"\0")
    top = _top(repo)
    # Without a HEAD there is no diff: hash every file git would track.
    for name in _untracked(repo, not head, spec):
        digest.update(name + b"\0")
        feed_file(digest, top / os.fsdecode(name))
        digest.update(b"\0")
    return digest.hexdigest()[:16]
