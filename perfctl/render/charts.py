"""Plotly figure builders for the HTML reports, and the time units they share.

Every builder returns a plain figure dict (``{"data": [...], "layout": {...}}``)
that the page hands to ``Plotly.newPlot``; the page applies one shared
:func:`template` to all of them. Plain dicts rather than ``graph_objects``:
validating 50 figures of 500 points took seconds (tests validate them
instead). Plotly renders a subset of HTML in every label, so all text that
comes from users (regime names, commit subjects, call-tree nodes) goes
through :func:`label` first and shows as text.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from perfctl.model import (
    FAILED,
    IMPROVED,
    INCONCLUSIVE,
    NO_CHANGE,
    REGRESSED,
    SKIPPED,
    VERDICTS,
    WITHIN_NOISE,
    RegimeComparison,
)
from perfctl.render.tables import fmt_pct, fmt_time
from perfctl.stats.band import own_band

BASE_COLOUR = "#8a94a6"
HEAD_COLOUR = "#2a6fdb"
UP_COLOUR = "#d64545"  # slower
DOWN_COLOUR = "#2e9e5b"  # faster
BAND_FILL = "rgba(42, 111, 219, 0.15)"
VERDICT_COLOURS: dict[str, str] = {
    REGRESSED: UP_COLOUR,
    FAILED: UP_COLOUR,
    IMPROVED: DOWN_COLOUR,
    INCONCLUSIVE: "#c98a00",
    WITHIN_NOISE: "#3a8fb7",
    NO_CHANGE: BASE_COLOUR,
    SKIPPED: "#c3c9d3",
}
_UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))
_TOP_NODES = 12
_LOG_SPREAD = 30.0  # a family spanning this factor or more gets a log axis
Figure = dict[str, Any]


@dataclass(frozen=True)
class MovedNode:
    """One call-tree node of a differential profile, seconds per op on each side."""

    node: str
    before_s: float
    after_s: float


@dataclass(frozen=True)
class TrendPoint:
    """One stored run of one regime on the history chart."""

    x: str
    median_s: float
    ci_low_s: float
    ci_high_s: float
    hover: str
    change: bool = False


def pick_unit(seconds: float) -> tuple[str, float]:
    """The largest time unit in which ``seconds`` is at least 1, and its scale."""
    for name, scale in _UNITS:
        if abs(seconds) >= scale:
            return name, scale
    return _UNITS[-1]


def format_per_op(seconds: float | None) -> str:
    """Seconds per op in a readable unit, e.g. ``12.3 µs/op``; ``—`` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "—"
    return f"{fmt_time(seconds)}/op"


def format_change(change: float | None) -> str:
    """A relative change as a signed percentage, e.g. ``+4.2%``; ``—`` when unknown."""
    return "—" if change is None or not math.isfinite(change) else fmt_pct(change)


def label(text: str) -> str:
    """User text made safe for plotly's HTML-like labels (shown literally)."""
    return html.escape(str(text), quote=False)


def template() -> dict[str, Any]:
    """The plotly template every figure of a page shares (sent once, not per figure)."""
    import plotly.io as pio

    return dict(pio.templates["plotly_white"].to_plotly_json())


def _layout(title: str, unit: str, **extra: Any) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "title": {"text": title, "x": 0.01, "font": {"size": 15}},
        "height": 380,
        "margin": {"l": 70, "r": 20, "t": 50, "b": 90},
        "xaxis": {"tickangle": -25, "automargin": True},
        # No SI suffixes ("500µ") on numbers that are already in `unit`.
        "yaxis": {
            "title": {"text": f"time per op ({unit})"},
            "rangemode": "tozero",
            "exponentformat": "none",
        },
        "legend": {"orientation": "h", "y": 1.12, "x": 1, "xanchor": "right"},
        "hoverlabel": {"align": "left"},
    }
    layout.update(extra)
    return layout


def _log_if_spread(layout: dict[str, Any], values: Sequence[float], scale: float) -> dict[str, Any]:
    # Parametrised regimes (size=4k vs size=1m) often differ by orders of
    # magnitude; on a linear axis the small ones would vanish.
    positive = [v for v in values if v > 0]
    if positive and max(positive) / min(positive) >= _LOG_SPREAD:
        vals, text = log_ticks(min(positive), max(positive), scale)
        layout["yaxis"] = {
            **layout["yaxis"],
            "type": "log",
            "rangemode": "normal",
            # Plotly's own log ticks are SI numbers ("100µ" on a ms axis): every
            # tick names its unit instead, so the title names none.
            "title": {"text": "time per op (log scale)"},
            "tickvals": vals,
            "ticktext": text,
        }
    return layout


