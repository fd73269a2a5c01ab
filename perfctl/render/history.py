"""The history report's data: one trend series per regime over the stored runs of a machine."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from perfctl.errors import StoreError
from perfctl.model import OK, ON_CPU_CLOCKS, Run
from perfctl.render import charts
from perfctl.render.charts import TrendPoint, format_change, format_per_op, label
from perfctl.render.html import IdMaker, add_chart, sortable
from perfctl.render.notes import pinned_to
from perfctl.stats.summary import Interval, median_interval


def history_context(runs: list[Run], machine_id: str | None) -> dict[str, Any]:
    """Everything the history template needs: one trend chart per regime."""
    chosen, machines = _pick_machine(runs, machine_id)
    mine = sorted(
        (r for r in runs if r.machine.id == chosen),
        key=lambda r: (commit_time(r) or "", r.started),
    )
    dates = all(commit_time(r) for r in mine)
    figures: dict[str, Any] = {}
    ids = IdMaker()
    families: dict[str, list[dict[str, str]]] = defaultdict(list)
    series = trend_series(mine, dates)
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
        "placed": {r.id: pinned_to(r.settings) for r in mine},
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


def _trend_row(s: TrendSeries) -> dict[str, Any]:
    first, latest = s.points[0].median_s, s.points[-1].median_s
    change = latest / first - 1 if first > 0 else None
    return {
        "name": s.name,
        "family": s.family,
        "runs": len(s.points),
        "first": format_per_op(first),
        "latest": format_per_op(latest),
        "latest_sort": sortable(latest),
        "change": format_change(change),
        "change_sort": sortable(change),
        "changes": sum(p.change for p in s.points),
    }


@dataclass(frozen=True)
class TrendSeries:
    """The history of one regime: one point per stored run that measured it."""

    name: str
    family: str
    points: tuple[TrendPoint, ...]


def commit_time(run: Run) -> str | None:
    """The run's commit date (else its start time) as a UTC plotly date, or None."""
    for raw in (run.ref.date, run.started):
        try:
            when = datetime.fromisoformat(raw)
        except (TypeError, ValueError):
            continue
        if when.tzinfo is not None:
            # Plotly's date axis ignores offsets, so normalise to UTC.
            when = when.astimezone(UTC).replace(tzinfo=None)
        return when.strftime("%Y-%m-%d %H:%M:%S")
    return None


def change_flags(medians: Sequence[float]) -> list[bool]:
    """Which points start a change: :func:`perfctl.stats.history.change_points`, the one rule."""
    from perfctl.stats.history import change_points

    flags = [False] * len(medians)
    try:
        found = change_points(list(medians))
    except ValueError:  # a zero or non-finite median: no level can be told apart
        return flags
    for i in found:
        flags[i] = True
    return flags


def trend_series(runs: Sequence[Run], dates: bool) -> list[TrendSeries]:
    """One time series per regime over ``runs`` (already in commit order), changes marked.

    Counter results (``--measure instructions|memory``) are left out: a count on a
    time axis would read as a huge slowdown, and a change point between the two kinds
    would be invented. So are values on compare's ``--clock cpu|busy``: on a busy
    machine they read lower than wall time, and the same invented step would follow.
    """
    found: dict[str, list[tuple[int, int, Interval]]] = {}
    families: dict[str, str] = {}
    for i, run in enumerate(runs):
        for res in run.results:
            if res.unit != "s" or res.clock in ON_CPU_CLOCKS:  # not wall (or device) time
                continue
            summary = median_interval(res.processes) if res.status == OK else None
            if summary is not None:
                found.setdefault(res.name, []).append((i, len(res.processes), summary))
                families.setdefault(res.name, res.family or res.name)
    # What every point of a run shares, computed once per run, not per regime.
    xs = [(commit_time(r) if dates else None) or f"{i + 1}: {r.ref.sha[:7]}"
          for i, r in enumerate(runs)]  # fmt: skip
    heads = [_run_hover(r) for r in runs]
    out = []
    for name in sorted(found, key=lambda k: (families[k], k)):
        rows = found[name]
        flags = change_flags([s.median for _, _, s in rows])
        points = tuple(
            _trend_point(xs[i], heads[i], n, s, flag)
            for (i, n, s), flag in zip(rows, flags, strict=True)
        )
        out.append(TrendSeries(name, families[name], points))
    return out


def _run_hover(run: Run) -> str:
    placed = pinned_to(run.settings)
    return (
        f"<b>{run.ref.sha[:10]}</b> {label(run.ref.subject)}"
        f"<br>{label(run.ref.ref)} · {label(run.ref.date or run.started)} · run {label(run.id)}"
        + (f"<br>workers pinned to {placed}" if placed else "")
    )


def _trend_point(x: str, head: str, processes: int, s: Interval, change: bool) -> TrendPoint:
    median, lo, hi = s.median, s.low, s.high
    hover = (
        f"{head}<br>median {format_per_op(median)} "
        f"({s.method} {format_per_op(lo)} – {format_per_op(hi)}), {processes} processes"
        + ("<br><b>change detected</b>" if change else "")
    )
    return TrendPoint(x, median, lo, hi, hover, change)
