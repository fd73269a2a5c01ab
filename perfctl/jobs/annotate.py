"""`compare --profile`: py-spy profiles of chosen regimes added to a stored comparison."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from perfctl.config import Config
from perfctl.model import OK, Comparison
from perfctl.profile import PROFILE_SECONDS
from perfctl.store.local import open_store
from perfctl.store.lock import project_lock


def profile_comparison(
    config: Config,
    c: Comparison,
    which: str,
    progress: Callable[[str], None] | None = None,
    regimes: tuple[str, ...] = (),
    duration: float | None = None,
    lock_wait: float | None = None,
) -> Comparison:
    """py-spy profile the chosen regimes on both refs (``duration`` s each, default
    PROFILE_SECONDS) and link the artefacts (``lock_wait``: compare's --lock-wait)."""
    from perfctl import envs
    from perfctl.jobs import profile as profiling
    from perfctl.model import IMPROVED, REGRESSED

    wanted = {"regressed": (REGRESSED,), "improved": (IMPROVED,), "all": (REGRESSED, IMPROVED)}.get(
        which, ()
    )
    chosen = [
        r
        for r in c.regimes
        if r.verdict in wanted or (which == "all" and r.base_status == OK and r.head_status == OK)
    ]
    if not chosen:
        return c
    # compare's own lock is released by now; this one waits as long as compare's did.
    with project_lock(config.state_dir, wait=lock_wait, what="compare --profile"):
        targets = [
            envs.prepare_target(config, ref.ref if ref.ref == "WORKTREE" else ref.sha)
            for ref in (c.base, c.head)
        ]
        rows = {r.name: r for r in c.regimes}
        for r in chosen:
            if progress:
                progress(f"profiling {r.name} on both refs")
            diff = profiling.profile_pair(
                config, r.name, targets[0], targets[1], regimes=regimes,
                duration=PROFILE_SECONDS if duration is None else duration,
            )  # fmt: skip
            rows[r.name] = replace(r, artifacts={**r.artifacts, **diff.artifacts()})
        out = replace(c, regimes=tuple(rows[r.name] for r in c.regimes))
        open_store(config.state_dir, config.store_url).save_comparison(out)
    return out
