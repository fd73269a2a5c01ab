"""`perfctl runs`, `perfctl comparisons` and `perfctl clean`: what the store holds, and removing it."""

from __future__ import annotations

from pathlib import Path

from perfctl.model import Comparison, Run


def stored_runs(project: Path | None) -> tuple[list[Run], Path]:
    """Every stored run (newest first) and the store's directory."""
    from perfctl.config import load_config
    from perfctl.store.local import open_store

    config = load_config(project)
    return open_store(config.state_dir).list_runs(), config.state_dir


def stored_comparisons(project: Path | None) -> tuple[list[Comparison], Path]:
    """Every stored comparison (newest first) and the store's directory."""
    from perfctl.config import load_config
    from perfctl.store.local import open_store

    config = load_config(project)
    return open_store(config.state_dir).list_comparisons(), config.state_dir


def clean(project: Path | None, *, worktrees: bool, envs: bool, results: bool) -> list[str]:
    """Remove what perfctl made (all three kinds when no flag is given); one line per kind."""
    from perfctl import envs as envs_mod
    from perfctl.config import load_config
    from perfctl.git import refs as gitrefs
    from perfctl.store.local import open_store
    from perfctl.store.lock import project_lock

    config = load_config(project)
    everything = not (worktrees or envs or results)
    said: list[str] = []
    with project_lock(config.state_dir, what="clean"):
        if (worktrees or everything) and (config.root / ".git").exists():
            n = gitrefs.remove_worktrees(config.root, config.state_dir)
            said.append(f"removed {n} worktree(s)")
        if envs or everything:
            said.append(f"removed {envs_mod.remove_envs(config.state_dir)} environment(s)")
        if results or everything:
            said.append(f"removed {open_store(config.state_dir).remove_all()} stored record(s)")
    return said
