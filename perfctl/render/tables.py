"""Terminal, markdown and JSON rendering of runs and comparisons.

``format_*`` functions return strings or rich renderables; printing is the
CLI's job. Times are seconds per operation in the model and are shown in the
unit that keeps 3-4 significant digits (ns/µs/ms/s per op).
"""

from __future__ import annotations

import json
from typing import Any

from perfctl.model import (
    FAILED,
    IMPROVED,
    INCONCLUSIVE,
    REGRESSED,
    SKIPPED,
    WITHIN_NOISE,
    Comparison,
    RegimeComparison,
    RegimeResult,
    Run,
    to_dict,
)
from perfctl.render.escape import CELL_MAX, escape_plain, md_escape, rich_escape

__all__ = ["CELL_MAX", "escape_plain", "md_escape"]  # re-exported: older imports keep working

VERDICT_STYLE = {
    REGRESSED: "bold red",
    IMPROVED: "bold green",
    FAILED: "red",
    INCONCLUSIVE: "yellow",
    WITHIN_NOISE: "cyan",
    SKIPPED: "dim",
}


def esc(text: object) -> str:
    """Escape user text for rich markup (regime names contain ``[...]``), terminal-safe."""
    return rich_escape(text)


def fmt_time(seconds: float | None) -> str:
    """``1.234e-6`` -> ``1.23 µs``."""
    if seconds is None:
        return "—"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if abs(seconds) >= scale or unit == "ns":
            value = seconds / scale
            return f"{value:.3g} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return f"{seconds:.3g} s"


def fmt_value(value: float | None, unit: str = "s") -> str:
    """Seconds per op as :func:`fmt_time`; a counter with its unit (``12,345 instructions/op``)."""
    if unit == "s" or value is None:
        return fmt_time(value)
    shown = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.4g}"
    return f"{shown} {unit}"


def fmt_pct(x: float | None, signed: bool = True) -> str:
    """``0.051`` -> ``+5.1%``."""
    if x is None:
        return "—"
    return f"{x * 100:+.1f}%" if signed else f"{x * 100:.1f}%"


def fmt_ratio(x: float | None) -> str:
    """``12.345`` -> ``12.35x``."""
    return "—" if x is None else f"{x:.2f}x"


# -- runs -------------------------------------------------------------------
def result_stats(r: RegimeResult) -> dict[str, Any]:
    """Median per op, IQR, ops/s and CV of one regime result, as a comparison states them.

    The numbers come from :func:`perfctl.stats.decision.summarize`, the function
    that builds a comparison's per-side summaries: the process is the unit, so
    the CV is that of the process means, never of the pooled values.
    """
    if not any(r.processes):
        return {"median_s": None, "q1_s": None, "q3_s": None, "ops_per_s": None, "cv": None}
    from perfctl.stats.decision import summarize

    s = summarize(r.processes)
    return {
        "median_s": s.median_s,
        "q1_s": s.q1_s,
        "q3_s": s.q3_s,
        "ops_per_s": 1 / s.median_s if s.median_s else None,
        "cv": s.cv,
    }


def run_rows(run: Run) -> list[dict[str, Any]]:
    """One dict per regime: stats plus vs-baseline ratio and a stability warning."""
    from perfctl.stats.band import DEFAULT_BAND, band_of, scaled
    from perfctl.stats.decision import MAX_CV

    stats = {r.name: result_stats(r) for r in run.results}
    rows = []
    for r in sorted(run.results, key=lambda x: (x.family, x.name)):
        s = stats[r.name]
        base = stats.get(r.baseline or "", {}).get("median_s")
        ratio = s["median_s"] / base if s["median_s"] and base else None
        warn = ""
        # What decide() calls too noisy, on the regime's own band where it declares one.
        limit = scaled(MAX_CV, band_of(r.threshold, DEFAULT_BAND)) if r.unit == "s" else MAX_CV
        if s["cv"] is not None and s["cv"] > limit:
            warn = f"unstable: CV {s['cv'] * 100:.0f}%"
        rows.append(
            {
                "regime": r.name,
                "family": r.family,
                "status": r.status,
                **s,
                "baseline": r.baseline,
                "vs_baseline": ratio,
                "warning": warn,
                "reason": r.reason,
                "metrics": r.metrics,
                "unit": r.unit,
                "processes": len(r.processes),
                "values": len(r.values),
            }
        )
    return rows