def log_ticks(lo_s: float, hi_s: float, scale: float) -> tuple[list[float], list[str]]:
    """Log-axis ticks over ``lo_s``..``hi_s`` seconds: values in the axis unit, labelled with units."""
    first = math.floor(math.log10(lo_s))
    last = math.ceil(math.log10(hi_s))
    steps = (1, 2, 5) if last - first <= 3 else (1,)
    first, last = first - 1, last + 1  # error bars may reach past the medians; plotly clips
    seconds = [m * 10.0**e for e in range(first, last + 1) for m in steps]
    return [v / scale for v in seconds], [fmt_time(v) for v in seconds]


def _sides(base_label: str, head_label: str) -> tuple[tuple[str, str, str], ...]:
    return (("base", base_label, BASE_COLOUR), ("head", head_label, HEAD_COLOUR))


def bars_figure(
    family: str, regimes: Sequence[RegimeComparison], base_label: str, head_label: str
) -> Figure:
    """Base vs head median per op for one family, on a shared axis with CI error bars."""
    rows = [r for r in regimes if r.base is not None or r.head is not None]
    peak = max((s.ci_high_s for r in rows for s in (r.base, r.head) if s is not None), default=1.0)
    unit, scale = pick_unit(peak)
    traces = []
    for side, name, colour in _sides(base_label, head_label):
        x, y, plus, minus, hover = [], [], [], [], []
        for r in rows:
            stats = r.base if side == "base" else r.head
            if stats is None:
                continue
            x.append(label(r.name))
            y.append(stats.median_s / scale)
            plus.append((stats.ci_high_s - stats.median_s) / scale)
            minus.append((stats.median_s - stats.ci_low_s) / scale)
            hover.append(
                f"{label(r.name)}<br>{label(name)}: {format_per_op(stats.median_s)}"
                f"<br>CI {format_per_op(stats.ci_low_s)} – {format_per_op(stats.ci_high_s)}"
                f"<br>{stats.n_processes} processes, CV {stats.cv * 100:.1f}%"
            )
        error: dict[str, Any] = {"type": "data", "symmetric": False, "array": plus,
                                 "arrayminus": minus, "thickness": 1.2}  # fmt: skip
        traces.append(
            {"type": "bar", "x": x, "y": y, "name": label(name), "marker": {"color": colour},
             "hovertext": hover, "hoverinfo": "text", "error_y": error}
        )  # fmt: skip
    layout = _layout(f"{label(family)}: time per op", unit, barmode="group")
    medians = [s.median_s for r in rows for s in (r.base, r.head) if s is not None]
    return {"data": traces, "layout": _log_if_spread(layout, medians, scale)}


def _add_points(r: RegimeComparison, side: str, scale: float, out: dict[str, list[Any]]) -> None:
    processes = r.base_values if side == "base" else r.head_values
    order = r.base_order if side == "base" else r.head_order
    for p, values in enumerate(processes):
        pos = f"#{order[p]}" if p < len(order) else "unknown"
        for k, v in enumerate(values):
            out["x"].append(label(r.name))
            out["y"].append(v / scale)
            out["hovertext"].append(
                f"{side} process {p + 1}/{len(processes)}, value {k + 1}"
                f"<br>run order {pos}<br>{format_per_op(v)}"
            )


def distribution_figure(
    family: str, regimes: Sequence[RegimeComparison], base_label: str, head_label: str
) -> Figure:
    """Every raw value of one family as base/head box plots, run order on hover."""
    values = [v for r in regimes for proc in (*r.base_values, *r.head_values) for v in proc]
    unit, scale = pick_unit(max(values, default=1.0))
    traces = []
    for side, name, colour in _sides(base_label, head_label):
        points: dict[str, list[Any]] = {"x": [], "y": [], "hovertext": []}
        for r in regimes:
            _add_points(r, side, scale, points)
        traces.append(
            {"type": "box", **points, "name": label(name), "marker": {"color": colour, "size": 4},
             "boxpoints": "all", "jitter": 0.5, "pointpos": 0, "hoverinfo": "text"}
        )  # fmt: skip
    layout = _layout(f"{label(family)}: every value", unit, boxmode="group")
    return {"data": traces, "layout": _log_if_spread(layout, values, scale)}


