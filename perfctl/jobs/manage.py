"""`perfctl runs`, `perfctl comparisons` and `perfctl clean`: what the store holds, and removing it.

`clean` removes only what perfctl made: each kind is removed by the stage that
made it, and each removes only entries its own records list
(:meth:`perfctl.store.local.SqliteStore.remove_all`, :func:`perfctl.envs.remove_envs`,
:func:`perfctl.git.refs.remove_worktrees`). A store that holds files git tracks is
shared with the user's own files, so it is refused outright.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from perfctl.config import Config
from perfctl.errors import ConfigError
from perfctl.model import Comparison, Run


def _where(config: Config) -> str:
    """The store as shown to people: its directory, or its URL without the password."""
    from perfctl.store.url import redact

    return redact(config.store_url) if config.store_url else str(config.state_dir)


def stored_runs(project: Path | None) -> tuple[list[Run], str]:
    """Every stored run (newest first) and where the store is."""
    from perfctl.config import load_config
    from perfctl.store.local import open_store

    config = load_config(project)
    return open_store(config.state_dir, config.store_url).list_runs(), _where(config)


def stored_comparisons(project: Path | None) -> tuple[list[Comparison], str]:
    """Every stored comparison (newest first) and where the store is."""
    from perfctl.config import load_config
    from perfctl.store.local import open_store

    config = load_config(project)
    store = open_store(config.state_dir, config.store_url)
    return store.list_comparisons(), _where(config)


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


def clean(project: Path | None, *, worktrees: bool, envs: bool, results: bool) -> list[str]:
    """Remove what perfctl made (all three kinds when no flag is given); one line per kind."""
    from perfctl import envs as envs_mod
    from perfctl.config import load_config
    from perfctl.git import refs as gitrefs
    from perfctl.store.local import open_store
    from perfctl.store.lock import project_lock

    config = load_config(project)
    check_store(config)
    everything = not (worktrees or envs or results)
    said: list[str] = []
    with project_lock(config.state_dir, what="clean"):
        if (worktrees or everything) and (config.root / ".git").exists():
            n = gitrefs.remove_worktrees(config.root, config.state_dir)
            said.append(f"removed {n} worktree(s)")
        if envs or everything:
            said.append(f"removed {envs_mod.remove_envs(config.state_dir)} environment(s)")
        if everything and config.store_url:
            from perfctl.store.url import redact

            said.append(f"kept the shared store {redact(config.store_url)}")
        elif results or everything:
            store = open_store(config.state_dir, config.store_url)
            said.append(f"removed {store.remove_all()} stored record(s)")
    return said
