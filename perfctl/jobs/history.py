"""`perfctl sync` and `perfctl ci --history-branch`: keep the store's history on a git branch.

CI runners are thrown away after each job, and with them the SQLite store.
``sync`` pulls the records a history branch holds and the local store lacks,
then pushes the local records the branch lacks, as one new commit on top of
the branch. Records are never changed once written, so two runners that push
at once only ever *add* different files: the loser of a push race fetches the
new tip, rebuilds its commit on top of it and pushes again (with a growing,
jittered back-off), up to :data:`ATTEMPTS` times. Nothing is ever forced.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from perfctl.config import Config
from perfctl.errors import UsageError
from perfctl.git import history as branch_git
from perfctl.store import exchange
from perfctl.store.local import SqliteStore
from perfctl.store.lock import project_lock

ATTEMPTS = 8
BRANCH_README = """\
# perfctl history

This branch is written by `perfctl sync` / `perfctl ci --history-branch`: one
file per stored run (`runs/<id>/run.json` and its pyperf files) and per
comparison (`comparisons/<id>.json`), in perfctl's versioned JSON. Files are
only ever added. `perfctl sync BRANCH` in a checkout pulls them into the local
store; `perfctl report --history` then charts every point.
"""


@dataclass(frozen=True)
class SyncOutcome:
    """What a sync pulled and pushed."""

    remote: str
    branch: str
    pulled: exchange.Imported = field(default_factory=exchange.Imported)
    pushed_runs: int = 0
    pushed_comparisons: int = 0
    commit: str | None = None
    retries: int = 0
    pushing: bool = True  # False: --pull-only


def history_store(config: Config) -> SqliteStore:
    """The local SQLite store; a PostgreSQL store keeps its own history (exit 2)."""
    if config.store_url:
        raise UsageError(
            "a history branch is for the local SQLite store, and this project uses a "
            "PostgreSQL store, which already keeps the history",
            "drop --history-branch (or unset PERFCTL_STORE_URL / the `store` URL)",
        )
    return SqliteStore(config.state_dir)


def sync(
    config: Config,
    branch: str,
    remote: str = "origin",
    push: bool = True,
    progress: Callable[[str], None] | None = None,
) -> SyncOutcome:
    """Pull the branch's records into the store, then push the store's new ones to it."""
    branch_git.check_names(remote, branch)
    store = history_store(config)
    say = progress or (lambda _m: None)
    with project_lock(config.state_dir, what="sync"):
        say(f"fetching {remote}/{branch}")
        tip = branch_git.fetch(config.root, remote, branch)
        pulled = _pull(config.root, store, tip)
        outcome = SyncOutcome(remote, branch, pulled, pushing=push)
        return _push(config.root, store, outcome, tip, say) if push else outcome


def _pull(root: Path, store: SqliteStore, tip: str | None) -> exchange.Imported:
    on_branch = branch_git.list_files(root, tip)
    missing = exchange.wanted(store, on_branch)
    if not missing:
        return exchange.Imported()
    return exchange.import_files(
        store, {p: branch_git.read_blob(root, on_branch[p]) for p in missing}
    )


def _push(
    root: Path,
    store: SqliteStore,
    outcome: SyncOutcome,
    tip: str | None,
    say: Callable[[str], None],
) -> SyncOutcome:
    mine = exchange.exportable(store)
    for attempt in range(ATTEMPTS):
        on_branch = branch_git.list_files(root, tip)
        new = {p: f for p, f in mine.items() if p not in on_branch}
        if not new:
            return outcome  # everything is there already (another runner, or an earlier sync)
        files = {p: f.read_bytes() for p, f in new.items()}
        if "README.md" not in on_branch:
            files["README.md"] = BRANCH_README.encode()
        runs = sum(p.endswith("/run.json") for p in new)
        comps = sum(p.startswith("comparisons/") for p in new)
        message = f"perfctl: add {_count(runs, 'run')} and {_count(comps, 'comparison')}"
        commit = branch_git.commit_files(root, tip, files, message)
        try:
            branch_git.push(root, outcome.remote, outcome.branch, commit)
        except branch_git.Raced:
            if attempt == ATTEMPTS - 1:
                break
            # Another runner pushed first: wait a little (jittered, so racers part), refetch.
            time.sleep(min(8.0, 0.25 * 2**attempt) * (0.5 + random.random()))  # noqa: S311
            say(f"{outcome.remote}/{outcome.branch} moved on; retrying ({attempt + 1})")
            tip = branch_git.fetch(root, outcome.remote, outcome.branch)
            _pull(root, store, tip)
            continue
        return replace(
            outcome, pushed_runs=runs, pushed_comparisons=comps, commit=commit, retries=attempt
        )
    raise branch_git.HistoryError(
        f"{outcome.remote}/{outcome.branch} kept moving: {ATTEMPTS} pushes lost the race",
        "run `perfctl sync` again later; the results are kept in the local store",
    )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def describe(outcome: SyncOutcome, quiet: bool = False) -> list[str]:
    """The lines `sync` and `ci` print about it (``quiet``: no line for an empty pull)."""
    where = f"{outcome.remote}/{outcome.branch}"
    p = outcome.pulled
    pulled = f"{_count(p.runs, 'run')} and {_count(p.comparisons, 'comparison')}"
    lines = [] if quiet and not (p.runs or p.comparisons) else [f"history {where}: pulled {pulled}"]
    if outcome.commit is None and outcome.pushing and not quiet:
        lines.append(f"history {where}: nothing new to push")
    if outcome.commit:
        n = outcome.retries
        retried = f", after {n} retr{'y' if n == 1 else 'ies'}" if n else ""
        lines.append(
            f"history {where}: pushed {_count(outcome.pushed_runs, 'run')} and "
            f"{_count(outcome.pushed_comparisons, 'comparison')} "
            f"(commit {outcome.commit[:12]}{retried})"
        )
    lines += [f"Warning: history {where}: refused {why}" for why in p.refused]
    return lines
