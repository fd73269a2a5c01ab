"""Git plumbing for a history branch: read it, add files on top of it, push it.

A history branch (``perfctl ci --history-branch perfctl-data``, ``perfctl
sync``) holds stored records as plain files. It is never checked out: the
branch is fetched into the private ref ``refs/perfctl/history/<branch>``, read
from git's object store, and a new commit is built with a temporary index
(``GIT_INDEX_FILE``) and ``commit-tree``. The user's working copy, index,
HEAD and branches are never touched. A push is never forced; a push that
loses a race (another runner pushed first) is reported as :class:`Raced` so
the caller can fetch again and retry.

Every call is an argv list through gitpython (no shell); the remote and the
branch are checked before they reach git, and git's messages are stripped of
credentials (``https://user:token@host`` URLs) before they are shown.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from perfctl.errors import PerfctlError, UsageError
from perfctl.git.gitlib import git, gitexc
from perfctl.git.refs import open_repo

PRIVATE_REF = "refs/perfctl/history/"
IDENTITY = {
    "GIT_AUTHOR_NAME": "perfctl",
    "GIT_AUTHOR_EMAIL": "perfctl@users.noreply.github.com",
    "GIT_COMMITTER_NAME": "perfctl",
    "GIT_COMMITTER_EMAIL": "perfctl@users.noreply.github.com",
}
# A stalled remote must not hang a CI job: give up below 1 KB/s for 60 s.
NET = {
    "GIT_HTTP_LOW_SPEED_LIMIT": "1000",
    "GIT_HTTP_LOW_SPEED_TIME": "60",
    "GIT_TERMINAL_PROMPT": "0",
}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,199}")
_CREDENTIALS = re.compile(r"(?<=://)[^/@\s]+@")
_RACE = ("[rejected]", "non-fast-forward", "fetch first", "stale info", "cannot lock ref")


class HistoryError(PerfctlError):
    """The history branch could not be fetched or pushed (network, access, remote)."""


@dataclass(frozen=True)
class Raced(Exception):
    """The push was refused because the branch moved on: fetch and try again."""

    detail: str


def check_names(remote: str, branch: str) -> None:
    """Refuse a remote or branch name that is not a plain git name (exit 2)."""
    for what, name in (("remote", remote), ("branch", branch)):
        bad = not _NAME.fullmatch(name) or ".." in name or name.endswith((".lock", "/", "."))
        if bad or "//" in name or not _valid_ref(name):
            raise UsageError(
                f"the history {what} {name[:60]!r} is not a plain git name",
                f"use letters, digits, '.', '_', '-' and '/', e.g. "
                f"{'origin' if what == 'remote' else 'perfctl-data'}",
            )


def _valid_ref(name: str) -> bool:
    try:
        git.Git().check_ref_format("--branch", name)
    except gitexc.GitCommandError:
        return False
    return True


def clean(text: str) -> str:
    """Git's message with credentials in URLs removed, on one line."""
    return " ".join(_CREDENTIALS.sub("***@", text).split())


def _error(action: str, remote: str, branch: str, exc: Exception) -> HistoryError:
    if isinstance(exc, gitexc.GitCommandError):
        said = str(exc.stderr or exc.stdout or exc).strip()
        said = re.sub(r"^stderr: '(.*)'$", r"\1", said, flags=re.S)  # gitpython's wrapping
    else:
        said = f"{type(exc).__name__}: {exc}"
    return HistoryError(
        f"could not {action} the history branch {branch!r} of remote {remote!r}: "
        f"{clean(said)[:300]}",
        "check that the remote exists and this job may read and write it (in GitHub "
        "Actions: `permissions: contents: write`); the results are kept in the local store",
    )


@contextlib.contextmanager
def _git_step(action: str, remote: str, branch: str) -> Iterator[None]:
    """Any git or file error inside becomes one HistoryError (exit 3), never a traceback."""
    try:
        yield
    except (gitexc.GitError, OSError, ValueError) as exc:
        raise _error(action, remote, branch, exc) from exc


def remote_tip(root: Path, remote: str, branch: str) -> str | None:
    """The branch's commit on the remote, or None when the remote has no such branch."""
    repo = open_repo(root)
    try:
        out = repo.git.ls_remote("--exit-code", "--heads", remote, f"refs/heads/{branch}", env=NET)
    except gitexc.GitCommandError as exc:
        if exc.status == 2:  # --exit-code: the remote answered, it has no such branch
            return None
        raise _error("read", remote, branch, exc) from exc
    except (gitexc.GitError, OSError) as exc:
        raise _error("read", remote, branch, exc) from exc
    return str(out).split()[0] if str(out).strip() else None


