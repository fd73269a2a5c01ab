"""Self-contained HTML reports: one comparison, or the history of stored runs.

The stage turns records into a plain template context, builds the plotly
figures (:mod:`perfctl.render.charts`) and renders the Jinja2 templates shipped in
``perfctl.render.templates`` (a ``--template-dir`` is searched first). Plotly's JS is
written into the page once, inline or as one CDN ``<script src>``; everything
else, small flamegraph SVGs included, lives inside the one file.
"""

from __future__ import annotations

import base64
import functools
import json
import math
import os
import re
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote

from perfctl.errors import StoreError, UsageError
from perfctl.model import VERDICTS, Comparison, RegimeComparison, Run
from perfctl.profile import links
from perfctl.render import charts
from perfctl.render.charts import MovedNode, format_change, format_per_op
from perfctl.render.tables import fmt_metric, regime_metric_rows
from perfctl.store.outputs import STDOUT, check_output_file, write_output

if TYPE_CHECKING:
    from perfctl.config import Config

PlotlyJs = Literal["inline", "cdn"]
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
    return _render("comparison.html.j2", context, out, template_dir, plotly_js)


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
    return _render("history.html.j2", context, Path(out), template_dir, plotly_js)


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
    store = open_store(config.state_dir)
    js: PlotlyJs = "cdn" if cdn else "inline"
    if history:
        runs = store.list_runs()
        if not runs:
            raise StoreError(
                "no stored runs to chart", "run `perfctl run` or `perfctl compare` first"
            )
        target = out or config.reports_dir / "history.html"
        return render_history(
            runs, out=target, template_dir=template_dir, plotly_js=js, machine_id=machine
        )
    c = store.load_comparison(comparison_id) if comparison_id else store.last_comparison()
    c = links.link_profiles(config.reports_dir, c)  # `perfctl profile --vs` of these commits
    target = out or config.reports_dir / f"comparison-{c.id}.html"
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
    profiles = [_profile_view(r, project_root, html_dir, ids) for r in c.sorted_regimes()]
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
        "rows": [_row(r, ids) for r in c.sorted_regimes()],
        "bars": bars,
        "distributions": dists,
        "waterfalls": waterfalls,
        "waterfall_kind": waterfall_kind,
        "profiles": profiles,
        "profile_command": links.profile_command("REGIME", c),
        "flame_columns": [heading for _, heading in FLAME_COLUMNS],
        "figures": figures,
    }


class IdMaker:
    """Unique, readable HTML ids (``chart-bars-ipc``, ``chart-bars-ipc-2``...)."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def make(self, prefix: str, name: str) -> str:
        """A fresh id from a prefix and any user text."""
        base = f"{prefix}-{slug(name)}"
        candidate, n = base, 1
        while candidate in self.seen:
            n += 1
            candidate = f"{base}-{n}"
        self.seen.add(candidate)
        return candidate


def slug(text: str) -> str:
    """Lower-case ASCII letters, digits and dashes only (safe in ids and classes)."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


def add_chart(figures: dict[str, Any], chart_id: str, title: str, fig: Any) -> dict[str, str]:
    """Register a figure under its div id; returns the view the template loops over."""
    figures[chart_id] = fig
    return {"id": chart_id, "title": title}


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
        "base": format_per_op(base),
        "head": format_per_op(head),
        "base_sort": _sortable(base),
        "head_sort": _sortable(head),
        "change": format_change(r.change),
        "ci": _ci_text(r),
        "medians": format_change(head / base - 1) if base and head is not None else "",
        "change_sort": _sortable(r.change),
        "p": "—" if r.p_adjusted is None else f"{r.p_adjusted:.3g}",
        "ratio": _ratio_text(r),
        "ratio_sort": _sortable(r.head.baseline_ratio if r.head else None),
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


def _sortable(value: float | None) -> str:
    # Unknown values sort last: the JS treats an empty key as +infinity.
    return "" if value is None or not math.isfinite(value) else repr(value)


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


def _profile_view(r: RegimeComparison, root: Path, html_dir: Path, ids: IdMaker) -> dict[str, Any]:
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
        "flames": [by_key.get(key) for key, _ in FLAME_COLUMNS],
        "files": [a for a in artefacts if a["key"] not in dict(FLAME_COLUMNS)],
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


def history_context(runs: list[Run], machine_id: str | None) -> dict[str, Any]:
    """Everything the history template needs: one trend chart per regime."""
    chosen, machines = _pick_machine(runs, machine_id)
    mine = sorted(
        (r for r in runs if r.machine.id == chosen),
        key=lambda r: (charts.commit_time(r) or "", r.started),
    )
    dates = all(charts.commit_time(r) for r in mine)
    figures: dict[str, Any] = {}
    ids = IdMaker()
    families: dict[str, list[dict[str, str]]] = defaultdict(list)
    series = charts.trend_series(mine, dates)
    for s in series:
        fig = charts.trend_figure(s.name, s.points, dates)
        families[s.family].append(add_chart(figures, ids.make("chart-trend", s.name), s.name, fig))
    return {
        "kind": "history",
        "title": "perfctl: history",
        "machine": mine[0].machine.describe() if mine else "no runs stored",
        "machine_id": chosen,
        "machines": machines,
        "runs": list(reversed(mine)),
        "families": [
            {"id": ids.make("family", f), "name": f, "charts": c}
            for f, c in sorted(families.items())
        ],
        "summary": [_trend_row(s) for s in series],
        "figures": figures,
    }


