"""Self-contained HTML reports: one comparison, or the history of stored runs.

The stage turns records into a plain template context, builds the plotly
figures (:mod:`perfctl.render.charts`) and renders the Jinja2 templates shipped in
``perfctl.render.templates`` (a ``--template-dir`` is searched first). Plotly's JS is
written into the page once, inline or as one CDN ``<script src>``; everything
else, small flamegraph SVGs included, lives inside the one file.
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from perfctl.model import VERDICTS, Comparison, RegimeComparison, Run
from perfctl.profile import links
from perfctl.render import charts, notes
from perfctl.render.charts import MovedNode, format_change, format_per_op
from perfctl.render.history import history_context
from perfctl.render.html import IdMaker, PlotlyJs, add_chart, render_page, slug, sortable
from perfctl.render.tables import fmt_metric, regime_metric_rows

EMBED_LIMIT_BYTES = 2 * 2**20  # larger SVGs are linked, not embedded
_SIDE_RANK = {"base": 0, "head": 1, "diff": 2}  # artefact order: base_*, head_*, diff_*
_DIFF_KEYS = ("profile_diff", "diff_json")  # the profile stage's key, and the early name
_MOVED_KEYS = ("where_the_time_moved", "where_time_moved", "moved", "top_nodes")
# The flamegraph table's columns: artefact key -> column heading.
FLAME_COLUMNS = (
    ("base_flamegraph", "base"),
    ("head_flamegraph", "head"),
    ("diff_flamegraph", "diff"),
    ("diff_flamegraph_reverse", "reverse diff"),
    ("instructions_diff_flamegraph", "instructions diff"),
    ("instructions_diff_flamegraph_reverse", "instructions reverse diff"),
)


def render_comparison(
    c: Comparison,
    *,
    project_root: Path,
    out: Path,
    template_dir: Path | None = None,
    plotly_js: PlotlyJs = "inline",
) -> Path:
    """Write the HTML report of one comparison to ``out`` and return its path."""
    out = Path(out)
    context = comparison_context(c, Path(project_root), out.resolve().parent)
    return render_page("comparison.html.j2", context, out, template_dir, plotly_js)


def render_history(
    runs: Sequence[Run],
    *,
    out: Path,
    template_dir: Path | None = None,
    plotly_js: PlotlyJs = "inline",
    machine_id: str | None = None,
) -> Path:
    """Write the trend report of stored runs of one machine to ``out`` and return its path."""
    context = history_context(list(runs), machine_id)
    return render_page("history.html.j2", context, Path(out), template_dir, plotly_js)


# ---------------------------------------------------------------- comparison


def comparison_context(c: Comparison, project_root: Path, html_dir: Path) -> dict[str, Any]:
    """Everything the comparison template needs, figures included."""
    figures: dict[str, Any] = {}
    ids = IdMaker()
    base_label, head_label = f"base {c.base.ref}", f"head {c.head.ref}"
    families = _by_family(c.sorted_regimes())
    bars, dists = [], []
    for fam, regimes in families.items():
        if any(r.base is not None or r.head is not None for r in regimes):
            fig = charts.bars_figure(fam, regimes, base_label, head_label)
            bars.append(add_chart(figures, ids.make("chart-bars", fam), fam, fig))
        if any(r.base_values or r.head_values for r in regimes):
            fig = charts.distribution_figure(fam, regimes, base_label, head_label)
            dists.append(add_chart(figures, ids.make("chart-dist", fam), fam, fig))
    keys = {k for r in c.regimes for k in r.artifacts}
    # Only the columns some regime has: py-spy's, callgrind's (--measure instructions), or both.
    columns = tuple((k, h) for k, h in FLAME_COLUMNS if k in keys) or FLAME_COLUMNS[:4]
    profiles = [_profile_view(r, project_root, html_dir, ids, columns) for r in c.sorted_regimes()]
    profiles = [p for p in profiles if p["artefacts"]]
    waterfalls, waterfall_kind = _waterfalls(c, profiles, figures, ids, (base_label, head_label))
    return {
        "kind": "comparison",
        "title": f"perfctl: {c.base.ref} → {c.head.ref}",
        "comparison": c,
        "sides": [("base", c.base), ("head", c.head)],
        "commits": list(c.commits),
        "machine": c.machine.describe(),
        "head_machine": _other_machine(c),
        "settings": _settings(c),
        "counts": [{"verdict": v, "slug": slug(v), "n": n} for v, n in c.counts().items()],
        "warnings": list(c.warnings),
        "notes": notes.comparison_notes(c, root=project_root),
        "rows": [_row(r, ids) for r in c.sorted_regimes()],
        "bars": bars,
        "distributions": dists,
        "waterfalls": waterfalls,
        "waterfall_kind": waterfall_kind,
        "profiles": profiles,
        "profile_command": links.profile_command("REGIME", c),
        "flame_columns": [heading for _, heading in columns],
        "figures": figures,
    }


def _by_family(regimes: Sequence[RegimeComparison]) -> dict[str, list[RegimeComparison]]:
    out: dict[str, list[RegimeComparison]] = defaultdict(list)
    for r in regimes:
        out[r.family or r.name].append(r)
    return dict(sorted(out.items()))


def _other_machine(c: Comparison) -> str | None:
    # Only worth a line (and a warning colour) when head ran elsewhere.
    if c.head_machine is None or c.head_machine.id == c.machine.id:
        return None
    return c.head_machine.describe()


def _settings(c: Comparison) -> list[tuple[str, str]]:
    items = {**c.settings, "threshold": c.threshold, "alpha": c.alpha, "correction": c.correction}
    return [
        (k, v if isinstance(v, str) else json.dumps(v, default=str))
        for k, v in sorted(items.items())
    ]


def _per_op(value: float | None, unit: str) -> str:
    """Time per op, or a counter with its unit (``--measure instructions|memory``)."""
    from perfctl.render.tables import fmt_value

    return format_per_op(value) if unit == "s" or value is None else fmt_value(value, unit)


def _row(r: RegimeComparison, ids: IdMaker) -> dict[str, Any]:
    base = r.base.median_s if r.base else None
    head = r.head.median_s if r.head else None
    return {
        "id": ids.make("row", r.name),
        "name": r.name,
        "family": r.family,
        "summary": (r.description.strip().splitlines() or [""])[0],
        "description": r.description,
        "verdict": r.verdict,
        "verdict_slug": slug(r.verdict),
        "rank": VERDICTS.index(r.verdict) if r.verdict in VERDICTS else len(VERDICTS),
        "reason": r.reason,
        "base": _per_op(base, r.unit),
        "head": _per_op(head, r.unit),
        "base_sort": sortable(base),
        "head_sort": sortable(head),
        "change": format_change(r.change),
        "ci": _ci_text(r),
        "medians": format_change(head / base - 1) if base and head is not None else "",
        "change_sort": sortable(r.change),
        "p": "—" if r.p_adjusted is None else f"{r.p_adjusted:.3g}",
        "ratio": _ratio_text(r),
        "ratio_sort": sortable(r.head.baseline_ratio if r.head else None),
        "n": "/".join(str(s.n_processes) if s else "—" for s in (r.base, r.head)),
        "cv": "/".join(f"{s.cv * 100:.1f}%" if s else "—" for s in (r.base, r.head)),
        "metrics": [
            {
                "name": m["metric"],
                "base": fmt_metric(m["base"]),
                "head": fmt_metric(m["head"]),
                "change": format_change(m["change"]),
            }
            for m in regime_metric_rows(r)
        ],
    }


def _ci_text(r: RegimeComparison) -> str:
    if r.ci_low is None or r.ci_high is None:
        return ""
    return f"[{format_change(r.ci_low)}, {format_change(r.ci_high)}]"


def _ratio_text(r: RegimeComparison) -> str:
    ratios = [s.baseline_ratio if s else None for s in (r.base, r.head)]
    if all(x is None for x in ratios):
        return "—"
    return " → ".join("—" if x is None else f"×{x:.2f}" for x in ratios)


# ------------------------------------------------------- profile artefacts


def _profile_view(
    r: RegimeComparison,
    root: Path,
    html_dir: Path,
    ids: IdMaker,
    columns: tuple[tuple[str, str], ...] = FLAME_COLUMNS,
) -> dict[str, Any]:
    keys = sorted(r.artifacts, key=lambda k: (_SIDE_RANK.get(k.split("_")[0], 3), k))
    artefacts = [_artefact(k, r.artifacts[k], root, html_dir) for k in keys]
    diff = next((a for a in artefacts if a["exists"] and a["key"] in _DIFF_KEYS), None)
    moved = read_moved(Path(diff["path"])) if diff else []
    view_id = ids.make("profile", r.name)
    by_key = {a["key"]: a for a in artefacts}
    for a in artefacts:
        a["view_id"] = f"{view_id}-{slug(a['key'])}"
    return {
        "id": view_id,
        "name": r.name,
        "artefacts": artefacts,
        # One table row per regime: a cell per flame graph column, the rest as data files.
        "flames": [by_key.get(key) for key, _ in columns],
        "files": [a for a in artefacts if a["key"] not in dict(columns)],
        "moved": moved,
    }


def _artefact(key: str, raw: str, root: Path, html_dir: Path) -> dict[str, Any]:
    path = Path(raw) if Path(raw).is_absolute() else root / raw
    exists = path.is_file()
    try:
        href = quote(Path(os.path.relpath(path, html_dir)).as_posix())
    except ValueError:  # another drive (Windows): no relative path exists
        href = path.as_uri()
    is_svg = path.suffix.lower() == ".svg"
    embed = _data_uri(path) if exists and is_svg else None
    return {
        "key": key,
        "label": re.sub(r"\bflame\b", "flamegraph", key.replace("_", " ")),
        "path": str(path),
        "href": href,
        "exists": exists,
        "svg": is_svg,
        "src": embed or href,
        "embedded": embed is not None,
    }


def _data_uri(path: Path) -> str | None:
    # Embedding keeps the report whole when it is copied alone (e.g. a CI
    # artefact); very large profiles are linked instead.
    if path.stat().st_size > EMBED_LIMIT_BYTES:
        return None
    return "data:image/svg+xml;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def read_moved(path: Path) -> list[MovedNode]:
    """The "where the time moved" steps of a diff.json; [] when missing or malformed.

    Reads the profile stage's ``moved`` object (``steps`` plus the totals) and
    plain lists of ``{node, before_per_op_s, after_per_op_s}``.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    items, totals = _moved_parts(data)
    nodes = [n for n in map(_moved_node, items) if n is not None]
    return _with_rest(nodes, totals) if nodes else []