def _waterfall(x: list[str], before: float, deltas: list[float], after: float, scale: float,
               **extra: Any) -> dict[str, Any]:  # fmt: skip
    return {
        "type": "waterfall", "x": x, "name": "delta", "showlegend": False,
        "measure": ["absolute", *(["relative"] * len(deltas)), "total"],
        "y": [before / scale, *(d / scale for d in deltas), 0.0],
        "text": [format_per_op(before), *map(_signed, deltas), format_per_op(after)],
        "textposition": "outside", "totals": {"marker": {"color": HEAD_COLOUR}},
        "increasing": {"marker": {"color": UP_COLOUR}},
        "decreasing": {"marker": {"color": DOWN_COLOUR}}, **extra,
    }  # fmt: skip


def profile_waterfall_figure(
    regime: str, nodes: Sequence[MovedNode], base_label: str, head_label: str
) -> Figure:
    """Stacked before/after bars of the top call-tree nodes, beside their per-node deltas."""
    top = top_nodes(nodes)
    before = sum(n.before_s for n in top)
    after = sum(n.after_s for n in top)
    unit, scale = pick_unit(max(before, after, 1e-12))
    sides = [label(base_label), label(head_label)]
    traces: list[dict[str, Any]] = [
        {"type": "bar", "x": sides, "y": [n.before_s / scale, n.after_s / scale],
         "name": label(n.node), "hoverinfo": "text", "showlegend": True,
         "hovertext": [f"{label(n.node)}<br>{format_per_op(v)}" for v in (n.before_s, n.after_s)]}
        for n in top
    ]  # fmt: skip
    x = [sides[0], *(label(n.node) for n in top), sides[1]]
    deltas = [n.after_s - n.before_s for n in top]
    traces.append(_waterfall(x, before, deltas, after, scale, xaxis="x2", yaxis="y2"))
    layout = _layout(
        f"{label(regime)}: top call-tree nodes", unit, barmode="stack", showlegend=True,
        # The stacked bars' colours are named only here (the waterfall labels its x axis).
        legend={"title": {"text": "call-tree node"}, "traceorder": "reversed"},
        height=420, xaxis={"domain": [0, 0.27], "tickangle": -30, "automargin": True},
        xaxis2={"domain": [0.33, 1], "anchor": "y2", "tickangle": -30, "automargin": True},
        yaxis2={"matches": "y", "anchor": "x2", "showticklabels": False},
    )  # fmt: skip
    return {"data": traces, "layout": layout}


def top_nodes(nodes: Sequence[MovedNode], limit: int = _TOP_NODES) -> list[MovedNode]:
    """The nodes that moved most, the rest summed into one, every label unique."""
    ranked = sorted(nodes, key=lambda n: abs(n.after_s - n.before_s), reverse=True)
    top, rest = ranked[:limit], ranked[limit:]
    if rest:
        top.append(MovedNode(f"{len(rest)} other nodes", sum(n.before_s for n in rest),
                             sum(n.after_s for n in rest)))  # fmt: skip
    seen: dict[str, int] = {}
    out = []
    for n in top:
        # Waterfall x values are categories: a repeated label would merge two steps.
        seen[n.node] = seen.get(n.node, 0) + 1
        k = seen[n.node]
        out.append(n if k == 1 else MovedNode(f"{n.node} ({k})", n.before_s, n.after_s))
    return out


def _signed(seconds: float) -> str:
    return ("+" if seconds >= 0 else "−") + format_per_op(abs(seconds))


