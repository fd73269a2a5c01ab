"""Command: demo."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from perfctl.cli.common import MEASURE, err_console, guarded, out_console


def _phase_lines(result: object) -> list[tuple[str, str, str, str]]:
    from perfctl.config import load_config
    from perfctl.plan.update import load_spec
    from perfctl.render.tables import change_cell

    rows = []
    spec = load_spec(load_config(result.root))  # type: ignore[attr-defined]
    for phase in spec.phases:
        c = result.phases.get(phase.after)  # type: ignore[attr-defined]
        for name in phase.regimes:
            rc = next((r for r in c.regimes if r.name == name), None) if c else None
            if rc is None:
                rows.append((phase.id, name, "—", "not measured"))
                continue
            if rc.verdict == "improved":
                shown = "improved"
            elif rc.verdict in ("inconclusive", "failed", "skipped"):
                shown = f"{rc.verdict}: {rc.reason}"
            else:
                shown = f"{rc.verdict}: this phase's change did not show up"
            rows.append((f"{phase.id} {phase.name}", name, change_cell(rc), shown))
    return rows


@guarded
def demo_cmd(
    directory: Annotated[
        Path | None, typer.Argument(help="Where to write the project (default: a new temp dir).")
    ] = None,
    quick: Annotated[
        bool, typer.Option("--quick", help="Reduced settings (used by the tests): ~1–2 min.")
    ] = False,
) -> None:
    """Run the whole loop on a bundled project with a real optimization history.

    Writes minibridge as a git repo (one commit per optimization phase), compares
    the first commit with the last, profiles the most-improved regime on both,
    renders the HTML report and regenerates PLAN.md from measured phases.

    Example: perfctl demo /tmp/minibridge
    """
    from rich.table import Table

    from perfctl.jobs.demo import run_demo
    from perfctl.model import Notice
    from perfctl.render import tables as render

    err = err_console()
    with err.status("perfctl demo") as status:

        def say(msg: str) -> None:
            status.update(render.esc(msg))
            lasting = ("committed", "comparing", "profiling", "measuring")
            if isinstance(msg, Notice) or msg.startswith(lasting):
                err.print(render.esc(msg))

        result = run_demo(directory, quick=quick, say=say)
    out = out_console()
    out.print(render.format_compare_table(result.comparison))
    table = Table(title="Phases (each measured before → after)", title_justify="left")
    for col in ("Phase", "Primary regime", "Change [95% CI]", "Verdict"):
        table.add_column(col)
    for row in _phase_lines(result):
        table.add_row(*(render.esc(x) for x in row))
    out.print(table)
    out.print("[bold]Artefacts[/bold]")
    out.print(f"  project:     {result.root}")
    out.print(f"  html report: {result.report}")
    out.print(f"  history:     {result.history}")
    for key, path in sorted(result.profile.items()):
        out.print(f"  {key}: {path}")
    out.print(f"  plan:        {result.plan}")
    out.print(
        f"  comparison:  {result.comparison.id} (perfctl -C {result.root} report "
        f"{result.comparison.id})"
    )


def register(app: typer.Typer) -> None:
    """Add demo."""
    app.command("demo", rich_help_panel=MEASURE)(demo_cmd)
