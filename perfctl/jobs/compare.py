"""`perfctl compare BASE HEAD`: the main job, as a dozen stage calls.

resolve refs → worktrees + environments → probe regimes on both sides →
interleaved measurement per regime (saved after each) → statistics with
Benjamini–Hochberg correction → verdicts → stored Comparison.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from perfctl.config import Config
from perfctl.envs import Target
from perfctl.errors import RegimeLoadError, UsageError
from perfctl.jobs.run import new_run, subjects_env
from perfctl.jobs.shard import Shard, split
from perfctl.measure import counters, duo, interleave, runner
from perfctl.measure.executor import PYPERF, Executor
from perfctl.measure.interleave import SIDES, Schedule, SideData
from perfctl.measure.machine import busy_warning, load_average
from perfctl.model import (
    OK,
    Comparison,
    Notice,
    RefInfo,
    RegimeInfo,
    RegimeResult,
    Run,
    Status,
    finished_status,
)
from perfctl.regimes import discovery
from perfctl.store.local import Store, new_id, open_store, slug, utcnow

Progress = Callable[[str], None]


@dataclass(frozen=True)
class CompareSettings:
    """Precision, selection and decision settings of one comparison."""

    schedule: Schedule = Schedule()
    alpha: float = 0.05
    confirm: bool = False
    rebuild: bool = False
    regimes: tuple[str, ...] = ()  # --regimes paths
    regimes_from: str | None = None
    globs: tuple[str, ...] = ()
    family: str | None = None
    subjects: tuple[tuple[str, str], ...] = ()
    lock_wait: float = 600.0
    name: str = "default"
    shard: Shard | None = None  # --shard K/N: measure only this shard's regimes

    @property
    def threshold(self) -> float:
        """The noise band (relative change)."""
        return self.schedule.threshold


# Presets. Cost per regime on a 2-core VM at ~0.25 s per process: fast ≈ 3 s,
# default 3–15 s (stops once the answer is clear), rigorous 10–60 s.
FAST = CompareSettings(
    schedule=Schedule(rounds=6, max_rounds=6, values=2, time_budget=10), name="fast"
)
# Default: 10 rounds, then sequential sampling (one more round per check) up to 80 rounds
# or 60 s of measuring per regime, whichever comes first: ~95% power for a 5% change at
# a process CV of 5% (simulated; see benchmarks/README.md for the measured figure).
DEFAULT = CompareSettings()
RIGOROUS = CompareSettings(
    schedule=Schedule(rounds=20, max_rounds=80, time_budget=240), name="rigorous"
)


def settings_for(
    *,
    config: Config | None = None,
    fast: bool = False,
    rigorous: bool = False,
    rounds: int | None = None,
    max_rounds: int | None = None,
    values: int | None = None,
    min_time: float | None = None,
    time_budget: float | None = None,
    threshold: float | None = None,
    alpha: float | None = None,
    order: str = "abba",
    seed: int = 0,
    pairing: str = "process",
    clock: str = "wall",
    measure: str = "time",
    **kw: object,
) -> CompareSettings:
    """The settings chosen by flags: a preset, then config keys, then flags win.

    The config's ``rounds``/``time_budget`` tune the default preset only (an explicit
    ``--fast``/``--rigorous`` keeps its own); ``threshold``/``alpha`` always apply.
    """

    if fast and rigorous:
        raise UsageError("--fast and --rigorous exclude each other", "pick one")
    for flag, given in (
        ("--rounds", rounds),
        ("--max-rounds", max_rounds),
        ("--values", values),
        ("--min-time", min_time),
        ("--time-budget", time_budget),
    ):
        # `not given > 0` also refuses nan; inf would never stop.
        if given is not None and not 0 < given < math.inf:
            raise UsageError(f"{flag} must be a number above 0 (got {given:g})", "or leave it out")
    for flag, given in (("--threshold", threshold), ("--alpha", alpha)):
        if given is not None and not math.isfinite(given):
            raise UsageError(f"{flag} must be a number (got {given:g})", "or leave it out")
    if clock == "cpu" and pairing != "same-process":
        raise UsageError("--clock cpu needs --pairing same-process", "add --pairing same-process")
    if pairing == "same-process" and config is not None and config.install:
        raise UsageError(
            "same-process pairing needs install = false (both refs run from source)",
            "use --pairing process (the default) for this project",
        )
    if measure != "time":  # counters: their own band (0.5%) and rounds; flags still win
        threshold, rounds, max_rounds = counters.counter_settings(
            pairing, threshold, rounds, max_rounds
        )
    if config is not None:
        if not (fast or rigorous):
            rounds = rounds if rounds is not None else config.rounds
            time_budget = time_budget if time_budget is not None else config.time_budget
        threshold = threshold if threshold is not None else config.threshold
        alpha = alpha if alpha is not None else config.alpha
    s = FAST if fast else RIGOROUS if rigorous else DEFAULT
    sched = s.schedule
    first = rounds if rounds is not None else sched.rounds
    last = max(max_rounds if max_rounds is not None else max(sched.max_rounds, first), first)
    sched = replace(
        sched,
        rounds=first,
        max_rounds=last,
        values=values if values is not None else sched.values,
        min_time=min_time if min_time is not None else sched.min_time,
        time_budget=time_budget if time_budget is not None else sched.time_budget,
        order=order,
        seed=seed,
        pairing=pairing,
        clock=clock,
        measure=measure,
        threshold=threshold if threshold is not None else sched.threshold,
    )
    return replace(s, schedule=sched, alpha=alpha if alpha is not None else s.alpha, **kw)  # type: ignore[arg-type]


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

    settings = settings or DEFAULT
    if regimes:
        settings = replace(settings, globs=tuple(regimes))
    say = progress or (lambda _msg: None)
    with project_lock(config.state_dir, wait=settings.lock_wait, what="compare"):
        store = open_store(config.state_dir, config.store_url)
        files = _regime_files(config, settings)
        sides = _prepare(config, base, head, files, settings, say, executor)
        key = _resume_key(sides, files, settings)
        done = _attach_runs(config, store, sides, key, settings, say)
        names = _selected(sides, settings)
        # Sampled around every regime: a 1-minute average would miss a busy spell
        # in the middle of a long comparison.
        loads = [load_average()]
        measured = {}
        for n in names:
            measured[n] = done.get(n) or _measure_regime(
                config, store, sides, files, n, settings, say, executor
            )
            loads.append(load_average())
        comparison = _assemble(config, sides, measured, settings)
        if settings.confirm:
            comparison = _confirm(config, store, sides, files, comparison, settings, say, executor)
        comparison = _with_load(comparison, loads)
        for s in sides.values():
            store.finish_run(s.run.id, finished_status(store.load_run(s.run.id).results))
        store.save_comparison(comparison)
        if key:
            store.clear_pending(key)
    return comparison


def _with_load(c: Comparison, loads: list[float | None]) -> Comparison:
    """Record the load average around the measurement; warn when it competed for CPUs."""
    warning = busy_warning(loads, os.cpu_count())
    seen = [x for x in loads if x is not None]
    span = [min(seen), max(seen)] if seen else None
    return replace(
        c,
        settings={**c.settings, "load_average": span},
        warnings=(*c.warnings, warning) if warning else c.warnings,
    )


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
            run = new_run(config, sides[side].target.ref, {"compare": settings.name, "side": side})
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


def _selected(sides: dict[str, _Side], settings: CompareSettings) -> list[str]:
    merged: dict[str, RegimeInfo] = {}
    for side in SIDES:
        merged.update(sides[side].infos)
    if not merged:
        errors = "; ".join(sides[s].load_error for s in SIDES if sides[s].load_error)
        raise RegimeLoadError(errors or "no regimes found", "fix the regimes file")
    chosen = discovery.select(list(merged.values()), settings.globs, settings.family)
    if settings.shard is not None:
        chosen = split(chosen, settings.shard)
    return [c.name for c in chosen]


def _worker(config: Config, side: _Side, files: list[Path]) -> runner.Worker:
    t = side.target
    return runner.Worker(
        t.python,
        t.cwd,
        t.env,
        tuple(files),
        config.inherit_environ,
    )


def _measure_regime(
    config: Config,
    store: Store,
    sides: dict[str, _Side],
    files: list[Path],
    name: str,
    settings: CompareSettings,
    say: Progress,
    executor: Executor,
) -> dict[str, RegimeResult]:
    infos = {s: sides[s].infos.get(name) for s in SIDES}
    early = _unmeasurable(sides, infos, name)
    if early:
        return _save_results(store, sides, early, {})
    info = infos["base"] or infos["head"]
    assert info is not None
    workers = {s: _worker(config, sides[s], files) for s in SIDES}
    logs = {s: config.state_dir / "logs" / sides[s].run.id / f"{slug(name)}.log" for s in SIDES}

    paired = settings.schedule.pairing == "same-process"
    clear = stopping_rule(settings)

    def say_round(r: int) -> None:
        say(f"{name}: round {r}")

    with interleave.workdir() as tmp:
        if settings.schedule.measure != "time":
            data = counters.measure_pair(
                workers, info, settings.schedule, logs, Path(tmp), say_round
            )
        elif paired:
            data = duo.measure_same_process(
                workers, info, settings.schedule, logs, Path(tmp), clear, say_round, executor
            )
        else:
            data = interleave.measure_pair(
                workers, info, settings.schedule, logs, Path(tmp), clear, say_round, executor
            )
        results = {s: _result(infos[s] or info, data[s], logs[s], Path(tmp), s) for s in SIDES}
        merged = {
            s: interleave.merge_pyperf(data[s].files, Path(tmp) / f"{s}-all.json") for s in SIDES
        }
        return _save_results(store, sides, results, merged)


def stopping_rule(settings: CompareSettings) -> duo.IsClear:
    """The sequential-sampling check: whether the rounds so far give a clear answer."""
    from perfctl.stats import decision as stats
    from perfctl.stats.paired import compare_paired

    paired = settings.schedule.pairing == "same-process"

    def clear(b: list[tuple[float, ...]], h: list[tuple[float, ...]]) -> bool:
        change = compare_paired(b, h) if paired else stats.compare_sides(b, h)
        return stats.is_clear(change, threshold=settings.threshold, alpha=settings.alpha)

    return clear


def _unmeasurable(
    sides: dict[str, _Side], infos: dict[str, RegimeInfo | None], name: str
) -> dict[str, RegimeResult]:
    """Results for sides that cannot run this regime; empty if both can."""
    out: dict[str, RegimeResult] = {}
    for s in SIDES:
        info = infos[s]
        if info is None:
            reason = sides[s].load_error or "regime not defined for this ref"
            out[s] = RegimeResult(name=name, family="", status=Status.FAILED, reason=reason)
        elif info.skip_reason:
            out[s] = RegimeResult(
                name=name,
                family=info.family,
                status=Status.SKIPPED,
                reason=info.skip_reason,
                ops=info.ops,
            )
    if not out:
        return {}
    for s in SIDES:
        if s not in out:
            info = infos[s]
            assert info is not None
            out[s] = RegimeResult(
                name=name,
                family=info.family,
                status=Status.SKIPPED,
                ops=info.ops,
                reason="not measured: the other ref cannot run it",
                baseline=info.baseline,
                description=info.description,
            )
    return out


def _result(info: RegimeInfo, d: SideData, log: Path, tmp: Path, side: str) -> RegimeResult:
    return RegimeResult(
        name=info.name,
        family=info.family,
        status=OK if d.ok else Status.SKIPPED if d.skipped else Status.FAILED,
        ops=info.ops,
        unit=d.unit,
        processes=tuple(d.processes),
        order=tuple(d.order),
        reason=d.reason,
        log_path=str(log),
        baseline=info.baseline,
        description=info.description,
        params=info.params,
        metrics=runner.read_metrics(tmp / f"{side}-metrics.jsonl"),
        loops=d.loops,
        clock=info.clock,
    )


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
) -> Comparison:
    """Re-measure regressed regimes with a fresh seed; keep the regression only if it holds."""
    from perfctl.model import REGRESSED
    from perfctl.stats import verdicts

    flagged = [r.name for r in c.regimes if r.verdict == REGRESSED]
    if not flagged:
        return c
    again = replace(settings, schedule=replace(settings.schedule, seed=settings.schedule.seed + 1))
    remeasured = {
        n: _measure_regime(config, store, sides, files, n, again, say, executor) for n in flagged
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
    out = []
    for r in c.regimes:
        new = rows.get(r.name)
        if new is not None and new.verdict != REGRESSED:
            new = replace(new, reason=f"regression not confirmed on re-measure ({new.verdict})")
        out.append(new or r)
    return replace(
        c,
        regimes=tuple(out),
        warnings=(*c.warnings, f"re-measured {len(flagged)} flagged regime(s) with --confirm"),
    )


def profile_comparison(
    config: Config,
    c: Comparison,
    which: str,
    progress: Callable[[str], None] | None = None,
    regimes: tuple[str, ...] = (),
) -> Comparison:
    """py-spy profile the chosen regimes on both refs and link the artefacts."""
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
    targets = [
        envs.prepare_target(config, ref.ref if ref.ref == "WORKTREE" else ref.sha)
        for ref in (c.base, c.head)
    ]
    rows = {r.name: r for r in c.regimes}
    for r in chosen:
        if progress:
            progress(f"profiling {r.name} on both refs")
        diff = profiling.profile_pair(config, r.name, targets[0], targets[1], regimes=regimes)
        rows[r.name] = replace(r, artifacts={**r.artifacts, **diff.artifacts()})
    out = replace(c, regimes=tuple(rows[r.name] for r in c.regimes))
    open_store(config.state_dir, config.store_url).save_comparison(out)
    return out