def _moved_parts(data: Any) -> tuple[list[Any], tuple[float, float] | None]:
    if isinstance(data, list):
        return data, None
    if not isinstance(data, dict):
        return [], None
    moved = data.get("moved")
    if isinstance(moved, dict) and isinstance(moved.get("steps"), list):
        totals = _moved_node({**moved, "node": "total"})
        return moved["steps"], (totals.before_s, totals.after_s) if totals else None
    for key in _MOVED_KEYS:
        if isinstance(data.get(key), list):
            return data[key], None
    return [], None


def _moved_node(item: Any) -> MovedNode | None:
    name = item.get("node", item.get("label")) if isinstance(item, dict) else None
    if name is None:
        return None
    try:
        node = MovedNode(str(name), float(item["before_per_op_s"]), float(item["after_per_op_s"]))
    except (KeyError, TypeError, ValueError):
        return None
    return node if math.isfinite(node.before_s) and math.isfinite(node.after_s) else None


def _with_rest(nodes: list[MovedNode], totals: tuple[float, float] | None) -> list[MovedNode]:
    # Steps may leave part of the measured time per op uncovered; showing it
    # makes the waterfall end at the regime's real totals.
    if totals is None:
        return nodes
    rest = (totals[0] - sum(n.before_s for n in nodes), totals[1] - sum(n.after_s for n in nodes))
    if min(rest) >= 0 and max(rest) > 0.005 * max(totals):
        return [*nodes, MovedNode("(elsewhere)", *rest)]
    return nodes


def _waterfalls(
    c: Comparison,
    profiles: list[dict[str, Any]],
    figures: dict[str, Any],
    ids: IdMaker,
    labels: tuple[str, str],
) -> tuple[list[dict[str, str]], str]:
    out = []
    for p in profiles:
        if p["moved"]:
            fig = charts.profile_waterfall_figure(p["name"], p["moved"], *labels)
            out.append(add_chart(figures, ids.make("chart-waterfall", p["name"]), p["name"], fig))
    if out:
        return out, "profile"
    if not any(r.change is not None for r in c.regimes):
        return [], "none"
    # No waterfall without a profile diff: the regimes share no time axis.
    fig = charts.changes_figure(c.sorted_regimes(), c.threshold)
    return [add_chart(figures, "chart-changes", "change per regime", fig)], "regimes"


# ------------------------------------------------------------------ history


# ---------------------------------------------------------------- rendering
