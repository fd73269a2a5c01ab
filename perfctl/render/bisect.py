"""A bisection record as terminal text, markdown or JSON (figures read from the record)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from perfctl.model import Verdict, to_dict
from perfctl.render.escape import escape_plain, md_escape
from perfctl.render.tables import esc, fmt_pct
from perfctl.stats.bisection import Bisection, Likeness, Outcome, ProfileLink, Step, StepKind

# What the rows are: GOOD vs BAD first, each step vs GOOD, the check vs the parent;
# how a step was judged depends on the rule the record was made with (its "judge").
_JUDGED = {
    "odds": "its CI below / above half the slowdown, or its figure 99:1 likelier near "
    "that end than the other (19:1 on a second look)",
    "halfway": "its CI below / above half the slowdown",
}


def legend(b: Bisection) -> str:
    """What the steps table's rows are, and the rule its steps were judged by."""
    judged = _JUDGED.get(str(b.settings.get("judge") or "halfway"), _JUDGED["halfway"])
    return (
        f"ends: BAD vs GOOD; 1, 2, …: each commit vs GOOD (like good / like bad: {judged}); "
        "verify: the culprit vs its parent."
    )


COLUMNS = ("#", "Commit", "Subject", "Change vs good [95% CI]", "Verdict", "Rounds", "Time")


def change_text(step: Step | None) -> str:
    """``+5.1% [+3.2%, +7.0%]``, or a dash when nothing was measured."""
    if step is None or step.change is None:
        return "—"
    if step.ci_low is None or step.ci_high is None:
        return fmt_pct(step.change)
    return f"{fmt_pct(step.change)} [{fmt_pct(step.ci_low)}, {fmt_pct(step.ci_high)}]"


def _verdict(step: Step) -> str:
    """The likeness; why a commit was skipped is listed under the table, in full."""
    if step.kind == StepKind.CONFIRM:
        return str(step.verdict or step.likeness)
    if step.kind == StepKind.VERIFY:
        return "verified" if step.likeness == "like bad" else f"not verified ({step.likeness})"
    return str(step.likeness)


def step_cells(number: str, step: Step) -> tuple[str, ...]:
    """One table row: number, commit, subject, change, verdict, rounds, seconds."""
    return (
        number,
        step.commit.short,
        step.commit.subject,
        change_text(step),
        _verdict(step),
        str(step.rounds),
        f"{step.seconds:.0f} s",
    )


def rows(b: Bisection) -> list[tuple[str, ...]]:
    """The steps table: confirm first, the search steps numbered, verification last."""
    out = []
    numbers: dict[str, int] = {}
    for s in b.steps:
        label = {StepKind.CONFIRM: "ends", StepKind.VERIFY: "verify"}.get(s.kind, "")
        if s.kind == StepKind.STEP:
            # A second look at a commit pools its first: the same number, marked.
            again = s.commit.sha in numbers
            n = numbers.setdefault(s.commit.sha, len(numbers) + 1)
            label = f"{n} again" if again else str(n)
        out.append(step_cells(label, s))
    return out


def headline(b: Bisection) -> list[str]:
    """What was found, in plain lines (the culprit or range first)."""
    confirm = next(iter(b.of_kind(StepKind.CONFIRM)), None)
    span = f"{b.good.ref} ({b.good.short}) → {b.bad.ref} ({b.bad.short}), {b.commits} commit(s)"
    total = f"{b.regime}: {change_text(confirm)} {_signal(b)}from GOOD to BAD"
    span_lines = [span, *_placement(b)]
    if b.outcome == Outcome.NO_REGRESSION:
        verdict = confirm.verdict if confirm else "?"
        unclear = confirm is not None and confirm.likeness == Likeness.UNKNOWN
        if verdict == Verdict.INCONCLUSIVE or unclear:
            # Not a finding of "no regression": the ends could not be told apart (too
            # noisy here, even after all the comparisons of the ends).
            first = f"not bisected: cannot tell whether BAD is slower than GOOD ({verdict})"
        else:
            first = f"no regression between GOOD and BAD to bisect ({verdict})"
        return [first, total, *span_lines, *([b.note] if b.note else [])]
    if b.outcome == Outcome.FAILED:
        return [f"cannot bisect: {b.note}", total, *span_lines]
    lines = [total, *span_lines]
    if b.outcome == Outcome.CULPRIT and b.culprit is not None:
        c = b.culprit
        lines.insert(0, f"culprit: {c.sha} {c.subject} ({c.date})")
    else:
        lines.insert(0, f"candidate range: {len(b.candidates)} commit(s), no single culprit")
        lines += [f"  {c.short} {c.subject} ({c.date})" for c in b.candidates]
    for v in b.of_kind(StepKind.VERIFY):
        ok = "verified" if v.likeness == "like bad" else "not verified"
        lines.append(f"{v.commit.short} vs {v.base.short}: {change_text(v)} ({ok})")
    if b.note:
        lines.append(b.note)
    return lines + profile_lines(b)


def _placement(b: Bisection) -> list[str]:
    """Where this call's workers ran, when they were pinned, and the machines, when the
    record's steps were measured on more than one."""
    from perfctl.render.notes import pinned_to

    placed = pinned_to(b.settings)
    machines = dict(b.settings.get("machines") or {})
    return ([f"every worker pinned to {placed}"] if placed else []) + (
        [f"steps measured on {len(machines)} machines: {machine_list(machines)}"]
        if len(machines) > 1
        else []
    )


