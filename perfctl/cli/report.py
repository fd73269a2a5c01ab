"""Command: report (self-contained HTML of a comparison or of the run history)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from perfctl.cli.common import ANALYSE, ProjectOpt, emit, guarded


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("report", rich_help_panel=ANALYSE)(report)


@guarded
def report(
    comparison_id: Annotated[
        str | None,
        typer.Argument(
            metavar="COMPARISON_ID",
            help="Comparison id or unique prefix (default: the last comparison).",
        ),
    ] = None,
    last: Annotated[bool, typer.Option("--last", help="Report the newest comparison.")] = False,
    history: Annotated[
        bool, typer.Option("--history", help="Trend report of every stored run of one machine.")
    ] = False,
    bisect: Annotated[
        str | None,
        typer.Option(
            "--bisect",
            metavar="ID",
            help="The steps of a stored bisection on its commit axis: a record id "
            "(or unique prefix), or `last`.",
        ),
    ] = None,
    machine: Annotated[
        str | None,
        typer.Option(
            "--machine",
            help="With --history: the machine fingerprint (id or unique prefix) to chart "
            "(default: the one with the most runs).",
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Where to write the HTML: a new path or a regular file; `-` for stdout "
            "(default: the reports dir).",
        ),
    ] = None,
    template_dir: Annotated[
        Path | None,
        typer.Option(
            "--template-dir",
            help="Directory of templates that override the shipped ones, file by file.",
        ),
    ] = None,
    cdn: Annotated[
        bool, typer.Option("--cdn", help="Load plotly.js from its CDN instead of embedding it.")
    ] = False,
    project: ProjectOpt = None,
) -> None:
    """Write a self-contained HTML report and print its path.

    Example: perfctl report --last -o reports/pr-42.html
    """
    from perfctl.config import load_config
    from perfctl.jobs.report import write_report

    config = load_config(project)
    path = write_report(
        config,
        comparison_id,
        last,
        history,
        output,
        template_dir,
        cdn,
        machine=machine,
        bisect=bisect,
    )
    if str(path) != "-":  # with `-o -` stdout holds the HTML itself
        emit(str(path))
