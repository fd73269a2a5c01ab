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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from perfctl.config import Config
from perfctl.errors import UsageError
from perfctl.git import history as branch_git
from perfctl.store import exchange
from perfctl.store.local import SqliteStore
from perfctl.store.lock import project_lock

ATTEMPTS = 8
HISTORY_DIRS = ("runs/", "comparisons/")
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
    skipped: tuple[str, ...] = ()  # local runs that cannot be exported whole


def history_store(config: Config) -> SqliteStore:
    """The local SQLite store; a PostgreSQL store keeps its own history (exit 2)."""
    if config.store_url:
        raise UsageError(
            "a history branch is for the local SQLite store, and this project uses a "
            "PostgreSQL store, which already keeps the history",
            "use the history branch with the local store (unset PERFCTL_STORE_URL or the "
            "`store` URL), or keep the history in the database and drop the branch",
        )
    return SqliteStore(config.state_dir)


def sync(
    config: Config,
    branch: str,
    remote: str = "origin",
    push: bool = True,
    progress: Callable[[str], None] | None = None,
    lock_wait: float | None = None,  # None: ci's default wait (it has no --lock-wait)
) -> SyncOutcome:
    """Pull the branch's records into the store, then push the store's new ones to it."""
    branch_git.check_names(remote, branch)
    store = history_store(config)
    say = progress or (lambda _m: None)
    with project_lock(config.state_dir, wait=lock_wait, what="sync"):
        say(f"fetching {remote}/{branch}")
        tip = branch_git.fetch(config.root, remote, branch)
        pulled = _pull(config.root, store, tip)
        outcome = SyncOutcome(remote, branch, pulled, pushing=push)
        return _push(config.root, store, outcome, tip, say) if push else outcome


def _pull(root: Path, store: SqliteStore, tip: str | None) -> exchange.Imported:
    on_branch = branch_git.list_files(root, tip)
    _check_is_history(on_branch)
    missing = exchange.wanted(store, on_branch)
    big = [p for p in missing if on_branch[p].size > exchange.MAX_FILE]
    small = [p for p in missing if p not in big]
    blobs = branch_git.read_blobs(root, (on_branch[p].sha for p in small))
    done = exchange.import_files(store, {p: blobs[on_branch[p].sha] for p in small})
    too_big = tuple(f"{p}: over {exchange.MAX_FILE // 2**20} MiB" for p in big)
    return replace(done, refused=done.refused + too_big)


def _check_is_history(on_branch: Mapping[str, object]) -> None:
    """Refuse a branch that holds anything but history files (``main`` by mistake)."""
    other = [p for p in on_branch if p != "README.md" and not p.startswith(HISTORY_DIRS)]
    if other:
        raise UsageError(
            f"the branch does not look like a perfctl history branch: it holds {other[0]!r}"
            f"{f' and {len(other) - 1} more files' if len(other) > 1 else ''}",
            "name a branch only perfctl writes (e.g. perfctl-data); a new name is created",
        )


def _push(
    root: Path,
    store: SqliteStore,
    outcome: SyncOutcome,
    tip: str | None,
    say: Callable[[str], None],
) -> SyncOutcome:
    mine, skipped = exchange.exportable(store)
    outcome = replace(outcome, skipped=tuple(skipped))
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
            branch_git.push(root, outcome.remote, outcome.branch, commit, tip)
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
    lines += [f"Warning: history {where}: not pushed: {why}" for why in outcome.skipped]
    return lines


def failed(why: str, branch: str) -> branch_git.HistoryError:
    """An unexpected failure of the history step, as an error that names it."""
    return branch_git.HistoryError(
        f"the history branch {branch!r} step failed: {why[:200]}",
        "run `perfctl sync BRANCH` to retry; the results are kept in the local store",
    )