def format_run_table(run: Run) -> Any:
    """A rich Table of a run's results."""
    from rich.table import Table

    table = Table(
        title=esc(f"perfctl run {run.id} · {run.ref.ref} {run.ref.short}"), title_justify="left"
    )
    for col, just in (
        ("Regime", "left"),
        (_value_header(run), "right"),
        ("IQR", "right"),
        ("ops/s", "right"),
        ("vs baseline", "right"),
        ("Notes", "left"),
    ):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for row in run_rows(run):
        if row["status"] != "ok":
            style = "red" if row["status"] == FAILED else "dim"
            table.add_row(
                esc(row["regime"]), row["status"], "", "", "", esc(row["reason"]), style=style
            )
            continue
        unit = row["unit"]
        q1, q3 = (fmt_value(row[k], unit).removesuffix(f" {unit}") for k in ("q1_s", "q3_s"))
        iqr = f"{q1} – {q3}"
        ops = f"{row['ops_per_s']:,.0f}" if row["ops_per_s"] and unit == "s" else "—"
        shown = ", ".join(f"{k}={v:.4g}" for k, v in row["metrics"].items())
        note = "; ".join(x for x in (row["warning"], shown) if x)
        table.add_row(
            esc(row["regime"]),
            fmt_value(row["median_s"], unit),
            iqr,
            ops,
            fmt_ratio(row["vs_baseline"]),
            esc(note),
            style="yellow" if row["warning"] else None,
        )
    return table


def _value_header(run: Run) -> str:
    """``Time/op``, or the counter's unit when the run measured one (``Instructions/op``)."""
    units = {r.unit for r in run.results if r.unit != "s"}
    return next(iter(units)).capitalize() if len(units) == 1 else "Time/op"


def format_run_json(run: Run) -> str:
    """The run record plus computed rows, as JSON."""
    return json.dumps({"run": to_dict(run), "rows": run_rows(run)}, indent=2)


# -- comparisons --------------------------------------------------------------
def change_cell(r: RegimeComparison) -> str:
    """``+5.1% [+3.2%, +7.0%]`` or an empty dash."""
    if r.change is None:
        return "—"
    if r.ci_low is None or r.ci_high is None:
        return fmt_pct(r.change)
    return f"{fmt_pct(r.change)} [{fmt_pct(r.ci_low)}, {fmt_pct(r.ci_high)}]"


def side_cell(r: RegimeComparison, side: str) -> str:
    """Time/op of one side, or its status when it did not produce values."""
    stats = r.base if side == "base" else r.head
    status = r.base_status if side == "base" else r.head_status
    if status != "ok" or stats is None:
        return status
    return fmt_value(stats.median_s, r.unit)


CORRECTION_NAMES = {"benjamini-hochberg": "Benjamini–Hochberg"}


def correction_name(correction: str) -> str:
    """How a stored correction id (``benjamini-hochberg``) reads in prose."""
    return CORRECTION_NAMES.get(correction, correction)


def verdict_text(r: RegimeComparison) -> str:
    """The verdict, with its reason for inconclusive, failed and skipped rows."""
    shown = r.reason and r.verdict in (INCONCLUSIVE, FAILED, SKIPPED)
    return r.verdict + (f" ({r.reason})" if shown else "")


def counts_line(c: Comparison) -> str:
    """``2 regressed · 1 improved · ...`` for every verdict that occurs."""
    return " · ".join(f"{n} {v}" for v, n in c.counts().items() if n)


def format_compare_table(c: Comparison) -> Any:
    """A rich Table of a comparison, regressions first, coloured by verdict."""
    from rich.table import Table

    table = Table(
        title=esc(
            f"{c.base.ref} ({c.base.short}) → {c.head.ref} ({c.head.short})   {counts_line(c)}"
        ),
        title_justify="left",
    )
    for col, just in (
        ("Regime", "left"),
        ("Base", "right"),
        ("Head", "right"),
        ("Change [95% CI]", "right"),
        ("p (adj.)", "right"),
        ("Verdict", "left"),
        ("Slowdown b/h", "right"),
    ):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in c.sorted_regimes():
        ratio = ""
        if r.base and r.head and (r.base.baseline_ratio or r.head.baseline_ratio):
            ratio = f"{fmt_ratio(r.base.baseline_ratio)} / {fmt_ratio(r.head.baseline_ratio)}"
        table.add_row(
            esc(r.name),
            esc(side_cell(r, "base")),
            esc(side_cell(r, "head")),
            change_cell(r),
            "—" if r.p_adjusted is None else f"{r.p_adjusted:.2g}",
            esc(verdict_text(r)),
            ratio,
            style=VERDICT_STYLE.get(r.verdict),
        )
    return table


