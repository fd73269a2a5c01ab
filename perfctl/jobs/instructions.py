"""`--measure instructions`: where the instructions moved, kept beside the verdict.

While a regime is measured, the first process of each side leaves two callgrind
files (N and 2N loops); :func:`keep_graphs` turns them into that side's per-op
call graph, saved under the side's run (so an interrupted comparison that
resumes still has it). Once the comparison is decided, :func:`link_diffs` writes
each regime's function table and differential flame graphs and links them from
the comparison, as ``compare --profile`` links py-spy's. Layout::

    <reports>/instructions/<regime>/<run-id>/graph.json
    <reports>/instructions/<regime>/<base-run>-vs-<head-run>/diff.svg, diff-reverse.svg, functions.json
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from perfctl.config import Config
from perfctl.measure.interleave import SideData
from perfctl.model import OK, Comparison, RegimeComparison
from perfctl.profile import callgrind
from perfctl.profile import instructions as diffs
from perfctl.profile.records import slug

UNIT = "instructions/op"
# RegimeComparison.artifacts keys of one regime's diff.
KEYS = {
    "flame": "instructions_diff_flamegraph",
    "reverse": "instructions_diff_flamegraph_reverse",
    "functions": "instructions_functions",
}


def _folder(config: Config, regime: str) -> Path:
    return config.reports_dir / "instructions" / slug(regime)


def graph_path(config: Config, run_id: str, regime: str) -> Path:
    """Where one side's per-op call graph of ``regime`` is kept."""
    return _folder(config, regime) / slug(run_id) / "graph.json"


def keep_graphs(
    config: Config,
    runs: Mapping[str, str],
    regime: str,
    ops: int,
    tmp: Path,
    data: Mapping[str, SideData],
) -> None:
    """Save each measured side's per-op call graph (from its first process's two files)."""
    for side, run_id in runs.items():
        d = data[side]
        if not d.ok or not d.order or not d.loops:
            continue
        folder = tmp / f"{side}-{d.order[0]}"
        try:
            small = callgrind.read(folder / "callgrind.n.out")
            big = callgrind.read(folder / "callgrind.2n.out")
        except (OSError, ValueError):
            continue  # the value stands; only the per-function view is missing
        meta = {"regime": regime, "run": run_id, "loops": d.loops, "ops": ops}
        graph = callgrind.loop_graph(small, big, d.loops * ops)
        try:
            callgrind.save(graph, graph_path(config, run_id, regime), meta)
        except OSError:
            continue  # a full disk costs the view, never the measurement (saved next)


def _label(c: Comparison, side: str) -> str:
    ref = c.base if side == "base" else c.head
    return ref.ref if ref.ref and ref.ref != ref.sha else ref.sha[:10]


def _diff(config: Config, c: Comparison, r: RegimeComparison) -> RegimeComparison:
    try:
        before = callgrind.load(graph_path(config, c.base_run, r.name))
        after = callgrind.load(graph_path(config, c.head_run, r.name))
    except (OSError, ValueError, KeyError, TypeError):
        return r  # measured before graphs were kept, or removed since: no view, no error
    folder = _folder(config, r.name) / f"{slug(c.base_run)}-vs-{slug(c.head_run)}"
    meta = {
        "regime": r.name,
        "before_run": c.base_run,
        "after_run": c.head_run,
        "before_label": _label(c, "base"),
        "after_label": _label(c, "head"),
    }
    try:
        diffs.write_diff(before, after, folder, meta)
    except OSError:
        return r  # a full disk costs the view, never the comparison
    found = {KEYS[k]: str(folder / name) for k, name in diffs.FILES.items()}
    return replace(r, artifacts={**r.artifacts, **found})


def link_diffs(config: Config, c: Comparison) -> Comparison:
    """``c`` with every instruction-counted regime's diff written and linked."""
    rows = tuple(
        _diff(config, c, r) if r.unit == UNIT and r.base_status == OK and r.head_status == OK else r
        for r in c.regimes
    )
    return replace(c, regimes=rows)
