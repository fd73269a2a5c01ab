"""Several signals of one pair of refs side by side: terminal table, markdown, JSON.

The cells are the stored verdicts and changes of each signal's own comparison
(:mod:`perfctl.stats.signals` lines them up); nothing is computed here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from perfctl.model import FAILED, REGRESSED, Comparison, to_dict
from perfctl.render.tables import VERDICT_STYLE, esc, fmt_pct, md_escape
from perfctl.stats.signals import FLAGS, SignalCell, SignalRow, measure_of, notes, side_by_side

SCHEMA = 1
KIND = "perfctl-signals"


def _cell_text(cell: SignalCell | None) -> str:
    if cell is None:
        return "—"
    change = f"{fmt_pct(cell.change)} " if cell.change is not None else ""
    return f"{change}{cell.verdict}"


def signals_table(comparisons: Sequence[Comparison]) -> Any:
    """A rich Table: one row per regime, one verdict column per signal."""
    from rich.table import Table

    first = comparisons[0]
    table = Table(
        title=esc(
            f"{first.base.ref} ({first.base.short}) → {first.head.ref} ({first.head.short})"
            "   signals side by side"
        )
    )
    table.add_column("Regime", overflow="fold")
    for c in comparisons:
        table.add_column(esc(f"{measure_of(c)} (±{c.threshold * 100:g}%)"), justify="right")
    for row in side_by_side(comparisons):
        table.add_row(
            esc(row.name),
            *(
                f"[{style}]{esc(_cell_text(cell))}[/]"
                if cell is not None and (style := VERDICT_STYLE.get(cell.verdict))
                else esc(_cell_text(cell))
                for cell in row.cells
            ),
        )
    return table


def signals_markdown(
    comparisons: Sequence[Comparison], *, changed_only: bool = False, limit: int | None = None
) -> str:
    """The side-by-side table in markdown, then which signals flag what.

    ``changed_only``: only regimes some signal flags (improved, regressed) or failed,
    with a line counting the rest; ``limit``: at most that many rows (the PR comment's
    size budget), with a line saying how many were left out.
    """
    first = comparisons[0]
    heads = [md_escape(f"{measure_of(c)} (±{c.threshold * 100:g}%)") for c in comparisons]
    every = side_by_side(comparisons)
    rows = [r for r in every if _changed(r)] if changed_only else list(every)
    shown = rows if limit is None else rows[:limit]
    lines = [
        f"**{md_escape(first.base.ref)}** ({md_escape(first.base.short)}) → "
        f"**{md_escape(first.head.ref)}** ({md_escape(first.head.short)}): signals side by side",
        "",
        "| Regime | " + " | ".join(heads) + " |",
        "|---" + "|---:" * len(heads) + "|",
    ]
    lines += [
        f"| {md_escape(r.name)} | " + " | ".join(md_escape(_cell_text(c)) for c in r.cells) + " |"
        for r in shown
    ]
    if len(shown) < len(rows):
        lines.append(f"\n_{len(rows) - len(shown)} more rows omitted; see each signal below._")
    if len(rows) < len(every):
        lines.append(f"\n_{len(every) - len(rows)} regimes changed in no signal._")
    lines += [f"\n{md_escape(n)}" for n in notes(every)[: limit if limit is not None else None]]
    return "\n".join(lines) + "\n"


def _changed(row: SignalRow) -> bool:
    return any(c is not None and c.verdict in (*FLAGS, FAILED) for c in row.cells)


def _row_dict(row: SignalRow) -> dict[str, Any]:
    return {
        "regime": row.name,
        "verdicts": {c.measure: c.verdict for c in row.cells if c is not None},
        "changes": {c.measure: c.change for c in row.cells if c is not None},
        "flagged_by": [c.measure for c in row.flagged],
        "note": row.note(),
    }


def signals_json(comparisons: Sequence[Comparison]) -> str:
    """``{"schema", "kind", "signals", "regimes": [...], "comparisons": [stored records]}``."""
    body = {
        "schema": SCHEMA,
        "kind": KIND,
        "signals": [measure_of(c) for c in comparisons],
        "regimes": [_row_dict(r) for r in side_by_side(comparisons)],
        "comparisons": [to_dict(c) for c in comparisons],
    }
    return json.dumps(body, indent=2)


def signals_comment(comparisons: Sequence[Comparison], opts: Any) -> str:
    """A PR comment of several signals: the side-by-side table, then each signal's own
    comment folded under its name (one marker, at the top; cut down to fit the budget)."""
    from dataclasses import replace

    from perfctl.render.comment import github_length

    share = replace(opts, budget=max(opts.budget // (len(comparisons) + 1), 2000))
    body = _signals_body(comparisons, opts, share, None)
    if github_length(body) <= opts.budget:
        return body
    lo, hi = 0, len(side_by_side(comparisons))  # the most table rows that still fit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        fits = github_length(_signals_body(comparisons, opts, share, mid)) <= opts.budget
        lo, hi = (mid, hi) if fits else (lo, mid - 1)
    return _signals_body(comparisons, opts, share, lo)


def _signals_body(
    comparisons: Sequence[Comparison], opts: Any, share: Any, limit: int | None
) -> str:
    from perfctl.render.comment import headline, marker, render_comment

    flagged = [c for c in comparisons if any(r.verdict in (REGRESSED, FAILED) for r in c.regimes)]
    top = flagged[0] if flagged else comparisons[0]
    lines = [marker(opts.marker_id), f"### {headline(top)} ({md_escape(measure_of(top))})", ""]
    lines += [signals_markdown(comparisons, changed_only=True, limit=limit), ""]
    for c in comparisons:
        body = render_comment(c, share).split("\n", 1)[1]  # its own marker dropped
        lines += [
            f"<details><summary>{md_escape(measure_of(c))}: {md_escape(headline(c))}</summary>",
            "",
            body,
            "</details>",
            "",
        ]
    return "\n".join(lines)
