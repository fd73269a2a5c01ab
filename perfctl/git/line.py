"""The commits a bisection walks: BAD's first-parent line back to GOOD."""

from __future__ import annotations

from pathlib import Path

from perfctl.errors import GitError
from perfctl.git.refs import open_repo, resolve_ref
from perfctl.model import RefInfo


def first_parent_line(root: Path, good: str, bad: str) -> tuple[RefInfo, ...]:
    """GOOD, then every first-parent commit up to BAD, oldest first (``git bisect``'s line).

    Each RefInfo's ``date`` is the author date: when the change was written.
    """
    lo, hi = resolve_ref(root, good).sha, resolve_ref(root, bad).sha
    with open_repo(root) as repo:
        if lo == hi:
            raise GitError(
                f"`{good}` and `{bad}` are the same commit ({lo[:10]}): nothing to bisect",
                "give the last fast commit as GOOD and a later, slow one as BAD",
            )
        if not repo.is_ancestor(repo.commit(lo), repo.commit(hi)):
            raise GitError(
                f"`{good}` is not an ancestor of `{bad}`",
                "give the older, fast commit first: perfctl bisect GOOD BAD",
            )
        shas = str(repo.git.rev_list("--first-parent", "--reverse", f"{lo}..{hi}")).split()
        commits = [repo.commit(s) for s in [lo, *shas]]
        return tuple(
            RefInfo(c.hexsha[:10], c.hexsha, str(c.summary), c.authored_datetime.isoformat())
            for c in commits
        )
