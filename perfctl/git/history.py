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

import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import git
from git import exc as gitexc

from perfctl.errors import PerfctlError, UsageError
from perfctl.git.refs import open_repo

PRIVATE_REF = "refs/perfctl/history/"
IDENTITY = {
    "GIT_AUTHOR_NAME": "perfctl",
    "GIT_AUTHOR_EMAIL": "perfctl@users.noreply.github.com",
    "GIT_COMMITTER_NAME": "perfctl",
    "GIT_COMMITTER_EMAIL": "perfctl@users.noreply.github.com",
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
        if bad or "//" in name:
            raise UsageError(
                f"the history {what} {name[:60]!r} is not a plain git name",
                f"use letters, digits, '.', '_', '-' and '/', e.g. "
                f"{'origin' if what == 'remote' else 'perfctl-data'}",
            )


def clean(text: str) -> str:
    """Git's message with credentials in URLs removed, on one line."""
    return " ".join(_CREDENTIALS.sub("***@", text).split())


def _error(action: str, remote: str, branch: str, exc: gitexc.GitCommandError) -> HistoryError:
    said = str(exc.stderr or exc.stdout or exc).strip()
    said = re.sub(r"^stderr: '(.*)'$", r"\1", said, flags=re.S)  # gitpython's wrapping
    why = clean(said)[:300]
    return HistoryError(
        f"could not {action} the history branch {branch!r} of remote {remote!r}: {why}",
        "check that the remote exists and this job may read and write it (in GitHub "
        "Actions: `permissions: contents: write`); the results are kept in the local store",
    )


def fetch(root: Path, remote: str, branch: str) -> str | None:
    """Fetch the branch into the private ref; its commit, or None if it does not exist yet."""
    repo = open_repo(root)
    private = PRIVATE_REF + branch
    try:
        repo.git.ls_remote("--exit-code", "--heads", remote, f"refs/heads/{branch}")
    except gitexc.GitCommandError as exc:
        if exc.status == 2:  # --exit-code: the remote answered, it has no such branch
            _drop(repo, private)
            return None
        raise _error("read", remote, branch, exc) from exc
    try:
        repo.git.fetch("--no-tags", "--quiet", remote, f"+refs/heads/{branch}:{private}")
    except gitexc.GitCommandError as exc:
        raise _error("fetch", remote, branch, exc) from exc
    return str(repo.git.rev_parse("--verify", f"{private}^{{commit}}"))


def _drop(repo: git.Repo, ref: str) -> None:
    try:
        repo.git.update_ref("-d", ref)
    except gitexc.GitCommandError:
        pass  # there was none


def list_files(root: Path, commit: str | None) -> dict[str, str]:
    """Every file of the commit's tree: path → blob sha (empty for no commit)."""
    if commit is None:
        return {}
    out = open_repo(root).git.ls_tree("-r", "-z", "--full-tree", commit)
    files = {}
    for entry in filter(None, out.split("\0")):
        meta, _, path = entry.partition("\t")
        mode, kind, sha = meta.split()
        if kind == "blob" and mode in ("100644", "100755"):
            files[path] = sha
    return files


def read_blob(root: Path, sha: str) -> bytes:
    """One blob's bytes."""
    repo = open_repo(root)
    return bytes(repo.odb.stream(bytes.fromhex(sha)).read())


def commit_files(root: Path, parent: str | None, files: Mapping[str, bytes], message: str) -> str:
    """A new commit: ``parent``'s tree plus ``files``; nothing checked out, nothing moved."""
    repo = open_repo(root)
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


def push(root: Path, remote: str, branch: str, commit: str) -> None:
    """Push ``commit`` as the branch, never forced; :class:`Raced` when it moved on."""
    repo = open_repo(root)
    try:
        repo.git.push("--porcelain", "--quiet", remote, f"{commit}:refs/heads/{branch}")
    except gitexc.GitCommandError as exc:
        said = f"{exc.stdout or ''} {exc.stderr or ''}"
        if any(mark in said for mark in _RACE):
            raise Raced(clean(said)[:200]) from exc
        raise _error("push", remote, branch, exc) from exc
    repo.git.update_ref(PRIVATE_REF + branch, commit)
