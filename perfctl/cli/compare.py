"""Command: compare."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from perfctl.cli.common import (
    MEASURE,
    AffinityOpt,
    BurstWaitOpt,
    Format,
    ProfileDurationOpt,
    ProjectOpt,
    err_console,
    finite,
    guarded,
    refuse_stray_profile_duration,
)
from perfctl.cli.measure import (
    GlobOpt,
    LockWaitOpt,
    RegimesOpt,
    SubjectOpt,
    parse_subjects,
    require_tools,
)
from perfctl.cli.show import exit_code, progress_line, show_comparison
from perfctl.cli.signals import MeasuresOpt, parse_measures
from perfctl.errors import UsageError
from perfctl.jobs.shard import parse_shard
from perfctl.model import Comparison


class Order(StrEnum):
    """Interleaving order of base and head processes."""

    abba = "abba"
    random = "random"


class Pairing(StrEnum):
    """What a pair of base and head measurements shares."""

    auto = "auto"
    process = "process"
    same_process = "same-process"


class Clock(StrEnum):
    """Which clock times a value."""

    wall = "wall"
    cpu = "cpu"
    busy = "busy"


class ProfileWhich(StrEnum):
    """Which regimes `--profile` profiles on both refs."""

    regressed = "regressed"
    improved = "improved"
    all = "all"


@guarded
def compare_cmd(
    base: Annotated[str, typer.Argument(help="Base ref: branch, tag, sha, HEAD~3 or WORKTREE.")],
    head: Annotated[str, typer.Argument(help="Head ref (default HEAD).")] = "HEAD",
    fast: Annotated[
        bool, typer.Option("--fast", help="6 rounds × 2 values, no sequential sampling.")
    ] = False,
    rigorous: Annotated[
        bool, typer.Option("--rigorous", help="20–80 rounds, 240 s budget per regime.")
    ] = False,
    rounds: Annotated[
        int | None,
        typer.Option("--rounds", min=1, help="Minimum rounds: a process per ref, or one for both."),
    ] = None,
    max_rounds: Annotated[
        int | None, typer.Option("--max-rounds", min=1, help="Stop adding rounds here.")
    ] = None,
    values: Annotated[
        int | None,
        typer.Option(
            "--values",
            min=1,
            help="Values per process and ref, after 1 warmup (same-process: at least 10).",
        ),
    ] = None,
    min_time: Annotated[
        float | None,
        typer.Option("--min-time", callback=finite, min=0.001, help="Minimum seconds per value."),
    ] = None,
    time_budget: Annotated[
        float | None,
        typer.Option(
            "--time-budget",
            callback=finite,
            min=0,
            help="Seconds per regime before sequential sampling stops.",
        ),
    ] = None,
    burst_wait: BurstWaitOpt = None,
    affinity: AffinityOpt = None,
    threshold: Annotated[
        float | None,
        typer.Option(
            "--threshold",
            callback=finite,
            min=0,
            help="Noise band as a fraction (default 0.01 = 1%).",
        ),
    ] = None,
    alpha: Annotated[
        float | None,
        typer.Option(
            "--alpha", callback=finite, min=0, max=1, help="Significance level after BH correction."
        ),
    ] = None,
    order: Annotated[
        Order,
        typer.Option(
            "--order",
            help="Interleaving: abba (blocks ABBA or BAAB, drawn from the seed) or random per round.",
        ),
    ] = Order.abba,
    seed: Annotated[
        int, typer.Option("--seed", min=0, help="Seed for the interleaving order and bootstrap.")
    ] = 0,
    pairing: Annotated[
        Pairing | None,
        typer.Option(
            "--pairing",
            help="auto: same-process where a regime can share a worker and starts no "
            "process, else process; process: each ref in its own worker processes; "
            "same-process: both refs timed alternately inside every worker "
            "(install = false projects). Default: config `pairing`, else auto.",
        ),
    ] = None,
    clock: Annotated[
        Clock,
        typer.Option(
            "--clock",
            help="wall; cpu: the timing thread's CPU time (single-threaded regimes that "
            "wait on nothing); busy: wall time less the time that thread waited for a CPU "
            "(Linux). cpu and busy time the regimes measured in one process (same-process "
            "pairing; under auto, the others stay on wall).",
        ),
    ] = Clock.wall,
    measure: MeasuresOpt = "time",
    shard: Annotated[
        str | None,
        typer.Option(
            "--shard", help="K/N: measure only shard K of N (merge with `perfctl merge`)."
        ),
    ] = None,
    shard_run: Annotated[
        str | None,
        typer.Option(
            "--shard-run", help="Id shared by the shards of one run (default $GITHUB_RUN_ID)."
        ),
    ] = None,
    confirm: Annotated[
        bool, typer.Option("--confirm", help="Re-measure regressed regimes before reporting them.")
    ] = False,
    rebuild: Annotated[bool, typer.Option("--rebuild", help="Rebuild both environments.")] = False,
    regimes: RegimesOpt = None,
    regimes_from: Annotated[
        str | None, typer.Option("--regimes-from", help="Take regimes files from this ref.")
    ] = None,
    regime: GlobOpt = None,
    family: Annotated[str | None, typer.Option("--family", help="Only this family.")] = None,
    subject: SubjectOpt = None,
    from_store: Annotated[
        bool,
        typer.Option(
            "--from-store", help="Re-decide the newest stored comparison of BASE and HEAD."
        ),
    ] = False,
    comparison: Annotated[
        str | None,
        typer.Option("--comparison", help="With --from-store: the stored comparison (id)."),
    ] = None,
    mix_runs: Annotated[
        bool,
        typer.Option("--mix-runs", help="With --from-store: pair runs measured apart (warned)."),
    ] = False,
    profile: Annotated[
        ProfileWhich | None,
        typer.Option("--profile", help="Also py-spy profile these regimes on both refs."),
    ] = None,
    profile_duration: ProfileDurationOpt = None,
    lock_wait: LockWaitOpt = 600.0,
    fail_on_regression: Annotated[
        bool, typer.Option("--fail-on-regression", help="Exit 1 when a regime regressed.")
    ] = False,
    fmt: Annotated[
        Format, typer.Option("--format", help="table, markdown or json (stdout).")
    ] = Format.table,
    project: ProjectOpt = None,
) -> None:
    """Compare two refs: worktrees, one env per ref, interleaved pyperf processes, verdicts.

    Example: perfctl compare main HEAD --regime 'ipc.*' --fail-on-regression
    """
    from perfctl.config import load_config
    from perfctl.jobs import compare

    signals = parse_measures(measure)
    _check_flags(
        [m.value for m in signals], from_store=from_store, shard=shard, profile=profile,
        comparison=comparison, mix_runs=mix_runs, affinity=affinity, burst_wait=burst_wait,
        clock=clock.value, profile_duration=profile_duration,
    )  # fmt: skip
    if not from_store:  # --from-store measures nothing
        for m in signals:
            require_tools(m)
    config = load_config(project)
    every = [
        compare.settings_for(
            config=config,
            fast=fast,
            rigorous=rigorous,
            rounds=rounds,
            max_rounds=max_rounds,
            values=values,
            min_time=min_time,
            time_budget=time_budget,
            burst_wait=burst_wait,
            affinity=affinity,
            threshold=threshold,
            alpha=alpha,
            order=order.value,
            seed=seed,
            pairing=pairing.value if pairing else None,
            clock=clock.value if m.value == "time" else "wall",  # counters have no clock
            measure=m.value,
            shard=parse_shard(shard, shard_run) if shard else None,
            confirm=confirm,
            rebuild=rebuild,
            regimes=tuple(regimes or ()),
            regimes_from=regimes_from,
            globs=tuple(regime or ()),
            family=family,
            subjects=parse_subjects(subject),
            lock_wait=lock_wait,
        )
        for m in signals
    ]
    if len(every) > 1:
        from perfctl.cli.signals import compare_signals

        compare_signals(config, base, head, every, fmt, fail_on_regression)
        return
    c = _compare_one(
        config, base, head, every[0], from_store=from_store, comparison=comparison,
        mix_runs=mix_runs, shard=shard, profile=profile, regimes=tuple(regimes or ()),
        profile_duration=profile_duration,
    )  # fmt: skip
    show_comparison(c, fmt)
    exit_code(c, fail_on_regression)


def _compare_one(
    config: Any,
    base: str,
    head: str,
    settings: Any,
    *,
    from_store: bool,
    comparison: str | None,
    mix_runs: bool,
    shard: str | None,
    profile: ProfileWhich | None,
    regimes: tuple[str, ...],
    profile_duration: float | None,
) -> Comparison:
    """One signal: measure (or re-decide from the store), then profile if asked."""
    from perfctl.jobs import annotate, compare

    err = err_console()
    if from_store:
        from perfctl.jobs.recompute import compare_from_store

        c = compare_from_store(
            config, base, head, settings, comparison=comparison, mix_runs=mix_runs
        )
    else:
        with err.status("comparing") as status:
            c = compare.compare_refs(
                config,
                base,
                head,
                settings=settings,
                progress=lambda m: progress_line(err, status, m),
            )
    if profile is not None:
        c = annotate.profile_comparison(
            config, c, profile.value, progress=err.print, regimes=regimes,
            duration=profile_duration, lock_wait=settings.lock_wait,
        )  # fmt: skip
    return c


def _check_flags(
    signals: list[str],
    *,
    from_store: bool,
    shard: str | None,
    profile: ProfileWhich | None,
    comparison: str | None,
    mix_runs: bool,
    affinity: str | None,
    burst_wait: float | None,
    clock: str = "wall",
    profile_duration: float | None = None,
) -> None:
    """Refuse flag combinations before anything is loaded or measured."""
    from perfctl.jobs.settings import refuse_untimed

    refuse_stray_profile_duration(profile_duration, profile is not None)

    if len(signals) > 1:
        from perfctl.cli.signals import check_signals

        check_signals(
            from_store=from_store, shard=shard, profile=profile is not None,
            comparison=comparison is not None, mix_runs=mix_runs,
        )  # fmt: skip
    shaping = (("--affinity", affinity), ("--burst-wait", burst_wait), ("--clock", clock != "wall"))
    _check_from_store(
        from_store, shard=shard, comparison=comparison, mix_runs=mix_runs,
        placed=[f for f, on in shaping if on],
    )  # fmt: skip
    if not from_store:
        refuse_untimed(
            signals, affinity=affinity, burst_wait=burst_wait, clock=clock,
            several=not (shard or profile),  # those take one signal: the hint may not add time
        )  # fmt: skip


def _check_from_store(
    from_store: bool,
    *,
    shard: str | None,
    comparison: str | None,
    mix_runs: bool,
    placed: list[str],
) -> None:
    """Flags that only make sense with (or without) --from-store (``placed``: the
    placement flags given, which shape measuring)."""
    if shard and from_store:
        raise UsageError("--shard measures; --from-store does not", "drop one of them")
    if placed and from_store:
        raise UsageError(
            f"{placed[0]} shapes measuring; --from-store measures nothing",
            f"drop {placed[0]} (the stored comparison says how it was measured)",
        )
    if (comparison or mix_runs) and not from_store:
        raise UsageError(
            f"{'--comparison' if comparison else '--mix-runs'} needs --from-store",
            "add --from-store (it re-decides stored measurements)",
        )


@guarded
def merge_cmd(
    inputs: Annotated[
        list[str] | None,
        typer.Argument(help="Shards: comparison.json files, artefact directories or stored ids."),
    ] = None,
    shard_run: Annotated[
        str | None,
        typer.Option("--shard-run", help="Merge every stored shard of this sharded run."),
    ] = None,
    project: ProjectOpt = None,
    fmt: Annotated[Format, typer.Option("--format", help="Output format.")] = Format.table,
    fail_on_regression: Annotated[
        bool, typer.Option("--fail-on-regression", help="Exit 1 when a regime regressed.")
    ] = False,
) -> None:
    """Merge the shards of one sharded compare into one comparison, verdicts recomputed.

    Example: perfctl merge artefacts/ --fail-on-regression
    """
    from perfctl.config import load_config
    from perfctl.jobs.shard import merge_inputs

    c = merge_inputs(load_config(project), inputs or [], shard_run)
    show_comparison(c, fmt)
    exit_code(c, fail_on_regression)


def register(app: typer.Typer) -> None:
    """Add compare."""
    app.command("compare", rich_help_panel=MEASURE)(compare_cmd)
    app.command("merge", rich_help_panel=MEASURE)(merge_cmd)
