"""The blocks perfctl writes between a plan's markers: tracker, baseline, phases, metrics, log.

Every figure comes from the stored comparison a phase uses (see update.py);
every name and string from users goes through the markdown escapes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from perfctl.model import Comparison, SideStats
from perfctl.plan.document import DIGESTS, Block, lines_of
from perfctl.plan.signals import cell as signals_cell
from perfctl.plan.signals import heading
from perfctl.plan.spec import Check, CheckState, PlanSpec, change_text
from perfctl.plan.state import PhaseState, Row
from perfctl.render.escape import escape_plain, md_escape, md_name


def _us(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1e6:.3f}"


# Names, refs and anything read from a stored comparison are user text: each goes
# through render/escape.py (md_name, md_escape), so no name adds HTML, a link or a marker.
def _measured(c: Comparison) -> str:
    return f"measured {md_escape(c.created[:10])} on {md_escape(c.machine.describe())}"


def _source(command: str) -> list[str]:
    # One line, whatever the `source` template holds: a fence cannot be closed from inside.
    return ["Source run:", "", "```bash", escape_plain(command, 1000), "```", ""]


def tracker_lines(states: Sequence[PhaseState]) -> list[str]:
    """The Phase Tracker table."""
    out = ["| Phase | Name | Status | Primary Regimes Impacted |", "| --- | --- | --- | --- |"]
    for s in states:
        regimes = ", ".join(md_name(r) for r in s.phase.primary()) or "—"
        out.append(f"| {s.phase.id} | {md_escape(s.phase.name)} | {s.status} | {regimes} |")
    return out


def _baseline_names(c: Comparison) -> set[str]:
    return {rc.baseline for rc in c.regimes if rc.baseline}


def _direct(c: Comparison, name: str | None, side: SideStats) -> float | None:
    own = next((rc for rc in c.regimes if rc.name == name and rc.base), None)
    if own is not None and own.base is not None:
        return own.base.median_s
    return side.median_s / side.baseline_ratio if side.baseline_ratio else None


def baseline_lines(spec: PlanSpec, state: PhaseState | None) -> list[str]:
    """The Baseline Performance Snapshot: direct, system and slowdown per regime."""
    if state is None or state.comparison is None:
        note = state.note if state is not None else "no baseline phase"
        return [f"_Not measured yet: {note}._"]
    c = state.comparison
    out = [
        *_source(spec.command(state.phase)),
        f"Median us/op at {md_name(state.phase.before)} ({md_escape(c.base.short)}), "
        f"{_measured(c)}:",
        "",
        *_provenance(c),
        "| Regime | Direct (us/op) | System (us/op) | Slowdown |",
        "| --- | ---: | ---: | ---: |",
    ]
    skip = _baseline_names(c)
    for rc in c.regimes:
        if rc.name in skip:
            continue
        side = rc.base
        direct = _direct(c, rc.baseline, side) if side is not None else None
        ratio = f"{side.baseline_ratio:.2f}x" if side and side.baseline_ratio else "—"
        system = _us(side.median_s) if side else md_escape(rc.verdict or "—")
        out.append(f"| {md_name(rc.name)} | {_us(direct)} | {system} | {ratio} |")
    return out


def _row(r: Row, signals: Sequence[Comparison] = ()) -> str:
    rc = r.rc
    base = rc.base.median_s if rc and rc.base else None
    head = rc.head.median_s if rc and rc.head else None
    change = change_text(rc.change) if rc and rc.change is not None else "—"
    target = "; ".join(c.cell() for c in r.checks) or "—"
    verdict = md_escape(rc.verdict or "—") if rc else "not measured"
    beside = "".join(f" {signals_cell(c, r.name)} |" for c in signals)
    return (
        f"| {md_name(r.name)} | {_us(base)} | {_us(head)} | {change} | {target} | {verdict} |"
        + beside
    )


def result_table(state: PhaseState) -> list[str]:
    """The before/after table of one phase (its digest decides the update log).

    Counter comparisons of the same commits add a column each, after the verdict.
    """
    extra = "".join(f" {heading(c)} |" for c in state.signals)
    out = [
        "| Regime | Before | After | Change | Target | Verdict |" + extra,
        "| --- | ---: | ---: | ---: | --- | --- |" + " ---: |" * len(state.signals),
    ]
    return out + [_row(r, state.signals) for r in state.rows]


def _tally(state: PhaseState) -> str:
    targets = [c for r in state.rows for c in r.checks if not c.guard]
    guards = [c for r in state.rows for c in r.checks if c.guard]
    parts = [_count("targets met", targets), _count("guards held", guards)]
    return (
        "; ".join(p for p in parts if p) or "no targets or guards configured"
    ).capitalize() + "."


def _count(what: str, checks: Sequence[Check]) -> str:
    # Unverified and unmeasured checks are counted apart: neither met nor missed.
    if not checks:
        return ""
    n = {state: sum(c.state == state for c in checks) for state in CheckState}
    apart = [f"{n[s]} {s}" for s in (CheckState.UNVERIFIED, CheckState.NOT_MEASURED) if n[s]]
    extra = f" ({', '.join(apart)})" if apart else ""
    return f"{what}: {n[CheckState.MET]} of {len(checks)}{extra}"


def phase_lines(spec: PlanSpec, state: PhaseState) -> list[str]:
    """The Result Snapshot of one phase."""
    c = state.comparison
    if c is None:
        head = [f"_{state.status}: {state.note}._", ""]
    else:
        p = state.phase
        head = [
            *_source(spec.command(p)),
            f"Median us/op, {md_name(p.before)} ({md_escape(c.base.short)}) → "
            f"{md_name(p.after)} ({md_escape(c.head.short)}), {_measured(c)}:",
            "",
            *_provenance(c),
        ]
    return [*head, *result_table(state), "", _tally(state), *_crossover_lines(c)]


def _crossover_lines(c: Comparison | None) -> list[str]:
    """Computed crossovers and trade-off lines of the phase's head side (seed 001, 004)."""
    if c is None:
        return []
    from perfctl.render.escape import md_escape
    from perfctl.render.notes import comparison_crossovers

    lines = [f"- Crossover: {md_escape(x.sentence(), 1000)}" for x in comparison_crossovers(c)]
    return ["", *lines] if lines else []


