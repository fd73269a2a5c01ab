"""`perfctl run`: measure every selected regime of one checkout and store it."""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from perfctl import __version__
from perfctl.config import Config
from perfctl.measure import procs, runner
from perfctl.model import OK, RefInfo, RegimeInfo, RegimeResult, Run, Status, finished_status
from perfctl.regimes import discovery
from perfctl.store.local import Store, new_id, open_store, utcnow

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class RunOptions:
    """What `perfctl run` measures and how precisely."""

    regimes: tuple[str, ...] = ()  # --regimes paths (else config)
    globs: tuple[str, ...] = ()  # --regime GLOB
    family: str | None = None
    precision: runner.Precision = runner.PRECISION_DEFAULT
    subjects: tuple[tuple[str, str], ...] = ()  # --subject family=module:factory
    lock_wait: float = 600.0
    # "time" (pyperf), "instructions" (callgrind) or "memory" (tracemalloc): measure/counters.py
    measure: str = "time"
    affinity: tuple[int, ...] = ()  # --affinity: CPUs every timed worker is pinned to


def precision_for(
    fast: bool,
    rigorous: bool,
    processes: int | None,
    values: int | None,
    min_time: float | None,
    measure: str = "time",
) -> runner.Precision:
    """The runner Precision chosen by `run`'s flags: a preset, then the numbers given.

    Counters take 3 processes unless ``--processes`` says otherwise (their CV is ~0).
    """
    from dataclasses import replace

    from perfctl.jobs.settings import one_preset

    one_preset(fast, rigorous)
    if processes is None and measure != "time":
        from perfctl.measure.counters import PROCESSES

        processes = PROCESSES
    base = (
        runner.PRECISION_FAST
        if fast
        else (runner.PRECISION_RIGOROUS if rigorous else runner.PRECISION_DEFAULT)
    )
    return replace(
        base,
        processes=processes or base.processes,
        values=values or base.values,
        min_time=min_time or base.min_time,
    )


def list_regimes(config: Config, paths: Sequence[str], family: str | None) -> list[RegimeInfo]:
    """The regimes `perfctl list` shows: probed in the current checkout, ``family`` only."""
    from perfctl.envs import current_target

    target = current_target(config)
    files = discovery.regime_files(config, list(paths))
    found = discovery.probe(
        target.python, files, cwd=target.cwd, env=target.env, inherit=config.inherit_environ
    )
    return discovery.select(found, [], family)


def subjects_env(config: Config, cli: Sequence[tuple[str, str]]) -> dict[str, str]:
    """PERFCTL_SUBJECTS for workers: config subjects overridden by --subject."""
    merged = {**config.subjects, **dict(cli)}
    return {"PERFCTL_SUBJECTS": json.dumps(merged)} if merged else {}


def pyperf_version() -> str:
    """The installed pyperf version."""
    from importlib.metadata import version

    return version("pyperf")


def new_run(config: Config, ref: RefInfo, settings: dict[str, object]) -> Run:
    """A fresh 'running' Run record with full provenance."""
    from perfctl.measure.machine import fingerprint

    return Run(
        id=new_id(),
        project=config.root.name,
        ref=ref,
        machine=fingerprint(),
        started=utcnow(),
        settings=settings,
        python_version=platform.python_version(),
        perfctl_version=__version__,
        pyperf_version=pyperf_version(),
    )


def skipped(info: RegimeInfo) -> RegimeResult:
    """A result for a regime whose requirements are unmet."""
    return RegimeResult(
        name=info.name,
        family=info.family,
        status=Status.SKIPPED,
        ops=info.ops,
        reason=info.skip_reason or "",
        baseline=info.baseline,
        description=info.description,
        params=info.params,
    )


def to_result(
    info: RegimeInfo, outcome: runner.Outcome, log: Path, seconds: float = 0.0
) -> RegimeResult:
    """A RegimeResult from a runner Outcome (``seconds``: its measuring time)."""
    return RegimeResult(
        name=info.name,
        family=info.family,
        status=OK if outcome.ok else Status.SKIPPED if outcome.skipped else Status.FAILED,
        ops=info.ops,
        unit=outcome.unit,
        processes=outcome.processes,
        order=tuple(range(len(outcome.processes))),
        reason=outcome.reason,
        log_path=str(log),
        baseline=info.baseline,
        description=info.description,
        params=info.params,
        metrics=outcome.metrics or {},
        loops=outcome.loops,
        clock=info.clock,
        max_peak=info.max_peak,
        threshold=info.threshold,
        seconds=seconds,
    )


def run_checkout(config: Config, options: RunOptions, progress: Progress | None = None) -> Run:
    """Measure the checkout in place with the current interpreter; save after each regime."""
    from perfctl import envs
    from perfctl.jobs.settings import check_placement
    from perfctl.store.lock import project_lock

    check_placement(options.affinity)
    target = envs.current_target(config)
    files = discovery.regime_files(config, options.regimes)
    env = {**target.env, **subjects_env(config, options.subjects)}
    infos = discovery.select(
        discovery.probe(
            target.python, files, cwd=target.cwd, env=env, inherit=config.inherit_environ
        ),
        options.globs,
        options.family,
    )
    worker = runner.Worker(
        target.python, target.cwd, env, tuple(files), config.inherit_environ, options.affinity
    )
    store = open_store(config.state_dir, config.store_url)
    settings = {
        "precision": options.precision.name,
        **options.precision.__dict__,
        "measure": options.measure,
        "affinity": list(options.affinity),
    }
    with project_lock(config.state_dir, wait=options.lock_wait, what="run"):
        run = new_run(config, target.ref, settings)
        store.begin_run(run)
        _measure_all(store, run, worker, infos, options, config, progress)
        return store.finish_run(run.id, finished_status(store.load_run(run.id).results))


def _measure_all(
    store: Store,
    run: Run,
    worker: runner.Worker,
    infos: list[RegimeInfo],
    options: RunOptions,
    config: Config,
    progress: Progress | None,
) -> bool:
    failed = False
    for i, info in enumerate(infos):
        if progress:
            progress(info.name, i, len(infos))
        if info.skip_reason:
            store.save_result(run.id, skipped(info), None)
            continue
        log = config.state_dir / "logs" / run.id / f"{_slug(info.name)}.log"
        with procs.scratch("perfctl-run-") as tmp:
            started = time.monotonic()
            outcome = _measure_one(worker, info, options, log, Path(tmp))
            took = round(time.monotonic() - started, 2)
            result = to_result(info, outcome, log, took)
            store.save_result(run.id, result, outcome.pyperf_json)
        failed |= not (outcome.ok or outcome.skipped)
    if progress:
        progress("", len(infos), len(infos))
    return failed


def _measure_one(
    worker: runner.Worker, info: RegimeInfo, options: RunOptions, log: Path, tmp: Path
) -> runner.Outcome:
    """pyperf's wall time, or a counter (one value per process) with ``--measure``."""
    if options.measure == "time":
        return runner.measure(worker, info, options.precision, log=log, workdir=tmp)
    from perfctl.measure import counters

    return counters.measure_run(
        worker, info, options.measure, options.precision.processes, log, tmp
    )


def _slug(name: str) -> str:
    from perfctl.store.local import slug

    return slug(name)
