"""Commands: list, run, runs, clean."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from perfctl.cli.common import (
    MANAGE,
    MEASURE,
    AffinityOpt,
    ProjectOpt,
    TableOrJson,
    emit,
    emit_listing,
    err_console,
    finite,
    guarded,
    out_console,
)
from perfctl.errors import UsageError

if TYPE_CHECKING:
    from perfctl.model import Comparison

RegimesOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--regimes",
        help="Regimes file or directory (repeatable); `builtin` or "
        "`builtin:FAMILY` for the bundled suite. Default: the `regimes` config key.",
    ),
]
GlobOpt = Annotated[
    list[str] | None,
    typer.Option("--regime", "-r", help="Only regimes whose name matches this glob (repeatable)."),
]
LockWaitOpt = Annotated[
    float,
    typer.Option(
        "--lock-wait",
        callback=finite,
        min=0,
        help="Seconds to wait for another perfctl process holding the project lock.",
    ),
]


class Measure(StrEnum):
    """What a worker process measures: wall time, or a counter of the timed loop."""

    time = "time"
    instructions = "instructions"
    memory = "memory"


def require_tools(measure: Measure) -> None:
    """Check a counter's tool and settings before any environment is built.

    valgrind missing: exit 3; a bad ``PERFCTL_COUNTER_JOBS``: exit 2.
    """
    if measure == Measure.time:
        return
    from perfctl.measure import counters

    if measure == Measure.instructions:
        counters.require_valgrind()
    counters.jobs_limit()


MeasureOpt = Annotated[
    Measure,
    typer.Option(
        "--measure",
        help="time (pyperf wall time); instructions: callgrind instructions/op of the "
        "timed loop (needs valgrind); memory: tracemalloc blocks/bytes per op and peaks.",
    ),
]
SubjectOpt = Annotated[
    list[str] | None,
    typer.Option("--subject", help="Point a family at your own subject: FAMILY=module:factory."),
]


def parse_subjects(values: list[str] | None) -> tuple[tuple[str, str], ...]:
    """``["ipc=pkg.mod:make"]`` -> ``(("ipc", "pkg.mod:make"),)``."""
    out = []
    for v in values or []:
        family, sep, path = v.partition("=")
        if not sep or ":" not in path or not family:
            raise UsageError(
                f"--subject `{v}` is not FAMILY=module:factory",
                "example: --subject ipc=mypkg.bridge:make_bridge",
            )
        out.append((family.strip(), path.strip()))
    return tuple(out)


@guarded
def list_cmd(
    regimes: RegimesOpt = None,
    family: Annotated[str | None, typer.Option("--family", help="Only this family.")] = None,
    fmt: Annotated[
        TableOrJson, typer.Option("--format", help="Output format.")
    ] = TableOrJson.table,
    project: ProjectOpt = None,
) -> None:
    """List regimes: name, family, params, ops, baseline, requires, description.

    Example: perfctl list --regimes builtin --family ipc
    """
    from dataclasses import asdict

    from perfctl.config import load_config
    from perfctl.jobs.run import list_regimes

    config = load_config(project, standalone=bool(regimes))
    infos = list_regimes(config, regimes or [], family)
    if fmt == TableOrJson.json:
        emit(json.dumps([asdict(i) for i in infos], indent=2))
        return
    from rich.table import Table

    from perfctl.render.tables import esc

    table = Table(title=f"{len(infos)} regimes", title_justify="left")
    banded = any(i.threshold is not None for i in infos)  # a column only when one declares
    cols = ["Regime", "Family", "Ops", "Baseline", "Requires", *(["Band"] if banded else [])]
    for col in [*cols, "Description"]:
        table.add_column(col)
    for i in infos:
        req = ", ".join(i.requires) + (f" (skip: {i.skip_reason})" if i.skip_reason else "")
        band = [f"±{i.threshold * 100:g}%" if i.threshold else ""] if banded else []
        cells = (i.name, i.family, i.ops, i.baseline or "", req, *band, i.description)
        table.add_row(*(esc(x) for x in cells), style="dim" if i.skip_reason else None)
    out_console().print(table)


@guarded
def run_cmd(
    regimes: RegimesOpt = None,
    regime: GlobOpt = None,
    family: Annotated[str | None, typer.Option("--family", help="Only this family.")] = None,
    fast: Annotated[
        bool, typer.Option("--fast", help="pyperf --fast: 10 processes × 2 values.")
    ] = False,
    rigorous: Annotated[bool, typer.Option("--rigorous", help="40 processes × 3 values.")] = False,
    processes: Annotated[
        int | None,
        typer.Option("--processes", min=1, help="Override the number of worker processes."),
    ] = None,
    values: Annotated[
        int | None, typer.Option("--values", min=1, help="Override values per process.")
    ] = None,
    min_time: Annotated[
        float | None,
        typer.Option("--min-time", callback=finite, min=0.001, help="Minimum seconds per value."),
    ] = None,
    subject: SubjectOpt = None,
    measure: MeasureOpt = Measure.time,
    affinity: AffinityOpt = None,
    lock_wait: LockWaitOpt = 600.0,
    fmt: Annotated[
        TableOrJson, typer.Option("--format", help="Output format.")
    ] = TableOrJson.table,
    project: ProjectOpt = None,
) -> None:
    """Measure the current checkout: every regime in isolated pyperf processes.

    Example: perfctl run --regimes builtin:ipc --regime 'tiny_*' --fast
    """

    from perfctl.config import load_config
    from perfctl.jobs.run import RunOptions, precision_for, run_checkout
    from perfctl.jobs.settings import isolated_notice, refuse_untimed, timed_cpus
    from perfctl.render import tables as render

    refuse_untimed([measure.value], affinity=affinity, burst_wait=None, several=False)
    require_tools(measure)
    config = load_config(project, standalone=bool(regimes))
    opts = RunOptions(
        regimes=tuple(regimes or ()),
        globs=tuple(regime or ()),
        family=family,
        precision=precision_for(fast, rigorous, processes, values, min_time, measure.value),
        subjects=parse_subjects(subject),
        lock_wait=lock_wait,
        measure=measure.value,
        affinity=timed_cpus(affinity, config, measure.value),
    )
    err = err_console()
    if notice := isolated_notice(opts.affinity, opts.measure):
        err.print(notice, markup=False, highlight=False)
    with err.status("measuring") as status:

        def progress(name: str, i: int, n: int) -> None:
            status.update(f"[{i + 1}/{n}] {name}" if name else "done")

        run = run_checkout(config, opts, progress)
    if fmt == TableOrJson.json:
        emit(render.format_run_json(run))
    else:
        from perfctl.render.notes import run_notes

        out_console().print(render.format_run_table(run))
        for line in run_notes(run):
            out_console().print(render.esc(line))
        err.print(f"stored as run {run.id} in {config.state_dir}")
    if run.status != "complete":
        failed = [r.name for r in run.results if r.status == "failed"]
        from perfctl.errors import RegimeFailed

        raise RegimeFailed(
            f"{len(failed)} regime(s) failed: {', '.join(failed)}",
            "see the log path in the table; the other results were stored",
        )


@guarded
def runs_cmd(
    fmt: Annotated[
        TableOrJson, typer.Option("--format", help="Output format.")
    ] = TableOrJson.table,
    project: ProjectOpt = None,
) -> None:
    """List stored runs (newest first).

    Example: perfctl runs --format json
    """
    from perfctl.jobs.manage import stored_runs

    runs, state_dir = stored_runs(project)
    records = [
        {
            "id": r.id,
            "ref": r.ref.ref,
            "sha": r.ref.sha,
            "dirty": r.ref.dirty,
            "started": r.started,
            "finished": r.finished,
            "status": r.status,
            "machine": r.machine.id,
            "regimes": len(r.results),
        }
        for r in runs
    ]
    rows = [
        (r.id, r.ref.ref, r.ref.short, r.started, r.status, len(r.results), r.machine.id)
        for r in runs
    ]
    emit_listing(
        fmt,
        records,
        f"{len(runs)} runs in {state_dir}",
        ("Run", "Ref", "Sha", "Started", "Status", "Regimes", "Machine"),
        rows,
    )


@guarded
def comparisons_cmd(
    fmt: Annotated[
        TableOrJson, typer.Option("--format", help="Output format.")
    ] = TableOrJson.table,
    project: ProjectOpt = None,
) -> None:
    """List stored comparisons (newest first), for report/comment/plan.

    Example: perfctl comparisons --format json
    """
    from perfctl.jobs.manage import stored_comparisons
    from perfctl.render.tables import counts_line

    found, state_dir = stored_comparisons(project)
    records = [
        {
            "id": c.id,
            "created": c.created,
            "base": c.base.ref,
            "base_sha": c.base.sha,
            "head": c.head.ref,
            "head_sha": c.head.sha,
            "counts": c.counts(),
            "recomputed_from": c.recomputed_from,
            "mix_runs": bool(c.settings.get("mix_runs")),
        }
        for c in found
    ]
    rows = [
        (
            c.id,
            c.created,
            f"{c.base.ref} {c.base.short}",
            f"{c.head.ref} {c.head.short}",
            counts_line(c),
            _provenance(c),
        )
        for c in found
    ]
    emit_listing(
        fmt,
        records,
        f"{len(found)} comparisons in {state_dir}",
        ("Comparison", "Created", "Base", "Head", "Verdicts", "Source"),
        rows,
    )


def _provenance(c: Comparison) -> str:
    """Where a comparison's figures come from: measured, or recomputed from which."""
    if c.settings.get("mix_runs"):
        return f"runs measured apart ({c.recomputed_from or 'no comparison'})"
    if c.recomputed_from:
        return f"recomputed from {c.recomputed_from}"
    return "recomputed (older perfctl)" if c.settings.get("from_store") else "measured"


@guarded
def clean_cmd(
    worktrees: Annotated[
        bool, typer.Option("--worktrees", help="Remove perfctl's git worktrees.")
    ] = False,
    envs: Annotated[bool, typer.Option("--envs", help="Remove the per-ref environments.")] = False,
    results: Annotated[
        bool, typer.Option("--results", help="Remove stored runs and comparisons.")
    ] = False,
    project: ProjectOpt = None,
) -> None:
    """Remove what perfctl made (all three kinds when no flag is given).

    Example: perfctl clean --worktrees --envs
    """
    from perfctl.jobs.manage import clean

    for line in clean(project, worktrees=worktrees, envs=envs, results=results):
        emit(line)


def register(app: typer.Typer) -> None:
    """Add list/run/runs/clean."""
    app.command("list", rich_help_panel=MEASURE)(list_cmd)
    app.command("run", rich_help_panel=MEASURE)(run_cmd)
    app.command("runs", rich_help_panel=MANAGE)(runs_cmd)
    app.command("comparisons", rich_help_panel=MANAGE)(comparisons_cmd)
    app.command("clean", rich_help_panel=MANAGE)(clean_cmd)


__all__ = ["register", "Path"]
