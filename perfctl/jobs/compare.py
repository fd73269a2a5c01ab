"""`perfctl compare BASE HEAD`: the main job, as a dozen stage calls.

resolve refs → worktrees + environments → probe regimes on both sides →
interleaved measurement per regime (saved after each) → statistics with
Benjamini–Hochberg correction → verdicts → stored Comparison.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from perfctl.config import Config
from perfctl.envs import Target
from perfctl.errors import RegimeLoadError
from perfctl.jobs.results import (
    side_result,
    unmeasurable,
    with_confirmed,
    with_limits,
    with_load,
    with_quiet,
)
from perfctl.jobs.run import new_run, subjects_env
from perfctl.jobs.settings import COMPARE_DEFAULT as COMPARE_DEFAULT
from perfctl.jobs.settings import COMPARE_FAST as COMPARE_FAST
from perfctl.jobs.settings import COMPARE_RIGOROUS as COMPARE_RIGOROUS
from perfctl.jobs.settings import CompareSettings as CompareSettings
from perfctl.jobs.settings import check_placement, isolated_notice, stopping_rule
from perfctl.jobs.settings import settings_for as settings_for
from perfctl.jobs.shard import split
from perfctl.measure import counters, duo, interleave, runner
from perfctl.measure.executor import PYPERF, Executor
from perfctl.measure.interleave import SIDES, SideData
from perfctl.measure.quiet import Quiet
from perfctl.model import (
    Comparison,
    Fact,
    Notice,
    RefInfo,
    RegimeInfo,
    RegimeResult,
    Run,
    finished_status,
)
from perfctl.regimes import discovery
from perfctl.store.local import Store, new_id, open_store, slug, utcnow

Progress = Callable[[str], None]


def facts_once(say: Progress) -> Progress:
    """``say``, but each :class:`~perfctl.model.Fact` (about the machine, a reused
    environment) is said once for all the comparisons made through it; every other
    message passes."""
    said: set[str] = set()

    def tell(msg: str) -> None:
        if isinstance(msg, Fact):
            if msg in said:
                return
            said.add(str(msg))
        say(msg)

    return tell


@dataclass
class _Side:
    target: Target
    run: Run
    infos: dict[str, RegimeInfo]
    load_error: str = ""


def compare_refs(
    config: Config,
    base: str,
    head: str,
    *,
    regimes: list[str] | None = None,
    settings: CompareSettings | None = None,
    progress: Progress | None = None,
    executor: Executor = PYPERF,
) -> Comparison:
    """Measure BASE against HEAD, store the Comparison and return it.

    ``executor`` runs every process (environments, probes, pyperf workers); tests
    pass a scripted one.
    """
    from perfctl.store.lock import project_lock

    settings = settings or COMPARE_DEFAULT
    check_placement(settings.schedule.affinity)
    if regimes:
        settings = replace(settings, globs=tuple(regimes))
    say = progress or (lambda _msg: None)
    if notice := isolated_notice(settings.schedule.affinity, settings.schedule.measure):
        say(Fact(notice))
    with project_lock(config.state_dir, wait=settings.lock_wait, what="compare"):
        store = open_store(config.state_dir, config.store_url)
        files = _regime_files(config, settings)
        sides = _prepare(config, base, head, files, settings, say, executor)
        key = _resume_key(sides, files, settings)
        done = _attach_runs(config, store, sides, key, settings, say)
        names, family = _selected(sides, settings)
        # Sampled around every regime: a 1-minute average would miss a busy spell
        # in the middle of a long comparison.
        loads = [executor.load()]
        quiet = Quiet(settings.schedule.burst_wait, cpus=settings.schedule.affinity)
        measured = {}
        for n in names:
            measured[n] = done.get(n) or _measure_regime(
                config, store, sides, files, n, settings, say, executor, quiet, family
            )
            loads.append(executor.load())
        comparison = _assemble(config, sides, measured, settings)
        if settings.confirm:
            comparison = _confirm(
                config, store, sides, files, comparison, settings, say, executor, quiet
            )
        comparison = with_limits(with_quiet(with_load(comparison, loads), quiet))
        if settings.schedule.measure == "instructions":
            from perfctl.jobs.instructions import link_diffs

            comparison = link_diffs(config, comparison)
        for s in sides.values():
            store.finish_run(s.run.id, finished_status(store.load_run(s.run.id).results))
        store.save_comparison(comparison)
        if key:
            store.clear_pending(key)
    return comparison


def _resume_key(sides: dict[str, _Side], files: list[Path], settings: CompareSettings) -> str:
    """Identifies an interrupted comparison of the same commits, files and settings."""
    import hashlib
    import json

    refs = [sides[s].target.ref for s in SIDES]
    if any(r.dirty or not r.sha for r in refs):
        return ""  # uncommitted edits may have changed since: never resume those
    blob = json.dumps([[r.sha for r in refs], [str(f) for f in files], repr(settings)])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _attach_runs(
    config: Config,
    store: Store,
    sides: dict[str, _Side],
    key: str,
    settings: CompareSettings,
    say: Progress,
) -> dict[str, dict[str, RegimeResult]]:
    """Continue the runs of an interrupted comparison, or begin new ones."""
    prior = store.pending(key) if key else None
    if prior is None:
        for side in SIDES:
            said: dict[str, object] = {"compare": settings.name, "side": side}
            if settings.schedule.affinity:  # the run alone (history, --mix-runs) says it too
                said["affinity"] = list(settings.schedule.affinity)
            run = new_run(config, sides[side].target.ref, said)
            store.begin_run(run)
            sides[side].run = run
        if key:
            store.mark_pending(key, {s: sides[s].run.id for s in SIDES})
        return {}
    for side in SIDES:
        sides[side].run = prior[side]
    results = {s: {r.name: r for r in prior[s].results} for s in SIDES}
    done = {n: {s: results[s][n] for s in SIDES} for n in results["base"] if n in results["head"]}
    say(Notice(f"resuming an interrupted comparison: {len(done)} regime(s) already measured"))
    return done


def _prepare(
    config: Config,
    base: str,
    head: str,
    files: list[Path],
    settings: CompareSettings,
    say: Progress,
    executor: Executor,
) -> dict[str, _Side]:
    out: dict[str, _Side] = {}
    for side, ref in zip(SIDES, (base, head), strict=True):
        say(f"preparing the {side} environment ({ref})")  # envs says whether it builds
        target = executor.prepare(config, ref, rebuild=settings.rebuild, log=say)
        env = {**target.env, **subjects_env(config, settings.subjects)}
        target = replace(target, env=env)
        infos, error = _probe(executor, target, files, config.inherit_environ)
        out[side] = _Side(target, None, infos, error)  # type: ignore[arg-type]
    return out


def _regime_files(config: Config, settings: CompareSettings) -> list[Path]:
    if not settings.regimes_from:
        return discovery.regime_files(config, settings.regimes)
    from perfctl.git import refs as gitrefs

    ref = gitrefs.resolve_ref(config.root, settings.regimes_from)
    tree = gitrefs.ensure_worktree(config.root, config.state_dir, ref.sha)
    files = discovery.regime_files(replace(config, root=tree), settings.regimes)
    return files


def _probe(
    executor: Executor, target: Target, files: list[Path], inherit: tuple[str, ...]
) -> tuple[dict[str, RegimeInfo], str]:
    try:
        infos = executor.probe(target, files, inherit)
    except RegimeLoadError as exc:
        # An old ref may lack what the regimes import: that side fails, the other runs.
        return {}, exc.message
    return {i.name: i for i in infos}, ""


def _selected(sides: dict[str, _Side], settings: CompareSettings) -> tuple[list[str], int]:
    """The regimes to measure here, and how many the correction counts (every shard's)."""
    merged: dict[str, RegimeInfo] = {}
    for side in SIDES:
        merged.update(sides[side].infos)
    if not merged:
        errors = "; ".join(sides[s].load_error for s in SIDES if sides[s].load_error)
        raise RegimeLoadError(errors or "no regimes found", "fix the regimes file")
    chosen = discovery.select(list(merged.values()), settings.globs, settings.family)
    family = len(chosen)
    if settings.shard is not None:
        chosen = split(chosen, settings.shard)
    return [c.name for c in chosen], family


def _worker(
    config: Config, side: _Side, files: list[Path], affinity: tuple[int, ...]
) -> runner.Worker:
    t = side.target
    return runner.Worker(t.python, t.cwd, t.env, tuple(files), config.inherit_environ, affinity)


def _measure_regime(
    config: Config,
    store: Store,
    sides: dict[str, _Side],
    files: list[Path],
    name: str,
    settings: CompareSettings,
    say: Progress,
    executor: Executor,
    quiet: Quiet,
    family: int,
) -> dict[str, RegimeResult]:
    infos = {s: sides[s].infos.get(name) for s in SIDES}
    early = unmeasurable({s: sides[s].load_error or "" for s in SIDES}, infos, name)
    if early:
        return _save_results(store, sides, early, {})
    info = infos["base"] or infos["head"]
    assert info is not None
    workers = {s: _worker(config, sides[s], files, settings.schedule.affinity) for s in SIDES}
    logs = {s: config.state_dir / "logs" / sides[s].run.id / f"{slug(name)}.log" for s in SIDES}

    pairing, band = settings.schedule.pairing, (infos["head"] or info).threshold  # head's band
    clear = stopping_rule(settings, pairing, family, band)

    def say_round(r: int) -> None:
        say(f"{name}: round {r}")

    def hold(left: float) -> float:
        return quiet.hold(executor, name, say, left)

    started = executor.now()
    with interleave.workdir() as tmp:
        if settings.schedule.measure != "time":
            data = counters.measure_pair(
                workers, info, settings.schedule, logs, Path(tmp), say_round
            )
            if settings.schedule.measure == "instructions":
                from perfctl.jobs import instructions

                runs = {s: sides[s].run.id for s in SIDES}
                instructions.keep_graphs(config, runs, name, info.ops, Path(tmp), data)
        elif pairing == "auto":
            data = duo.measure_auto(
                workers, info, settings.schedule, logs, Path(tmp),
                partial(stopping_rule, settings, family=family, band=band), say_round, executor,
                hold,
            )  # fmt: skip
        elif pairing == "same-process":
            data = duo.measure_same_process(
                workers, info, settings.schedule, logs, Path(tmp), clear, say_round, executor, hold
            )
        else:
            data = interleave.measure_pair(
                workers, info, settings.schedule, logs, Path(tmp), clear, say_round, executor, hold
            )
        took = round(executor.now() - started, 2)
        results = {
            s: side_result(infos[s] or info, data[s], logs[s], Path(tmp), s, took) for s in SIDES
        }
        return _save_results(store, sides, results, _merged(data, Path(tmp)))


def _merged(data: dict[str, SideData], tmp: Path) -> dict[str, Path | None]:
    """Each side's pyperf files joined into one (what the store keeps beside the result)."""
    return {s: interleave.merge_pyperf(data[s].files, tmp / f"{s}-all.json") for s in SIDES}


def _save_results(
    store: Store,
    sides: dict[str, _Side],
    results: dict[str, RegimeResult],
    files: dict[str, Path | None],
) -> dict[str, RegimeResult]:
    return {s: store.save_result(sides[s].run.id, results[s], files.get(s)) for s in SIDES}


def _assemble(
    config: Config,
    sides: dict[str, _Side],
    measured: dict[str, dict[str, RegimeResult]],
    settings: CompareSettings,
) -> Comparison:
    from perfctl.git import refs as gitrefs
    from perfctl.measure.machine import fingerprint
    from perfctl.stats import verdicts

    refs = {s: sides[s].target.ref for s in SIDES}
    rows = verdicts.decide_all(
        measured,
        threshold=settings.threshold,
        alpha=settings.alpha,
        seed=settings.schedule.seed,
        pairing=settings.schedule.pairing,
    )
    commits: tuple[RefInfo, ...] = ()
    if refs["base"].sha and refs["head"].sha:
        commits = gitrefs.commits_between(config.root, refs["base"].sha, refs["head"].sha)
    return Comparison(
        id=new_id(),
        created=utcnow(),
        base=refs["base"],
        head=refs["head"],
        machine=fingerprint(),
        regimes=tuple(rows),
        threshold=settings.threshold,
        alpha=settings.alpha,
        commits=commits,
        base_run=sides["base"].run.id,
        head_run=sides["head"].run.id,
        settings={
            "preset": settings.name,
            **settings.schedule.__dict__,
            "confirm": settings.confirm,
            # What was asked for: `plan` tells a whole-suite comparison from a narrower one.
            "globs": list(settings.globs),
            "family": settings.family,
            "shard": dataclasses.asdict(settings.shard) if settings.shard else None,
        },
    )


def _confirm(
    config: Config,
    store: Store,
    sides: dict[str, _Side],
    files: list[Path],
    c: Comparison,
    settings: CompareSettings,
    say: Progress,
    executor: Executor,
    quiet: Quiet,
) -> Comparison:
    """Re-measure regressed regimes with a fresh seed; keep the regression only if it holds."""
    from perfctl.model import REGRESSED
    from perfctl.stats import verdicts

    flagged = [r.name for r in c.regimes if r.verdict == REGRESSED]
    if not flagged:
        return c
    again = replace(settings, schedule=replace(settings.schedule, seed=settings.schedule.seed + 1))
    remeasured = {
        n: _measure_regime(
            config, store, sides, files, n, again, say, executor, quiet, len(flagged)
        )
        for n in flagged
    }
    rows = {
        r.name: r
        for r in verdicts.decide_all(
            remeasured,
            threshold=settings.threshold,
            alpha=settings.alpha,
            seed=1,
            pairing=settings.schedule.pairing,
        )
    }
    return with_confirmed(c, rows)