def machine_list(machines: dict[str, str]) -> str:
    """Machines (id → hostname) as ``host (id …)``, by id."""
    return ", ".join(f"{h or 'a host'} (id {i})" for i, h in sorted(machines.items()))


def _signal(b: Bisection) -> str:
    """What the change is of, when it is not wall time."""
    unit = {"instructions": "instructions/op", "memory": "blocks/op"}
    m = str(b.settings.get("measure") or "time")
    return f"in {unit[m]} " if m in unit else ""


def profile_lines(b: Bisection) -> list[str]:
    """``--profile``: where py-spy saw the time move (and, counting instructions, where
    callgrind saw them move), and the differentials' files."""
    out = []
    if b.profile is not None:
        sampled = f", {b.profile.seconds:g} s a ref" if b.profile.seconds else ""
        what = f"profiled time, not a measurement{sampled}"
        out += _link_lines(b.profile, "py-spy differential", what)
    if b.callgrind is not None:
        what = f"self instructions/op, from {b.callgrind.source}"
        out += _link_lines(b.callgrind, "callgrind differential", what)
    return out


def _link_lines(p: ProfileLink, title: str, what: str) -> list[str]:
    ends = f"{p.before.short} → {p.after.short}"
    if p.error:
        return [f"no {title} of {ends}: {p.error}"]
    lines = [f"{title} {ends} ({what}):"]
    lines += [f"  {m}" for m in p.movers] or ["  no function moved by more than 1%"]
    lines += [f"  {label}: {p.files[k]}" for k, label in _PROFILE_FILES if k in p.files]
    return lines


_PROFILE_FILES = (
    ("diff_svg", "diff flame graph"),
    ("diff_reverse_svg", "reverse view"),
    ("diff_json", "diff data"),
    ("functions_json", "function table"),
)


def _legend(b: Bisection) -> list[str]:
    if b.outcome in (Outcome.NO_REGRESSION, Outcome.FAILED):
        return []
    if len(b.last_looks()) < len(b.of_kind(StepKind.STEP)):
        return [f"{legend(b)} N again: a second look at an unknown commit, pooled with the first."]
    return [legend(b)]


def skipped_lines(b: Bisection) -> list[str]:
    """One line per commit stepped over, with the reason."""
    return [
        f"{s.likeness}: {s.commit.short} {s.commit.subject}: "
        + (" ".join(s.reason.split()) or "no clear answer")  # one line: a log excerpt
        for s in b.last_looks()
        if s.likeness in ("skipped", "unknown")
    ]


def format_bisect_table(b: Bisection) -> Any:
    """A rich renderable: the headline, the steps table, skipped commits, total time."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(title=esc(f"bisect {b.regime}: steps"), title_justify="left")
    for col in COLUMNS:
        table.add_column(col, justify="right" if col in ("Rounds", "Time") else "left")
    for cells in rows(b):
        table.add_row(*(esc(c) for c in cells))
    tail = [*_legend(b), *skipped_lines(b), f"total time: {b.seconds:.0f} s"]
    lines = [Text(_indented(x)) for x in headline(b)]
    return Group(*lines, table, *(Text(escape_plain(x, limit=400)) for x in tail))


def _indented(line: str) -> str:
    """One headline line made plain, its indent kept (a differential's lines are indented)."""
    body = line.lstrip(" ")
    return " " * (len(line) - len(body)) + escape_plain(body, limit=400)


def format_bisect_markdown(b: Bisection) -> str:
    """The headline as a paragraph, then the steps as a markdown table."""
    lines = [md_escape(x, limit=400) + "  " for x in headline(b)]
    lines += ["", "| " + " | ".join(COLUMNS) + " |", "| " + " | ".join(["---"] * 7) + " |"]
    lines += ["| " + " | ".join(md_escape(c) for c in cells) + " |" for cells in rows(b)]
    lines += ["", *(md_escape(x, limit=400) + "  " for x in [*_legend(b), *skipped_lines(b)])]
    lines.append(f"_Total time: {b.seconds:.0f} s._")
    return "\n".join(lines) + "\n"


def format_bisect_json(b: Bisection) -> str:
    """The stored record plus its total time (stdout only)."""
    return json.dumps({**to_dict(b), "seconds": round(b.seconds, 2)}, indent=2)


def format_bisects_table(records: Sequence[Bisection]) -> Any:
    """Every regime's record in turn, then the time over all of them."""
    from rich.console import Group
    from rich.text import Text

    parts: list[Any] = []
    for b in records:
        parts += [format_bisect_table(b), Text("")]
    if len(records) > 1:
        parts.append(Text(f"{len(records)} regimes, total time: {_seconds(records):.0f} s"))
    return Group(*parts)


def format_bisects_markdown(records: Sequence[Bisection]) -> str:
    """One section per regime."""
    if len(records) == 1:
        return format_bisect_markdown(records[0])
    parts = [f"### {md_escape(b.regime)}\n\n{format_bisect_markdown(b)}" for b in records]
    return (
        "\n".join(parts) + f"\n_{len(records)} regimes, total time: {_seconds(records):.0f} s._\n"
    )


def format_bisects_json(records: Sequence[Bisection]) -> str:
    """``{"bisections": [record + seconds, …], "seconds": total}`` (stdout only)."""
    data = [{**to_dict(b), "seconds": round(b.seconds, 2)} for b in records]
    return json.dumps({"bisections": data, "seconds": round(_seconds(records), 2)}, indent=2)


def _seconds(records: Sequence[Bisection]) -> float:
    return sum(b.seconds for b in records)
