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
    # The column heading names the comparison's band; a row judged on its own says so.
    own = f" (own band ±{cell.band * 100:g}%)" if cell.band is not None else ""
    return f"{change}{cell.verdict}{own}"


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
    comparisons: Sequence[Comparison],
    *,
    changed_only: bool = False,
    limit: int | None = None,
    rows: Sequence[SignalRow] | None = None,
) -> str:
    """The side-by-side table in markdown, then which signals flag what.

    ``changed_only``: only regimes some signal flags (improved, regressed) or failed,
    with a line counting the rest; ``limit``: at most that many rows (the PR comment's
    size budget), with a line saying how many were left out; ``rows``: the lined-up
    rows when the caller has them already.
    """
    first = comparisons[0]
    heads = [md_escape(f"{measure_of(c)} (±{c.threshold * 100:g}%)") for c in comparisons]
    every = list(rows) if rows is not None else list(side_by_side(comparisons))
    kept = [r for r in every if _changed(r)] if changed_only else every
    shown = kept if limit is None else kept[:limit]
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
    if len(shown) < len(kept):
        lines.append(
            f"\n_{_count(len(kept) - len(shown), 'more row')} omitted; see each signal below._"
        )
    if len(kept) < len(every):
        lines.append(f"\n_{_count(len(every) - len(kept), 'regime')} changed in no signal._")
    said = notes(shown)
    lines += [f"\n{md_escape(n)}" for n in said]
    return "\n".join(lines) + "\n"


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _changed(row: SignalRow) -> bool:
    return any(c is not None and c.verdict in (*FLAGS, FAILED) for c in row.cells)


def _row_dict(row: SignalRow) -> dict[str, Any]:
    return {
        "regime": row.name,
        "verdicts": {c.measure: c.verdict for c in row.cells if c is not None},
        "changes": {c.measure: c.change for c in row.cells if c is not None},
        "own_bands": {c.measure: c.band for c in row.cells if c is not None and c.band is not None},
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
    comment folded under its name (one marker, at the top), cut down to fit the budget:
    fewer table rows first, then each signal's comment down to its headline, then lines."""
    from dataclasses import replace

    from perfctl.render.comment import fit, github_length, headline, render_comment

    share = replace(opts, budget=max(opts.budget // (len(comparisons) + 1), 2000))
    rows = side_by_side(comparisons)  # once: the search below renders many bodies
    folded = [render_comment(c, share).split("\n", 1)[1] for c in comparisons]  # no marker

    def body(limit: int | None, parts: list[str]) -> str:
        return _signals_body(comparisons, opts, rows, limit, parts)

    whole = body(None, folded)
    if github_length(whole) <= opts.budget:
        return whole
    lo, hi = 0, len(rows)  # the most table rows that still fit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if github_length(body(mid, folded)) <= opts.budget else (lo, mid - 1)
    cut = body(lo, folded)
    if github_length(cut) > opts.budget:  # hostile or huge input: headlines only, then lines
        cut = body(lo, [f"_{md_escape(headline(c))}: see the report._\n" for c in comparisons])
    return fit(cut, opts.budget)


def _signals_body(
    comparisons: Sequence[Comparison],
    opts: Any,
    rows: Sequence[SignalRow],
    limit: int | None,
    folded: Sequence[str],
) -> str:
    from perfctl.render.comment import headline, marker

    flagged = [c for c in comparisons if any(r.verdict in (REGRESSED, FAILED) for r in c.regimes)]
    top = flagged[0] if flagged else comparisons[0]
    lines = [marker(opts.marker_id), f"### {headline(top)} ({md_escape(measure_of(top))})", ""]
    lines += [signals_markdown(comparisons, changed_only=True, limit=limit, rows=rows), ""]
    for c, part in zip(comparisons, folded, strict=True):
        lines += [
            f"<details><summary>{md_escape(measure_of(c))}: {md_escape(headline(c))}</summary>",
            "",
            part,
            "</details>",
            "",
        ]
    return "\n".join(lines)
