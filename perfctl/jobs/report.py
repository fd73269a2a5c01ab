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
    from perfctl.model import RefInfo
    from perfctl.stats.bisection import Bisection


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
    bisect: str | None = None,
) -> Path:
    """Render the report the CLI asked for (default: the last comparison) and return its path."""
    from perfctl.store.local import open_store

    _check_choice(comparison_id, last, history, bisect)
    if out is not None:
        check_output_file(out, "the report", stdout_ok=True)  # before any work
    if machine is not None and not history:
        raise UsageError("--machine goes with --history", "add --history, or drop --machine")
    js: PlotlyJs = "cdn" if cdn else "inline"
    if bisect is not None:
        return _bisect_report(config, bisect, out, template_dir, js)
    store = open_store(config.state_dir, config.store_url)
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


def _bisect_report(
    config: Config, key: str, out: Path | None, template_dir: Path | None, js: PlotlyJs
) -> Path:
    """The page of one stored bisection, its steps placed on GOOD..BAD's first-parent line."""
    from perfctl.render.bisect_report import render_bisection
    from perfctl.store.bisects import find_bisection

    b = find_bisection(config.state_dir, key)
    target = out or config.reports_dir / f"bisect-{b.id}.html"
    ensure_output_dir(config.reports_dir, target.parent)
    return render_bisection(
        b, _line(config, b), out=target, template_dir=template_dir, plotly_js=js
    )


def _line(config: Config, b: Bisection) -> tuple[RefInfo, ...]:
    """GOOD..BAD's first-parent line from git; without it (commits gone), the measured
    commits by author date."""
    from perfctl.errors import PerfctlError

    try:
        from perfctl.git.line import first_parent_line  # GitMissing without git: fall back

        return first_parent_line(config.root, b.good.sha, b.bad.sha)
    except PerfctlError:
        seen = {s.commit.sha: s.commit for s in b.steps if s.commit.sha != b.bad.sha}
        seen.pop(b.good.sha, None)
        middle = sorted(seen.values(), key=lambda r: (r.date or "", r.sha))
        return (b.good, *middle, b.bad)


def _check_choice(
    comparison_id: str | None, last: bool, history: bool, bisect: str | None = None
) -> None:
    chosen = [
        name
        for name, on in (
            ("COMPARISON_ID", comparison_id),
            ("--last", last),
            ("--history", history),
            ("--bisect", bisect is not None),
        )
        if on
    ]
    if len(chosen) > 1:
        raise UsageError(
            f"{' and '.join(chosen)} cannot be used together",
            "give one comparison id, --last, --history or --bisect ID",
        )
