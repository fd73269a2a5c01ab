"""What compare and merge print, and the exit code a comparison gives."""

from __future__ import annotations

from typing import Any

import typer

from perfctl.cli.common import Format, emit, err_console, out_console
from perfctl.errors import EXIT_REGRESSION
from perfctl.model import Comparison


def show_comparison(c: Comparison, fmt: Format) -> None:
    """Print a comparison in the chosen format (the table and its notes on stdout; the
    verdict test, time line and warnings on stderr)."""

    from perfctl.render import tables as render
    from perfctl.render.notes import comparison_notes, time_line

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
        for line in comparison_notes(c, paths=True):
            console.print(render.esc(line))
        err.print(
            f"Verdicts: {render.verdict_test(c)}, Benjamini–Hochberg corrected "
            f"across {_families(c)}; change CI must clear ±{c.threshold * 100:g}%."
        )
        took = time_line(c)
        if took:
            err.print(render.esc(took))
        for w in c.warnings:
            err.print(f"[yellow]Warning: {render.esc(w)}[/yellow]")
        if c.recomputed_from:
            err.print(f"recomputed from stored comparison {c.recomputed_from}; measured nothing")
        err.print(f"stored as comparison {c.id}")


def progress_line(err: Any, status: Any, message: str) -> None:
    """Spinner text for progress; lasting lines (a Notice) for what the user should know.

    The spinner is not drawn when stderr is not a terminal, so a Notice is
    printed in both modes.
    """
    from perfctl.model import Notice
    from perfctl.render.tables import esc

    status.update(esc(message))
    if isinstance(message, Notice):
        err.print(esc(message))


def exit_code(c: Comparison, fail_on_regression: bool) -> None:
    """Exit 3 (RegimeFailed) when a regime failed; exit 1 on regression when gating."""
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


def _families(c: Comparison) -> str:
    """The BH families, as the footer names them (baselines are their own family)."""
    named = {r.baseline for r in c.regimes if r.baseline}
    refs = sum(r.name in named for r in c.regimes)
    tested = len(c.regimes) - refs
    if not refs:
        return f"{tested} regimes"
    return f"{tested} regimes ({refs} baseline regime(s) corrected as their own family)"