def fetch(root: Path, remote: str, branch: str) -> str | None:
    """Fetch the branch into the private ref; its commit, or None if it does not exist yet."""
    private = PRIVATE_REF + branch
    with _git_step("fetch", remote, branch):
        repo = open_repo(root)
        if remote_tip(root, remote, branch) is None:
            _drop(repo, private)
            return None
        refspec = f"+refs/heads/{branch}:{private}"
        repo.git.fetch("--no-tags", "--quiet", "--no-write-fetch-head", remote, refspec, env=NET)
        return str(repo.git.rev_parse("--verify", f"{private}^{{commit}}"))


def _drop(repo: git.Repo, ref: str) -> None:
    try:
        repo.git.update_ref("-d", ref)
    except gitexc.GitCommandError:
        pass  # there was none


class Blob(NamedTuple):
    """A file of a tree: its object id and size in bytes."""

    sha: str
    size: int


def list_files(root: Path, commit: str | None) -> dict[str, Blob]:
    """Every regular file of the commit's tree: path → blob (empty for no commit)."""
    if commit is None:
        return {}
    with _git_step("read", "", commit[:12]):
        out = open_repo(root).git.ls_tree("-r", "-l", "-z", "--full-tree", commit)
    files = {}
    for entry in filter(None, out.split("\0")):
        meta, _, path = entry.partition("\t")
        mode, kind, sha, size = meta.split()
        if kind == "blob" and mode in ("100644", "100755"):
            files[path] = Blob(sha, int(size))
    return files


def read_blobs(root: Path, shas: Iterable[str]) -> dict[str, bytes]:
    """The bytes of these blobs (one git process for them all)."""
    with _git_step("read", "", "blobs"):
        repo = open_repo(root)
        return {sha: bytes(repo.odb.stream(bytes.fromhex(sha)).read()) for sha in set(shas)}


def commit_files(root: Path, parent: str | None, files: Mapping[str, bytes], message: str) -> str:
    """A new commit: ``parent``'s tree plus ``files``; nothing checked out, nothing moved."""
    with _git_step("build a commit for", "", "history"):
        return _commit(open_repo(root), parent, files, message)


def _commit(repo: git.Repo, parent: str | None, files: Mapping[str, bytes], message: str) -> str:
    with tempfile.TemporaryDirectory(prefix="perfctl-history-") as tmp:
        env = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
        if parent is not None:
            repo.git.read_tree(parent, env=env)
        paths = sorted(files)
        for i, path in enumerate(paths):
            Path(tmp, f"blob-{i}").write_bytes(files[path])
        listing = Path(tmp, "blobs")
        listing.write_text("".join(f"{tmp}/blob-{i}\n" for i in range(len(paths))))
        with listing.open("rb") as fh:  # one process for every blob
            shas = repo.git.hash_object("-w", "--no-filters", "--stdin-paths", istream=fh).split()
        info = Path(tmp, "index-info")
        info.write_text("".join(f"100644 {s}\t{p}\n" for s, p in zip(shas, paths, strict=True)))
        with info.open("rb") as fh:
            repo.git.update_index("--add", "--index-info", istream=fh, env=env)
        tree = repo.git.write_tree(env=env)
        parents = ["-p", parent] if parent is not None else []
        return str(repo.git.commit_tree(tree, *parents, "-m", message, env=IDENTITY))


def push(root: Path, remote: str, branch: str, commit: str, parent: str | None) -> None:
    """Push ``commit`` (built on ``parent``) as the branch, never forced.

    :class:`Raced` when the branch moved on meanwhile: git's wording for that
    differs between servers, so a refused push is judged by asking the remote
    where the branch is now, not by its message.
    """
    repo = open_repo(root)
    try:
        # --no-verify: the user's pre-push hooks are for their code, not this branch.
        repo.git.push("--porcelain", "--quiet", "--no-verify", remote,
                      f"{commit}:refs/heads/{branch}", env=NET)  # fmt: skip
    except gitexc.GitCommandError as exc:
        said = f"{exc.stdout or ''} {exc.stderr or ''}"
        if any(mark in said for mark in _RACE) or remote_tip(root, remote, branch) != parent:
            raise Raced(clean(said)[:200]) from exc
        raise _error("push", remote, branch, exc) from exc
    except (gitexc.GitError, OSError) as exc:
        raise _error("push", remote, branch, exc) from exc
    with contextlib.suppress(gitexc.GitError):
        repo.git.update_ref(PRIVATE_REF + branch, commit)  # only a cache of the remote