def _provenance(c: Comparison) -> list[str]:
    """The comparison's own warnings (busy machine, runs measured apart), where its
    workers ran when pinned, and its source."""
    from perfctl.render.escape import md_escape
    from perfctl.render.notes import placement_notes

    lines = [f"> Warning: {md_escape(w, 1000)}" for w in c.warnings]
    lines += [f"> {note}" for note in placement_notes(c)]
    if c.recomputed_from:
        lines.append(f"> Recomputed from stored comparison {md_escape(c.recomputed_from)}.")
    return [*lines, ""] if lines else []


def _metric_names(states: Sequence[PhaseState]) -> list[str]:
    names: dict[str, None] = {}
    for s in states:
        for r in s.rows:
            if any(not c.guard for c in r.checks):
                names.setdefault(r.name)
    return list(names)


def _value(states: Sequence[PhaseState], name: str, side: str) -> float | None:
    for s in states:
        row = next((r for r in s.rows if r.name == name and r.rc is not None), None)
        stats = getattr(row.rc, side) if row is not None else None
        if stats is not None:
            return float(stats.median_s)
    return None


def metrics_lines(states: Sequence[PhaseState], baseline: PhaseState | None) -> list[str]:
    """Success metrics: baseline, current and each phase's target per regime."""
    names = _metric_names(states)
    if not names:
        return ["_No targets configured._"]
    targeted = [s for s in states if any(not c.guard for r in s.rows for c in r.checks)]
    out = [
        "| Metric | Baseline (us/op) | Current (us/op) | "
        + " | ".join(f"Phase {s.phase.id}" for s in targeted)
        + " |",
        "| --- | ---: | ---: | " + " | ".join("---" for _ in targeted) + " |",
    ]
    measured = [s for s in states if s.comparison is not None]
    for name in names:
        base = _value([baseline] if baseline else [], name, "base")
        current = _value(list(reversed(measured)), name, "head")
        cells = []
        for s in targeted:
            checks = [c for r in s.rows if r.name == name for c in r.checks if not c.guard]
            cells.append("; ".join(c.cell() for c in checks) or "—")
        out.append(
            f"| {md_name(name)} | {_us(base)} | {_us(current)} | " + " | ".join(cells) + " |"
        )
    return out


def digest(state: PhaseState) -> str:
    """A short hash of a phase's result table."""
    return hashlib.sha256("\n".join(result_table(state)).encode()).hexdigest()[:12]


def _old_log(block: Block | None) -> tuple[dict[str, str], list[str]]:
    if block is None:
        return {}, []
    digests: dict[str, str] = {}
    entries = []
    for line in lines_of(block.inner):
        body = line.rstrip("\r\n")
        if m := DIGESTS.match(body.strip()):
            digests = dict(p.split("=", 1) for p in m.group(1).split() if "=" in p)
        elif body.startswith("- "):
            entries.append(body)
    return digests, entries


def _summary(state: PhaseState) -> str:
    parts = [
        f"{md_name(r.name)} {r.rc.change * 100:+.1f}%"
        for r in state.rows
        if r.primary and r.rc is not None and r.rc.change is not None
    ]
    more = f", +{len(parts) - 3} more" if len(parts) > 3 else ""
    return ", ".join(parts[:3]) + more or "no change measured"


def log_lines(block: Block | None, states: Sequence[PhaseState]) -> list[str]:
    """The update log: old entries plus one per phase whose results changed."""
    digests, entries = _old_log(block)
    for s in states:
        if s.comparison is None:
            continue  # keep the old digest: no data is not a change
        new = digest(s)
        if digests.get(s.phase.id) != new:
            verb = "changed" if s.phase.id in digests else "recorded"
            entries.append(
                f"- {md_escape(s.comparison.created[:10])}: phase {s.phase.id} results {verb} "
                f"({_summary(s)})"
            )
            digests[s.phase.id] = new
    hidden = "".join(f" {k}={v}" for k, v in digests.items())
    return [f"<!-- perfctl:results{hidden} -->", *(entries or ["_No results recorded yet._"])]
