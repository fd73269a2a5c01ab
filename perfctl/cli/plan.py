"""Commands: plan init, plan update (a living plan whose tables stay true)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from perfctl.cli.common import PUBLISH, ProjectOpt, guarded
from perfctl.cli.measure import RegimesOpt
from perfctl.errors import EXIT_REGRESSION

PlanArg = Annotated[
    Path, typer.Argument(metavar="PLAN.md", help="The plan document.", dir_okay=False)
]


def _say(text: str) -> None:
    from perfctl.render.escape import strip_unsafe  # names and refs are user text

    sys.stderr.write(strip_unsafe(text) + "\n")
    sys.stderr.flush()


def _update_command(path: Path) -> str:
    from perfctl.render.escape import shell_command

    return shell_command("perfctl", "plan", "update", path)


@guarded
def init_cmd(
    path: PlanArg,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
    project: ProjectOpt = None,
) -> None:
    """Write a plan skeleton: prose placeholders around every generated block.

    Example: perfctl plan init PLAN.md
    """
    from perfctl.config import load_config
    from perfctl.plan.update import init_plan

    init_plan(load_config(project), path, force=force)
    _say(f"wrote {path}; fill in the prose, then run `{_update_command(path)}`")


@guarded
def update_cmd(
    path: PlanArg,
    measure: Annotated[
        bool,
        typer.Option(
            "--measure/--no-measure",
            help="Measure phases with no stored comparison (--no-measure: show them as not "
            "measured).",
        ),
    ] = True,
    check: Annotated[
        bool,
        typer.Option("--check", help="Write nothing; exit 1 if the file is stale, 0 if current."),
    ] = False,
    fast: Annotated[
        bool,
        typer.Option("--fast", help="Measure missing phases with compare's --fast preset."),
    ] = False,
    rigorous: Annotated[
        bool,
        typer.Option("--rigorous", help="Measure missing phases with compare's --rigorous preset."),
    ] = False,
    regimes: RegimesOpt = None,
    signals: Annotated[
        str | None,
        typer.Option(
            "--signals",
            help="Counters to show beside wall time in each phase's table: instructions, "
            "memory or both, comma-separated; measured where none is stored (never judged).",
        ),
    ] = None,
    project: ProjectOpt = None,
) -> None:
    """Regenerate the plan's blocks (tracker, baseline, results, metrics, log); prose stays.

    Example: perfctl plan update PLAN.md --check
    """
    from perfctl.config import load_config
    from perfctl.jobs.compare import settings_for
    from perfctl.plan.update import update_plan

    config = load_config(project)
    files = tuple(regimes or ())
    settings = settings_for(config=config, fast=fast, rigorous=rigorous, regimes=files)
    counters = [
        settings_for(config=config, fast=fast, rigorous=rigorous, regimes=files, measure=m)
        for m in _counters(signals, measure and not check)
    ]
    result = update_plan(
        config, path, measure=measure, check=check, settings=settings, progress=_say,
        signals=counters,
    )  # fmt: skip
    for warning in result.warnings:
        _say(f"Warning: {warning}")
    if check:
        _report_check(path, result.changed, result.pending)
        return
    if result.changed:
        _say(f"updated {path}: " + ", ".join(result.changed))
    else:
        _say(f"{path} is up to date")


def _counters(signals: str | None, measuring: bool) -> list[str]:
    """The counter signals --signals names (time is always there: targets are wall time)."""
    from perfctl.cli.measure import require_tools
    from perfctl.cli.signals import parse_measures

    if signals is None:
        return []
    chosen = [m for m in parse_measures(signals, "--signals") if m.value != "time"]
    if measuring:
        for m in chosen:
            require_tools(m)
    return [m.value for m in chosen]


def _report_check(path: Path, changed: tuple[str, ...], pending: tuple[str, ...]) -> None:
    if not changed and not pending:
        _say(f"{path} is up to date")
        return
    if changed:
        _say(f"{path} is stale: " + ", ".join(changed) + " would change")
    for pid in pending:
        _say(f"{path} is stale: phase {pid} has no stored comparison (update would measure it)")
    _say(f"Hint: run `{_update_command(path)}`")
    raise typer.Exit(EXIT_REGRESSION)  # 1: stale, the gating exit code


def register(app: typer.Typer) -> None:
    """Add the `plan` sub-app (init, update)."""
    plan_app = typer.Typer(
        help="Keep a living optimization plan's generated tables true.", no_args_is_help=True
    )
    plan_app.command("init")(init_cmd)
    plan_app.command("update")(update_cmd)
    app.add_typer(plan_app, name="plan", rich_help_panel=PUBLISH)
