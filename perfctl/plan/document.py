"""The plan document: generated blocks between markers, and their markdown.

Only the text between ``<!-- perfctl:begin NAME -->`` and
``<!-- perfctl:end NAME -->`` (or a bare ``<!-- perfctl:end -->``) is ever
rewritten; every other byte of the file is kept exactly (line endings,
trailing spaces, invalid UTF-8 included). Markers count only on a line of
their own and outside fenced code blocks, so a document may quote them.

Blocks: ``phase-tracker``, ``baseline``, ``phase-<id>``, ``success-metrics``
and ``update-log``. The update log keeps a hidden digest of each phase's
result table and gains an entry only when a digest changes, so updating twice
with no new data rewrites nothing.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import os
import re
import stat
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from perfctl.errors import PlanError
from perfctl.files import check_output_file
from perfctl.model import Comparison, SideStats
from perfctl.plan.spec import CheckState, change_text
from perfctl.render.escape import escape_plain, md_escape, md_name, shell_command

if TYPE_CHECKING:
    from perfctl.plan.spec import Check, PlanSpec
    from perfctl.plan.update import PhaseState, Row

STATIC_BLOCKS = ("phase-tracker", "baseline", "success-metrics", "update-log")
MARKER_HINT = (
    "generated blocks look like `<!-- perfctl:begin NAME -->` … `<!-- perfctl:end NAME -->`"
)
_MARKER = re.compile(r"^[ \t]*<!--[ \t]*perfctl:(begin|end)\b[ \t]*([^\s>]*)[ \t]*-->[ \t]*$")
_ANY_MARKER = re.compile(r"^[ \t]*<!--[ \t]*perfctl:")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_DIGESTS = re.compile(r"^<!-- perfctl:results(.*)-->$")
ENCODING = ("utf-8", "surrogateescape")  # round-trips any byte, valid UTF-8 or not


@dataclass(frozen=True)
class Block:
    """One generated block: its marker lines (kept verbatim) and its content."""

    name: str
    line: int  # 1-based line of the begin marker
    begin: str
    inner: str
    end: str

    @property
    def eol(self) -> str:
        """The line ending generated lines get: the begin marker's own."""
        return "\r\n" if self.begin.endswith("\r\n") else "\n"


@dataclass(frozen=True)
class PlanDoc:
    """A plan file as prose strings and blocks, in order."""

    label: str
    parts: tuple[str | Block, ...]

    def blocks(self) -> list[Block]:
        """The generated blocks, in document order."""
        return [p for p in self.parts if isinstance(p, Block)]

    def block(self, name: str) -> Block | None:
        """The block called ``name``, if present."""
        return next((b for b in self.blocks() if b.name == name), None)

    def render(self, contents: Mapping[str, Sequence[str]]) -> str:
        """The document with the named blocks' contents replaced by these lines."""
        out = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            lines = contents.get(part.name)
            inner = part.inner if lines is None else "".join(ln + part.eol for ln in lines)
            out.append(part.begin + inner + part.end)
        return "".join(out)


# --- parsing ---------------------------------------------------------------------


def _lines(text: str) -> list[str]:
    # Split on "\n" only: str.splitlines would also split on U+2028 and friends.
    return re.findall(r"[^\n]*\n|[^\n]+\Z", text)


