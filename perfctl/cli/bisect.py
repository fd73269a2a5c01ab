"""Command: bisect."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from perfctl.cli.common import (
    ANALYSE,
    AffinityOpt,
    BurstWaitOpt,
    Format,
    ProfileDurationOpt,
    ProjectOpt,
    emit,
    finite,
    guarded,
    out_console,
    refuse_stray_profile_duration,
)
from perfctl.cli.measure import (
    LockWaitOpt,
    Measure,
    MeasureOpt,
    RegimesOpt,
    require_tools,
)


@guarded
def bisect_cmd(
    good: Annotated[str, typer.Argument(help="A ref where the regime is fast (older).")],
    bad: Annotated[str, typer.Argument(help="A ref where it is slow (a descendant of GOOD).")],
    regime: Annotated[
        list[str] | None,
        typer.Option("--regime", "-r", help="A regime to follow: a name or glob (repeatable)."),
    ] = None,
    family: Annotated[
        str | None, typer.Option("--family", help="Follow every regime of this family.")
    ] = None,
    measure: MeasureOpt = Measure.time,
    profile: Annotated[
        bool,
        typer.Option(
            "--profile",
            help="py-spy differential of the culprit's parent and the culprit; with "
            "--measure instructions, callgrind's too.",
        ),
    ] = False,
    profile_duration: ProfileDurationOpt = None,
    fast: Annotated[
        bool, typer.Option("--fast", help="6 rounds × 2 values per comparison.")
    ] = False,
    rigorous: Annotated[
        bool, typer.Option("--rigorous", help="20–80 rounds per comparison.")
    ] = False,
    rounds: Annotated[
        int | None, typer.Option("--rounds", min=1, help="Minimum rounds per comparison.")
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
            "--time-budget", callback=finite, min=0, help="Seconds per comparison before it stops."
        ),
    ] = None,
    burst_wait: BurstWaitOpt = None,
    affinity: AffinityOpt = None,
    threshold: Annotated[
        float | None,
        typer.Option(
            "--threshold", callback=finite, min=0, help="Noise band as a fraction (default 0.01)."
        ),
    ] = None,
    alpha: Annotated[
        float | None,
        typer.Option("--alpha", callback=finite, min=0, max=1, help="Significance level."),
    ] = None,
    attempts: Annotated[
        int,
        typer.Option(
            "--attempts", min=1, help="Comparisons per commit before it counts as unknown."
        ),
    ] = 3,
    fresh: Annotated[
        bool, typer.Option("--fresh", help="Measure everything anew (ignore what is stored).")
    ] = False,
    regimes: RegimesOpt = None,
    lock_wait: LockWaitOpt = 600.0,
    fmt: Annotated[
        Format, typer.Option("--format", help="table, markdown or json (stdout).")
    ] = Format.table,
    project: ProjectOpt = None,
) -> None:
    """Find the commit between GOOD and BAD that made each regime slower, noise-proof.

    Example: perfctl bisect v1.2.0 main --regime tiny_ping --regime 'ipc.*'
    """
    from rich.console import Console

    from perfctl.config import load_config
    from perfctl.errors import RegimeFailed, UsageError
    from perfctl.jobs import bisect, compare
    from perfctl.jobs.settings import refuse_untimed

    if not regime and family is None:
        raise UsageError(
            "bisect needs the regimes to follow", "name them with --regime or --family"
        )
    refuse_untimed([measure.value], affinity=affinity, burst_wait=burst_wait, several=False)
    refuse_stray_profile_duration(profile_duration, profile)
    require_tools(measure)
    config = load_config(project)
    cs = compare.settings_for(
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
        regimes=tuple(regimes or ()),
        lock_wait=lock_wait,
        measure=measure.value,
        family=family,
    )
    settings = bisect.BisectSettings(
        compare=cs, attempts=attempts, fresh=fresh, profile=profile,
        profile_duration=profile_duration,
    )  # fmt: skip
    err = Console(stderr=True)
    with err.status("bisecting") as status:
        records = bisect.bisect(
            config,
            good,
            bad,
            tuple(regime or ()),
            settings,
            progress=lambda m: _progress(err, status, m),
        )
    _show(records, fmt)
    failed = [r.regime for r in records if r.outcome == "failed"]
    if failed:  # the others are shown above: a failing regime does not hide them
        raise RegimeFailed(
            f"{len(failed)} regime(s) cannot be measured on GOOD or BAD: {', '.join(failed)}",
            "fix the regime (or pick other ends), then re-run",
        )


def _progress(err: Any, status: Any, message: str) -> None:
    """Spinner text; each step's start and every Notice stay on screen."""
    from perfctl.cli.show import progress_line
    from perfctl.model import Notice
    from perfctl.render.tables import esc

    progress_line(err, status, message)  # a Notice: printed there
    steps = ("confirm:", "step:", "verify:", "profile:", "reusing", "resuming")
    if not isinstance(message, Notice) and message.startswith(steps):
        err.print(esc(message))


def _show(records: Any, fmt: Format) -> None:
    from perfctl.render import bisect as render

    if fmt == Format.json:
        emit(render.format_bisects_json(records))
    elif fmt == Format.markdown:
        emit(render.format_bisects_markdown(records))
    else:
        out_console().print(render.format_bisects_table(records))


def register(app: typer.Typer) -> None:
    """Add bisect."""
    app.command("bisect", rich_help_panel=ANALYSE)(bisect_cmd)
