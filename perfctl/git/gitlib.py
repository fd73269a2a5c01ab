"""GitPython, imported once: without a ``git`` executable it is an Error line, not a crash.

GitPython refuses to import when it cannot run ``git --version`` (``ImportError: Bad
git executable``); every module of this stage imports it from here so that case is
one ``Error:``/``Hint:`` (exit 3) wherever it is first met.
"""

from __future__ import annotations

from perfctl.errors import GitMissing

try:
    import git
    from git import exc as gitexc
except ImportError as _exc:
    if "git executable" not in str(_exc).lower():
        raise  # GitPython itself is missing: an install problem, shown as such
    raise GitMissing(
        "git is not installed or not on PATH (perfctl reads refs and builds worktrees with it)",
        "install git (apt-get install git), or set GIT_PYTHON_GIT_EXECUTABLE to its path",
    ) from None

__all__ = ["git", "gitexc"]