def changes_figure(regimes: Sequence[RegimeComparison], threshold: float) -> Figure:
    """Each tested regime's stored change with its 95% CI on one % axis, noise band shaded
    (a regime's own band, ``@regime(threshold=)``, shaded on its row).

    Without a profile diff there is no common time to split: regimes of
    different sizes cannot share a time axis, but their relative changes can.
    The figures are the comparison's own (``change``, ``ci_low``, ``ci_high``).
    """
    rows = [r for r in regimes if r.change is not None]
    traces = [_changes_trace(v, [r for r in rows if r.verdict == v], threshold) for v in VERDICTS]
    band = threshold * 100
    title = "Change per regime (Hodges–Lehmann) with its 95% CI"
    layout = _layout(
        title, "%", height=max(260, 110 + 26 * len(rows)),
        margin={"l": 20, "r": 20, "t": 60, "b": 50},
        xaxis={"title": {"text": "change, head vs base"}, "ticksuffix": "%", "zeroline": True,
               "zerolinecolor": "#444", "automargin": True},
        yaxis={"type": "category", "autorange": "reversed", "automargin": True,
               "categoryorder": "array", "categoryarray": [label(r.name) for r in rows]},
        shapes=[{"type": "rect", "xref": "x", "yref": "paper", "x0": -band, "x1": band, "y0": 0,
                 "y1": 1, "fillcolor": BAND_FILL, "line": {"width": 0}, "layer": "below"}]
        + [{"type": "rect", "xref": "x", "yref": "y", "x0": -own * 100, "x1": own * 100,
            "y0": i - 0.4, "y1": i + 0.4, "fillcolor": BAND_FILL, "line": {"width": 0},
            "layer": "below"}
           for i, r in enumerate(rows)
           if (own := own_band(r.threshold, threshold)) is not None],
    )  # fmt: skip
    return {"data": [t for t in traces if t["x"]], "layout": layout}


def _changes_trace(
    verdict: str, rows: Sequence[RegimeComparison], threshold: float
) -> dict[str, Any]:
    x, plus, minus, hover = [], [], [], []
    for r in rows:
        change = r.change or 0.0
        low = change if r.ci_low is None else r.ci_low
        high = change if r.ci_high is None else r.ci_high
        x.append(change * 100)
        plus.append((high - change) * 100)
        minus.append((change - low) * 100)
        # Said only where it differs from the chart's band, as the row's shading is.
        band = own_band(r.threshold, threshold)
        own = f"<br>its own noise band: ±{band * 100:g}%" if band is not None else ""
        hover.append(
            f"{label(r.name)}<br>{label(verdict)}: {format_change(r.change)} "
            f"[{format_change(r.ci_low)}, {format_change(r.ci_high)}]{own}"
        )
    colour = VERDICT_COLOURS.get(verdict, BASE_COLOUR)
    return {
        "type": "scatter", "mode": "markers", "x": x, "y": [label(r.name) for r in rows],
        "name": label(verdict), "marker": {"color": colour, "size": 9},
        "error_x": {"type": "data", "symmetric": False, "array": plus, "arrayminus": minus,
                    "color": colour, "thickness": 1.5, "width": 4},
        "hovertext": hover, "hoverinfo": "text",
    }  # fmt: skip


def trend_figure(regime: str, points: Sequence[TrendPoint], dates: bool) -> Figure:
    """Median per op across stored runs with a CI band and change markers."""
    unit, scale = pick_unit(max((p.ci_high_s for p in points), default=1.0))
    x = [p.x for p in points]
    changes = [p for p in points if p.change]
    line = {"mode": "lines", "line": {"width": 0}, "hoverinfo": "skip", "type": "scatter"}
    data = [
        {**line, "x": x, "y": [p.ci_high_s / scale for p in points], "showlegend": False},
        {**line, "x": x, "y": [p.ci_low_s / scale for p in points], "fill": "tonexty",
         "fillcolor": BAND_FILL, "name": "95% CI (range under 6 processes)"},
        {"type": "scatter", "x": x, "y": [p.median_s / scale for p in points],
         "mode": "lines+markers", "line": {"color": HEAD_COLOUR, "width": 1.5},
         "marker": {"size": 5}, "hovertext": [p.hover for p in points], "hoverinfo": "text",
         "name": "median"},
        {"type": "scatter", "x": [p.x for p in changes],
         "y": [p.median_s / scale for p in changes], "mode": "markers",
         "hovertext": [p.hover for p in changes], "hoverinfo": "text", "name": "change detected",
         "marker": {"symbol": "diamond", "size": 12, "color": UP_COLOUR,
                    "line": {"width": 1, "color": "#fff"}}},
    ]  # fmt: skip
    xaxis: dict[str, Any] = {"title": {"text": "commit date" if dates else "commit"}}
    if not dates:
        xaxis["type"] = "category"
    return {"data": data, "layout": _layout(label(regime), unit, xaxis=xaxis, height=340)}


# ------------------------------------------------------------ history data