def _pick_machine(runs: list[Run], machine_id: str | None) -> tuple[str, list[dict[str, Any]]]:
    counts: dict[str, int] = {}
    describe: dict[str, str] = {}
    for r in runs:  # newest first, so dict order ranks ties newest first
        counts[r.machine.id] = counts.get(r.machine.id, 0) + 1
        describe.setdefault(r.machine.id, r.machine.describe())
    if machine_id is None:
        chosen = max(counts, key=lambda m: counts[m], default="")
    else:
        matches = [m for m in counts if m.startswith(machine_id)]
        if len(matches) != 1:
            known = ", ".join(f"{m} ({n} runs)" for m, n in counts.items()) or "none"
            raise StoreError(
                f"machine `{machine_id}` matches {len(matches)} stored fingerprints",
                f"pick one of: {known}",
            )
        chosen = matches[0]
    machines = [
        {"id": m, "describe": describe[m], "runs": n, "chosen": m == chosen}
        for m, n in counts.items()
    ]
    return chosen, machines


def _trend_row(s: charts.TrendSeries) -> dict[str, Any]:
    first, latest = s.points[0].median_s, s.points[-1].median_s
    change = latest / first - 1 if first > 0 else None
    return {
        "name": s.name,
        "family": s.family,
        "runs": len(s.points),
        "first": format_per_op(first),
        "latest": format_per_op(latest),
        "latest_sort": _sortable(latest),
        "change": format_change(change),
        "change_sort": _sortable(change),
        "changes": sum(p.change for p in s.points),
    }


# ---------------------------------------------------------------- rendering


def _render(
    name: str,
    context: dict[str, Any],
    out: Path,
    template_dir: Path | None,
    plotly_js: str,
) -> Path:
    import jinja2

    from perfctl import __version__

    env = _environment(template_dir)
    full = {**context, "plotly": _plotly_context(plotly_js), "perfctl_version": __version__}
    try:
        text = env.get_template(name).render(full)
    except jinja2.TemplateError as exc:
        where = f"--template-dir {template_dir}" if template_dir else "the packaged templates"
        raise UsageError(
            f"cannot render {name}: {exc}",
            f"check {where}; the README (perfctl report, Templates) lists the template fields",
        ) from exc
    if out == STDOUT:
        sys.stdout.write(text)
        sys.stdout.flush()
        return out
    return write_output(out, text, "the report")  # 0644: a report is meant to be shared


def _environment(template_dir: Path | None) -> Any:
    import jinja2

    loaders: list[jinja2.BaseLoader] = []
    if template_dir is not None:
        if not Path(template_dir).is_dir():
            raise UsageError(
                f"--template-dir {template_dir} is not a directory",
                "pass a directory holding templates to override, e.g. base.html.j2",
            )
        loaders.append(jinja2.FileSystemLoader(str(template_dir)))
    loaders.append(jinja2.FunctionLoader(_packaged_template))
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader(loaders),
        autoescape=_autoescape,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["wbr"] = wbr
    # |tojson escapes < > & ' after this encoder, so JSON in <script> stays inert.
    env.policies["json.dumps_function"] = _dumps
    env.policies["json.dumps_kwargs"] = {}
    return env


def wbr(text: str) -> Any:
    """Escaped text with a line-break opportunity after each ``_ . [ , = /``.

    Regime names are long identifiers (``bytes_roundtrip_512kb[size=4096]``): a
    narrow table column may wrap them only between their parts, never inside one.
    """
    from markupsafe import Markup, escape

    return Markup(re.sub(r"([_.\[,=/])", r"\1<wbr>", str(escape(text))))


def _packaged_template(name: str) -> str | None:
    from importlib.resources import files

    parts = name.split("/")
    if ".." in parts:
        return None
    res = files("perfctl.render.templates").joinpath(*parts)
    return res.read_text(encoding="utf-8") if res.is_file() else None


def _autoescape(name: str | None) -> bool:
    # CSS/JS partials are included inside <style>/<script>, where HTML escaping
    # would corrupt them; they hold no user data. Everything else escapes.
    return not (name or "").endswith((".css", ".js"))


def _dumps(obj: Any, **_: Any) -> str:
    from plotly.io.json import to_json_plotly

    return str(to_json_plotly(obj))


def _plotly_context(mode: str) -> dict[str, Any]:
    from markupsafe import Markup
    from plotly.offline import get_plotlyjs_version

    if mode not in ("inline", "cdn"):
        raise UsageError(f"unknown plotly_js mode `{mode}`", "use 'inline' or 'cdn'")
    cdn = mode == "cdn"
    return {
        "mode": mode,
        "js": "" if cdn else Markup(_plotly_source()),
        "src": f"https://cdn.plot.ly/plotly-{get_plotlyjs_version()}.min.js" if cdn else "",
        "template": charts.template(),
    }


@functools.cache
def _plotly_source() -> str:
    from plotly.offline import get_plotlyjs

    # Defensive: the bundle must never close the <script> it is inlined in.
    return get_plotlyjs().replace("</script", "<\\/script")
