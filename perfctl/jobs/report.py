"""The `perfctl report` job: pick the stored comparison (or the run history) and render it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from perfctl.errors import StoreError, UsageError
from perfctl.files import check_output_file, ensure_output_dir
from perfctl.profile import links
from perfctl.render.html import PlotlyJs
from perfctl.render.html_report import render_comparison, render_history

if TYPE_CHECKING:
    from perfctl.config import Config


def write_report(
    config: Config,
    comparison_id: str | None,
    last: bool,
    history: bool,
    out: Path | None,
    template_dir: Path | None,
    cdn: bool,
    *,
    machine: str | None = None,
) -> Path:
    """Render the report the CLI asked for (default: the last comparison) and return its path."""
    from perfctl.store.local import open_store

    _check_choice(comparison_id, last, history)
    if out is not None:
        check_output_file(out, "the report", stdout_ok=True)  # before any work
    if machine is not None and not history:
        raise UsageError("--machine goes with --history", "add --history, or drop --machine")
    store = open_store(config.state_dir, config.store_url)
    js: PlotlyJs = "cdn" if cdn else "inline"
    if history:
        runs = store.list_runs()
        if not runs:
            raise StoreError(
                "no stored runs to chart", "run `perfctl run` or `perfctl compare` first"
            )
        target = out or config.reports_dir / "history.html"
        ensure_output_dir(config.reports_dir, target.parent)
        return render_history(
            runs, out=target, template_dir=template_dir, plotly_js=js, machine_id=machine
        )
    c = store.load_comparison(comparison_id) if comparison_id else store.last_comparison()
    c = links.link_profiles(config.reports_dir, c)  # `perfctl profile --vs` of these commits
    target = out or config.reports_dir / f"comparison-{c.id}.html"
    ensure_output_dir(config.reports_dir, target.parent)
    return render_comparison(
        c, project_root=config.root, out=target, template_dir=template_dir, plotly_js=js
    )


def _check_choice(comparison_id: str | None, last: bool, history: bool) -> None:
    chosen = [
        name
        for name, on in (("COMPARISON_ID", comparison_id), ("--last", last), ("--history", history))
        if on
    ]
    if len(chosen) > 1:
        raise UsageError(
            f"{' and '.join(chosen)} cannot be used together",
            "give one comparison id, --last or --history",
        )
