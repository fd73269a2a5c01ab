"""Command: compare."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from perfctl.cli.common import (
    MEASURE,
    Format,
    ProjectOpt,
    emit,
    err_console,
    guarded,
    out_console,
)
from perfctl.cli.measure import (
    GlobOpt,
    LockWaitOpt,
    Measure,
    MeasureOpt,
    RegimesOpt,
    SubjectOpt,
    parse_subjects,
    require_tools,
)
from perfctl.errors import EXIT_REGRESSION, UsageError
from perfctl.jobs.shard import parse_shard
from perfctl.model import Comparison


class Order(StrEnum):
    """Interleaving order of base and head processes."""

    abba = "abba"
    random = "random"


class Pairing(StrEnum):
    """What a pair of base and head measurements shares."""

    process = "process"
    same_process = "same-process"


class Clock(StrEnum):
    """Which clock times a value."""

    wall = "wall"
    cpu = "cpu"


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
        typer.Option("--rounds", min=1, help="Minimum rounds (one process per ref each)."),
    ] = None,
    max_rounds: Annotated[
        int | None, typer.Option("--max-rounds", min=1, help="Stop adding rounds here.")
    ] = None,
    values: Annotated[
        int | None, typer.Option("--values", min=1, help="Values per process (after 1 warmup).")
    ] = None,
    min_time: Annotated[
        float | None, typer.Option("--min-time", min=0.001, help="Minimum seconds per value.")
    ] = None,
    time_budget: Annotated[
        float | None,
        typer.Option(
            "--time-budget", min=0, help="Seconds per regime before sequential sampling stops."
        ),
    ] = None,
    threshold: Annotated[
        float | None,
        typer.Option("--threshold", min=0, help="Noise band as a fraction (default 0.02 = 2%)."),
    ] = None,
    alpha: Annotated[
        float | None,
        typer.Option("--alpha", min=0, max=1, help="Significance level after BH correction."),
    ] = None,
    order: Annotated[
        Order, typer.Option("--order", help="Interleaving: abba or seeded random.")
    ] = Order.abba,
    seed: Annotated[int, typer.Option("--seed", help="Seed for random order and bootstrap.")] = 0,
    pairing: Annotated[
        Pairing,
        typer.Option(
            "--pairing",
            help="process: each ref in its own worker processes; same-process: both refs "
            "timed alternately inside every worker (install = false projects).",
        ),
    ] = Pairing.process,
    clock: Annotated[
        Clock,
        typer.Option(
            "--clock",
            help="wall, or cpu: the timing thread's CPU time (same-process pairing; "
            "single-threaded regimes that wait on nothing).",
        ),
    ] = Clock.wall,
    measure: MeasureOpt = Measure.time,
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
    from perfctl.jobs import annotate, compare

    if not from_store:  # --from-store measures nothing
        require_tools(measure)
    config = load_config(project)
    settings = compare.settings_for(
        config=config,
        fast=fast,
        rigorous=rigorous,
        rounds=rounds,
        max_rounds=max_rounds,
        values=values,
        min_time=min_time,
        time_budget=time_budget,
        threshold=threshold,
        alpha=alpha,
        order=order.value,
        seed=seed,
        pairing=pairing.value,
        clock=clock.value,
        measure=measure.value,
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
    err = err_console()
    _check_from_store(from_store, shard=shard, comparison=comparison, mix_runs=mix_runs)
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
                progress=lambda m: _progress(err, status, m),
            )
    if profile is not None:
        c = annotate.profile_comparison(
            config, c, profile.value, progress=err.print, regimes=tuple(regimes or ())
        )
    show_comparison(c, fmt)
    _exit_code(c, fail_on_regression)


def _check_from_store(
    from_store: bool, *, shard: str | None, comparison: str | None, mix_runs: bool
) -> None:
    """Flags that only make sense with (or without) --from-store."""
    if shard and from_store:
        raise UsageError("--shard measures; --from-store does not", "drop one of them")
    if (comparison or mix_runs) and not from_store:
        raise UsageError(
            f"{'--comparison' if comparison else '--mix-runs'} needs --from-store",
            "add --from-store (it re-decides stored measurements)",
        )


def show_comparison(c: Comparison, fmt: Format) -> None:
    """Print a comparison in the chosen format (notes and warnings on stderr)."""

    from perfctl.render import tables as render
    from perfctl.render.notes import comparison_notes

    err = err_console()
    if fmt == Format.json:
        emit(render.format_compare_json(c))
    elif fmt == Format.markdown:
        emit(render.format_compare_markdown(c))
    else:
        console = out_console()
        console.print(render.format_compare_table(c))
        metrics = render.format_metrics_table(c)
        if metrics is not None:
            console.print(metrics)
        for line in comparison_notes(c):
            console.print(render.esc(line))
        err.print(
            f"Verdicts: {render.verdict_test(c)}, Benjamini–Hochberg corrected "
            f"across {_families(c)}; change CI must clear ±{c.threshold * 100:g}%."
        )
        for w in c.warnings:
            err.print(f"[yellow]Warning: {render.esc(w)}[/yellow]")
        if c.recomputed_from:
            err.print(f"recomputed from stored comparison {c.recomputed_from}; measured nothing")
        err.print(f"stored as comparison {c.id}")


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
    _exit_code(c, fail_on_regression)


def _families(c: Comparison) -> str:
    """The BH families, as the footer names them (baselines are their own family)."""
    named = {r.baseline for r in c.regimes if r.baseline}
    refs = sum(r.name in named for r in c.regimes)
    tested = len(c.regimes) - refs
    if not refs:
        return f"{tested} regimes"
    return f"{tested} regimes ({refs} baseline regime(s) corrected as their own family)"


def _progress(err: Any, status: Any, message: str) -> None:
    """Spinner text for progress; lasting lines (a Notice) for what the user should know.

    The spinner is not drawn when stderr is not a terminal, so a Notice is
    printed in both modes.
    """
    from perfctl.model import Notice
    from perfctl.render.tables import esc

    status.update(esc(message))
    if isinstance(message, Notice):
        err.print(esc(message))


def _exit_code(c: Comparison, fail_on_regression: bool) -> None:
    from perfctl.errors import RegimeFailed
    from perfctl.model import FAILED, REGRESSED

    counts = c.counts()
    if counts.get(FAILED):
        failed = [r.name for r in c.regimes if r.verdict == FAILED]
        raise RegimeFailed(
            f"{len(failed)} regime(s) failed: {', '.join(failed)}",
            "the table shows each failure's reason and log path",
        )
    if fail_on_regression and (counts.get(REGRESSED) or any(r.over_limit for r in c.regimes)):
        raise typer.Exit(EXIT_REGRESSION)  # a regime over its max_peak fails the gate too


def register(app: typer.Typer) -> None:
    """Add compare."""
    app.command("compare", rich_help_panel=MEASURE)(compare_cmd)
    app.command("merge", rich_help_panel=MEASURE)(merge_cmd)
