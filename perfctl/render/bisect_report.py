"""`perfctl report --bisect ID`: one bisection's steps drawn on its commit axis.

Every first-parent commit of GOOD..BAD is a category on the x axis, oldest first; each
measured commit is its change against GOOD with the 95% CI, coloured by how it was
judged; the dashed line is half the slowdown (the side a "like good" or "like bad"
figure lies on) and the solid one the slowdown itself. The figures are the record's
own: nothing is recomputed here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perfctl.model import RefInfo
from perfctl.render import bisect as text
from perfctl.render.charts import BASE_COLOUR, DOWN_COLOUR, HEAD_COLOUR, UP_COLOUR, label
from perfctl.render.html import IdMaker, PlotlyJs, add_chart, render_page
from perfctl.stats.bisection import Bisection, Likeness, Step, StepKind, halfway

Figure = dict[str, Any]
LIKENESS_COLOURS = {
    Likeness.GOOD: DOWN_COLOUR,
    Likeness.BAD: UP_COLOUR,
    Likeness.UNKNOWN: HEAD_COLOUR,
    Likeness.SKIPPED: BASE_COLOUR,
}


def render_bisection(
    b: Bisection,
    line: Sequence[RefInfo],
    *,
    out: Path,
    template_dir: Path | None = None,
    plotly_js: PlotlyJs = "inline",
) -> Path:
    """Write the bisection page to ``out`` and return its path."""
    return render_page("bisect.html.j2", bisect_context(b, line), out, template_dir, plotly_js)


def bisect_context(b: Bisection, line: Sequence[RefInfo]) -> dict[str, Any]:
    """Everything the bisection template needs; ``line`` is GOOD..BAD, oldest first."""
    figures: dict[str, Any] = {}
    chart = add_chart(
        figures, IdMaker().make("chart-bisect", b.regime), b.regime, steps_figure(b, line)
    )
    return {
        "kind": "bisect",
        "title": f"perfctl: bisect {b.regime}",
        "record": b,
        "headline": text.headline(b),
        "legend": text.legend(b),
        "columns": text.COLUMNS,
        "rows": text.rows(b),
        "skipped": text.skipped_lines(b),
        "seconds": f"{b.seconds:.0f} s",
        "axis_chart": chart,
        "figures": figures,
    }


def steps_figure(b: Bisection, line: Sequence[RefInfo]) -> Figure:
    """Change vs GOOD of every measured commit on the commit axis, with the two marks."""
    axis = [_tick(r) for r in line]
    steps = [*b.of_kind(StepKind.CONFIRM), *b.last_looks()]  # a commit's point: its last look
    # Every commit holds a place on the axis, measured or not (an invisible point each:
    # a category axis shows only categories that carry data).
    places = {"type": "scatter", "mode": "markers", "x": axis, "y": [0.0] * len(axis),
              "marker": {"opacity": 0}, "hoverinfo": "skip", "showlegend": False}  # fmt: skip
    data = [places, *(_trace(like, [s for s in steps if s.likeness == like]) for like in Likeness)]
    confirm = next(iter(b.of_kind(StepKind.CONFIRM)), None)
    shapes: list[dict[str, Any]] = []
    if confirm is not None and confirm.change is not None:
        for y, dash in ((confirm.change, "solid"), (halfway(confirm.change), "dash")):
            shapes.append(_hline(y * 100, dash))
    shas = [r.sha for r in line]
    if b.candidates and b.candidates[0].sha in shas and b.candidates[-1].sha in shas:
        shapes.append(_span(shas.index(b.candidates[0].sha), shas.index(b.candidates[-1].sha)))
    layout = {
        "title": {"text": label(f"{b.regime}: change vs GOOD per commit"), "x": 0.01},
        "height": 420,
        "margin": {"l": 70, "r": 20, "t": 60, "b": 120},
        "xaxis": {"type": "category", "categoryorder": "array", "categoryarray": axis,
                  "tickangle": -45, "automargin": True, "title": {"text": "commit (oldest first)"}},
        "yaxis": {"title": {"text": "change vs GOOD"}, "ticksuffix": "%", "zeroline": True},
        "legend": {"orientation": "h", "y": 1.1, "x": 1, "xanchor": "right"},
        "shapes": shapes,
        "hoverlabel": {"align": "left"},
    }  # fmt: skip
    return {"data": [t for t in data if t["x"]], "layout": layout}


def _tick(r: RefInfo) -> str:
    return label(r.short)


def _trace(likeness: Likeness, steps: Sequence[Step]) -> dict[str, Any]:
    x, y, plus, minus, hover = [], [], [], [], []
    for s in steps:
        change = s.change or 0.0
        low = change if s.ci_low is None else s.ci_low
        high = change if s.ci_high is None else s.ci_high
        x.append(_tick(s.commit))
        y.append(change * 100)
        plus.append((high - change) * 100)
        minus.append((change - low) * 100)
        what = "BAD vs GOOD" if s.kind == StepKind.CONFIRM else str(likeness)
        why = f"<br>{label(s.reason[:200])}" if s.reason else ""
        hover.append(
            f"{label(s.commit.short)} {label(s.commit.subject[:80])}<br>{label(what)}: "
            f"{label(text.change_text(s))}, {s.rounds} rounds{why}"
        )
    colour = LIKENESS_COLOURS[likeness]
    symbol = "x" if likeness == Likeness.SKIPPED else "circle"
    return {
        "type": "scatter", "mode": "markers", "x": x, "y": y, "name": label(str(likeness)),
        "marker": {"color": colour, "size": 10, "symbol": symbol},
        "error_y": {"type": "data", "symmetric": False, "array": plus, "arrayminus": minus,
                    "color": colour, "thickness": 1.5, "width": 4},
        "hovertext": hover, "hoverinfo": "text",
    }  # fmt: skip


def _hline(y: float, dash: str) -> dict[str, Any]:
    return {"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": y, "y1": y,
            "line": {"color": UP_COLOUR, "width": 1, "dash": dash}}  # fmt: skip


def _span(first: int, last: int) -> dict[str, Any]:
    """The culprit (or candidate range) shaded across the plot (category positions)."""
    return {"type": "rect", "xref": "x", "yref": "paper", "x0": first - 0.5, "x1": last + 0.5,
            "y0": 0, "y1": 1, "fillcolor": "rgba(214, 69, 69, 0.12)",
            "line": {"width": 0}, "layer": "below"}  # fmt: skip