def regime_metric_rows(r: RegimeComparison) -> list[dict[str, Any]]:
    """One row per metric the regime reported (p99, RSS, bandwidth…): base, head, change."""
    rows = []
    for name in dict.fromkeys([*r.metrics_base, *r.metrics_head]):
        b, h = r.metrics_base.get(name), r.metrics_head.get(name)
        change = h / b - 1 if b and h is not None else None
        rows.append({"regime": r.name, "metric": name, "base": b, "head": h, "change": change})
    return rows


def metric_rows(c: Comparison) -> list[dict[str, Any]]:
    """:func:`regime_metric_rows` of every regime, regressions first."""
    return [m for r in c.sorted_regimes() for m in regime_metric_rows(r)]


def fmt_metric(value: float | None) -> str:
    """A regime-reported metric: four significant digits (its unit is in its name)."""
    return "—" if value is None else f"{value:,.4g}"


def format_metrics_table(c: Comparison) -> Any:
    """A rich Table of the regimes' own metrics, or None when no regime reported any."""
    from rich.table import Table

    rows = metric_rows(c)
    if not rows:
        return None
    table = Table(
        title="Metrics reported by the regimes (median over processes)", title_justify="left"
    )
    for col, just in (("Regime", "left"), ("Metric", "left"), ("Base", "right"),
                      ("Head", "right"), ("Change", "right")):  # fmt: skip
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for m in rows:
        table.add_row(
            esc(m["regime"]),
            esc(m["metric"]),
            fmt_metric(m["base"]),
            fmt_metric(m["head"]),
            fmt_pct(m["change"]),
        )
    return table


def verdict_test(c: Comparison) -> str:
    """The test the comparison's verdicts rest on, in words."""
    if c.settings.get("measure", "time") != "time":
        return f"Welch's t on per-process {c.settings['measure']} counts"
    ways = {r.pairing for r in c.regimes if r.pairing} or {str(c.settings.get("pairing"))}
    if ways == {"same-process"}:
        return "Wilcoxon signed-rank on per-process ratios (same-process pairing)"
    if "same-process" in ways:
        return (
            "Wilcoxon signed-rank on per-process ratios where both refs shared each worker "
            "process (same-process pairing), Mann–Whitney U on per-process means elsewhere"
        )
    return "Mann–Whitney U on per-process means"


def _estimator(c: Comparison) -> str:
    counted = c.settings.get("measure", "time") != "time"
    return "relative change of the means" if counted else "Hodges–Lehmann change"


def format_compare_markdown(c: Comparison) -> str:
    """The seeds' layout: | Regime | Before | After | Change | plus the verdict."""
    lines = [
        f"**{md_escape(c.base.ref)}** ({md_escape(c.base.short)}) → "
        f"**{md_escape(c.head.ref)}** ({md_escape(c.head.short)}): {md_escape(counts_line(c))}",
        "",
        "| Regime | Before | After | Change | Verdict |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for r in c.sorted_regimes():
        lines.append(
            f"| {md_escape(r.name)} | {md_escape(side_cell(r, 'base'))} | "
            f"{md_escape(side_cell(r, 'head'))} | {change_cell(r)} | {md_escape(verdict_text(r))} |"
        )
    lines += [
        "",
        f"_Verdicts: {verdict_test(c)}, {md_escape(correction_name(c.correction))} "
        f"corrected (α = {c.alpha}), {_estimator(c)} with 95% CI, noise band ±"
        f"{c.threshold * 100:g}%._",
    ]
    metrics = metric_rows(c)
    if metrics:
        lines += [
            "",
            "| Regime | Metric | Before | After | Change |",
            "| --- | --- | ---: | ---: | ---: |",
        ]
        for m in metrics:
            lines.append(
                f"| {md_escape(m['regime'])} | {md_escape(m['metric'])} | "
                f"{fmt_metric(m['base'])} | {fmt_metric(m['head'])} | {fmt_pct(m['change'])} |"
            )
    from perfctl.render.notes import comparison_notes

    lines += [f"\n{md_escape(n)}" for n in comparison_notes(c)]
    for w in c.warnings:
        lines.append(f"\n> Warning: {md_escape(w)}")
    if c.recomputed_from:
        lines.append(f"\n_Recomputed from stored comparison {md_escape(c.recomputed_from)}._")
    return "\n".join(lines) + "\n"


def format_compare_json(c: Comparison) -> str:
    """The stored comparison record as JSON (stdout only)."""
    return json.dumps(to_dict(c), indent=2)
