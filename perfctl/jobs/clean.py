"""`perfctl clean`: remove what perfctl made, and only that.

Each kind is removed by the stage that made it, and each removes only entries
its own records list (see :func:`perfctl.store.local.SqliteStore.remove_all`,
:func:`perfctl.envs.remove_envs`, :func:`perfctl.git.refs.remove_worktrees`).
A store that holds files git tracks is refused outright: it is shared with the
user's own files, so nothing in it is removed.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from perfctl.config import Config
from perfctl.errors import ConfigError


def tracked_files(root: Path, state_dir: Path) -> list[str]:
    """Files under ``state_dir`` that git tracks (none outside a git checkout)."""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--", str(state_dir.resolve())],
            capture_output=True,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except OSError:
        return []  # no git: nothing can be tracked
    if out.returncode != 0:
        return []  # not a checkout, or the store lies outside it
    return [os.fsdecode(name) for name in out.stdout.split(b"\0") if name]


def check_store(config: Config) -> None:
    """ConfigError (exit 2) when the store holds files git tracks."""
    tracked = tracked_files(config.root, config.state_dir)
    if tracked:
        more = f" and {len(tracked) - 3} more" if len(tracked) > 3 else ""
        raise ConfigError(
            f"the store {config.state_dir} holds files git tracks "
            f"({', '.join(tracked[:3])}{more}); refusing to clean it",
            'give perfctl a directory of its own: [tool.perfctl] store = ".perfctl" (the default)',
        )


def clean(
    config: Config, *, worktrees: bool, envs: bool, results: bool, say: Callable[[str], None]
) -> None:
    """Remove perfctl's worktrees, environments and/or stored records (all when none chosen)."""
    from perfctl import envs as envs_mod
    from perfctl.git import refs as gitrefs
    from perfctl.store.local import open_store
    from perfctl.store.lock import project_lock

    check_store(config)
    everything = not (worktrees or envs or results)
    with project_lock(config.state_dir, what="clean"):
        if (worktrees or everything) and (config.root / ".git").exists():
            say(f"removed {gitrefs.remove_worktrees(config.root, config.state_dir)} worktree(s)")
        if envs or everything:
            say(f"removed {envs_mod.remove_envs(config.state_dir)} environment(s)")
        if results or everything:
            say(f"removed {open_store(config.state_dir).remove_all()} stored record(s)")