class _Parser:
    """Walks the lines once, tracking fences and the open block."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.parts: list[str | Block] = []
        self.prose: list[str] = []
        self.fence = ""
        self.open: tuple[str, int, str] | None = None  # name, line, begin text
        self.inner: list[str] = []

    def fail(self, line: int, message: str, hint: str = MARKER_HINT) -> PlanError:
        return PlanError(f"{self.label}:{line}: {message}", hint)

    def feed(self, no: int, line: str) -> None:
        body = line.rstrip("\r\n")
        if self.open is None and self._fenced(body):
            self.prose.append(line)
            return
        m = _MARKER.match(body)
        if m is None:
            if self.open is None and _ANY_MARKER.match(body):
                raise self.fail(no, f"unrecognised perfctl marker `{body.strip()}`")
            (self.inner if self.open else self.prose).append(line)
        elif m.group(1) == "begin":
            self._begin(no, line, m.group(2))
        else:
            self._end(no, line, m.group(2))

    def _fenced(self, body: str) -> bool:
        m = _FENCE.match(body)
        if self.fence:
            if (
                m
                and m.group(1)[0] == self.fence[0]
                and len(m.group(1)) >= len(self.fence)
                and (not body.strip().strip(self.fence[0]))
            ):
                self.fence = ""
            return True
        if m:
            self.fence = m.group(1)
            return True
        return False

    def _begin(self, no: int, line: str, name: str) -> None:
        if self.open is not None:
            other, at, _ = self.open
            raise self.fail(
                no,
                f"`perfctl:begin {name}` inside block `{other}` opened at line {at}",
                f"close it with `<!-- perfctl:end {other} -->` first",
            )
        if not name:
            raise self.fail(no, "`perfctl:begin` without a block name")
        self.parts.append("".join(self.prose))
        self.prose, self.inner, self.open = [], [], (name, no, line)

    def _end(self, no: int, line: str, name: str) -> None:
        if self.open is None:
            shown = f"perfctl:end {name}".strip()
            raise self.fail(
                no,
                f"`{shown}` has no matching begin marker",
                "add the `<!-- perfctl:begin NAME -->` line above it, or delete it",
            )
        other, at, begin = self.open
        if name and name != other:
            raise self.fail(
                no,
                f"`perfctl:end {name}` closes block `{other}` opened at line {at}",
                f"write `<!-- perfctl:end {other} -->`",
            )
        self.parts.append(Block(other, at, begin, "".join(self.inner), line))
        self.open = None

    def finish(self) -> PlanDoc:
        if self.open is not None:
            name, at, _ = self.open
            raise self.fail(
                at,
                f"block `{name}` has no end marker",
                f"add `<!-- perfctl:end {name} -->` where the block ends",
            )
        self.parts.append("".join(self.prose))
        return PlanDoc(self.label, tuple(p for p in self.parts if p != ""))


def parse_doc(text: str, label: str) -> PlanDoc:
    """Split a plan into prose and blocks; PlanError naming the line on bad markers."""
    parser = _Parser(label)
    for no, line in enumerate(_lines(text), 1):
        parser.feed(no, line)
    doc = parser.finish()
    if not doc.blocks():
        raise PlanError(
            f"{label}: no perfctl markers found",
            "add blocks such as `<!-- perfctl:begin phase-tracker -->` … "
            "`<!-- perfctl:end phase-tracker -->`, or start from `perfctl plan init`",
        )
    return doc


def read_doc(path: Path, label: str) -> PlanDoc:
    """Read and parse a plan file."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PlanError(
            f"cannot read {label}: {exc.strerror}",
            f"create it with `{shell_command('perfctl', 'plan', 'init', label)}`",
        ) from exc
    return parse_doc(data.decode(*ENCODING), label)


def check_names(doc: PlanDoc, phase_ids: Sequence[str]) -> None:
    """Every block name is known and used once; ``phase-<id>`` names a configured phase."""
    known = [*STATIC_BLOCKS, *(f"phase-{p}" for p in phase_ids)]
    seen: dict[str, int] = {}
    for b in doc.blocks():
        if b.name in seen:
            raise PlanError(
                f"{doc.label}:{b.line}: block `{b.name}` appears twice (first at "
                f"line {seen[b.name]})",
                "keep one of them",
            )
        seen[b.name] = b.line
        if b.name in known:
            continue
        close = difflib.get_close_matches(b.name, STATIC_BLOCKS, n=1, cutoff=0.8)
        hint = f"did you mean `{close[0]}`? " if close else ""
        if b.name.startswith("phase-") and not close:
            raise PlanError(
                f"{doc.label}:{b.line}: block `{b.name}` names unknown phase "
                f"`{b.name.removeprefix('phase-')}`",
                "configured phases: " + ", ".join(phase_ids),
            )
        raise PlanError(
            f"{doc.label}:{b.line}: unknown block `{b.name}`", hint + "blocks: " + ", ".join(known)
        )


def write_atomic(path: Path, text: str) -> None:
    """Replace the file in one step (temp file in the same directory + os.replace)."""
    target = check_output_file(path, "the plan").resolve()
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(text.encode(*ENCODING))
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)  # mkstemp makes 0600; keep the plan's own permissions
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# --- rendering -------------------------------------------------------------------


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


def _row(r: Row) -> str:
    rc = r.rc
    base = rc.base.median_s if rc and rc.base else None
    head = rc.head.median_s if rc and rc.head else None
    change = change_text(rc.change) if rc and rc.change is not None else "—"
    target = "; ".join(c.cell() for c in r.checks) or "—"
    verdict = md_escape(rc.verdict or "—") if rc else "not measured"
    return f"| {md_name(r.name)} | {_us(base)} | {_us(head)} | {change} | {target} | {verdict} |"


def result_table(state: PhaseState) -> list[str]:
    """The before/after table of one phase (its digest decides the update log)."""
    out = [
        "| Regime | Before | After | Change | Target | Verdict |",
        "| --- | ---: | ---: | ---: | --- | --- |",
    ]
    return out + [_row(r) for r in state.rows]


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
    return [*head, *result_table(state), "", _tally(state)]


def _provenance(c: Comparison) -> list[str]:
    """The comparison's own warnings (busy machine, runs measured apart) and its source."""
    from perfctl.render.escape import md_escape

    lines = [f"> Warning: {md_escape(w, 1000)}" for w in c.warnings]
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
    for line in _lines(block.inner):
        body = line.rstrip("\r\n")
        if m := _DIGESTS.match(body.strip()):
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
