"""Plan phases as configured: their targets, checks and the loading of the config.

A plan is a markdown document (see :mod:`perfctl.plan.document`) whose tables are
generated from phases declared in config::

    [tool.perfctl.plan]                 # or [plan] in perfctl.toml
    baseline_phase = "1"                # whose before-side is the baseline
    source = "perfctl compare {before} {after}"   # command shown as the source

    [[tool.perfctl.plan.phases]]        # or [[plan.phases]]
    id = 1
    name = "Remove per-request leak scan"
    before = "v1.0"
    after = "phase-1"
    regimes = ["tiny_ping", "increment_small"]
    targets = { tiny_ping = "-20%", increment_small = "2x", "propagation.update" = "<10us" }
    guards = ["mixed_pipeline"]
    status = "in progress"              # optional: "planned" | "in progress"

Targets: ``-20%`` / ``+5%`` bound the stored change of the comparison, the
Hodges-Lehmann shift its row shows in the Change column (a sign is required),
``2x`` asks for a speed-up of at least 2 (1 / (1 + change)), and ``<10us``
(``ns``, ``us``, ``ms``, ``s``) bounds the after-side median. A target on an
inconclusive, failed or skipped regime is unverified, never met. A
regime is named by its full name (``echo[size=64]``), the name before ``[``
(``echo``: every variant), or ``family.name``.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from perfctl.config import Config
from perfctl.errors import PlanError
from perfctl.model import FAILED, INCONCLUSIVE, NO_CHANGE, REGRESSED, SKIPPED, RegimeComparison
from perfctl.render.escape import shell_word

PLAN_KEYS = ("phases", "baseline_phase", "source")
PHASE_KEYS = tuple("id name before after regimes targets guards status comparison".split())
PLANNED = "planned"
IN_PROGRESS = "in progress"
STATUSES = (PLANNED, IN_PROGRESS)
# After-refs that name the living checkout: such a phase is still in progress.
LIVE_REFS = ("HEAD", "@", "WORKTREE")
DEFAULT_SOURCE = "perfctl compare {before} {after}"
TARGET_HINT = 'targets look like "-20%" (at least 20% faster), "2x" (speed-up) or "<10us"'
UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0}
_RELATIVE = re.compile(r"^([+-]\d+(?:\.\d+)?)\s*%$")
_SPEEDUP = re.compile(r"^(\d+(?:\.\d+)?)\s*[x×]$")
_ABSOLUTE = re.compile(r"^<\s*(\d+(?:\.\d+)?)\s*(ns|us|µs|μs|ms|s)$")
_PHASE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class CheckState(StrEnum):
    """How a target or guard fared; each state has its own mark and is counted apart."""

    MET = "met"  # a guard: held
    MISSED = "missed"  # a guard: broken (regressed, or head failed)
    UNVERIFIED = "unverified"  # measured, but the verdict cannot back a claim either way
    NOT_MEASURED = "not measured"


MARKS = {
    CheckState.MET: "✅",
    CheckState.MISSED: "❌",
    CheckState.UNVERIFIED: "⚠️",
    CheckState.NOT_MEASURED: "❔",
}
# Verdicts on which no target can be judged: the figure is noise, or missing.
UNVERIFIABLE = (INCONCLUSIVE, FAILED, SKIPPED)


@dataclass(frozen=True)
class Check:
    """One target or guard judged against a stored comparison."""

    label: str
    figure: str
    state: CheckState
    guard: bool = False

    def cell(self) -> str:
        """The table cell, e.g. ``-20% → -43.10% ✅ met`` or ``guard: no regression ✅``."""
        mark = MARKS[self.state]
        if self.guard:
            held_or_broken = self.state in (CheckState.MET, CheckState.MISSED)
            return f"{self.label} {mark}" + ("" if held_or_broken else f" {self.state}")
        return f"{self.label} → {self.figure or '—'} {mark} {self.state}"


@dataclass(frozen=True)
class Target:
    """A parsed phase target: ``relative`` change, ``speedup`` factor or ``absolute`` time."""

    kind: str
    value: float  # a fraction (-0.2), a factor (2.0) or seconds per op
    text: str
    unit: str = ""

    def evaluate(self, rc: RegimeComparison | None) -> Check:
        """Judge this target on the figure its row shows: the stored change, or the after median.

        The figure is judged as shown (rounded), so a cell never reads
        ``-20% → -20.00% ❌``. A regime whose verdict is inconclusive, failed
        or skipped leaves the target unverified; so does a "no change" verdict
        whose figure meets a target that no change would miss.
        """
        if rc is None or not rc.verdict:
            return Check(self.text, "", CheckState.NOT_MEASURED)
        shown = _shown_figure(self, rc)
        if rc.verdict in UNVERIFIABLE:
            return Check(self.text, shown[0] if shown else "", CheckState.UNVERIFIED)
        if shown is None:
            return Check(self.text, "", CheckState.NOT_MEASURED)
        text, value = shown
        if not self.met_by(value):
            return Check(self.text, text, CheckState.MISSED)
        if rc.verdict == NO_CHANGE and self.kind != "absolute" and not self.met_by_no_change():
            return Check(self.text, text, CheckState.UNVERIFIED)
        return Check(self.text, text, CheckState.MET)

    def met_by(self, figure: float) -> bool:
        """Whether a figure in this target's terms (change, factor, seconds) meets it."""
        if self.kind == "relative":
            return figure <= self.value
        if self.kind == "speedup":
            return figure >= self.value
        return figure < self.value

    def met_by_no_change(self) -> bool:
        """Whether a change of exactly zero would meet this relative or speed-up target."""
        return self.met_by(0.0 if self.kind == "relative" else 1.0)


def _shown_figure(t: Target, rc: RegimeComparison) -> tuple[str, float] | None:
    """The target's figure as the cell shows it, and its value rounded the same way."""
    if t.kind == "absolute":
        if rc.head is None:
            return None
        text = _significant(rc.head.median_s / UNITS[t.unit])
        return f"{text}{t.unit}", float(text) * UNITS[t.unit]
    if rc.change is None or rc.change <= -1:
        return None
    if t.kind == "relative":
        # The Change column's own format: one figure per row.
        text = change_text(rc.change)
        return text, float(text.rstrip("%")) / 100
    text = f"{1 / (1 + rc.change):.2f}"
    return f"{text}x", float(text)


def change_text(change: float) -> str:
    """The stored change as the plan shows it, e.g. ``-19.98%`` (Change column and targets)."""
    return f"{change * 100:+.2f}%"


def _significant(x: float) -> str:
    """About three significant figures, never in exponent notation."""
    for bound, spec in ((100, ".0f"), (10, ".1f"), (1, ".2f")):
        if x >= bound:
            return format(x, spec)
    return format(x, ".3g")


def guard_check(rc: RegimeComparison | None) -> Check:
    """A guard holds on a measured verdict other than regressed; inconclusive is unverified."""
    label = "guard: no regression"
    if rc is None or not rc.verdict:
        return Check(label, "", CheckState.NOT_MEASURED, guard=True)
    if rc.verdict == REGRESSED or rc.head_status == FAILED:
        return Check(label, "", CheckState.MISSED, guard=True)
    if rc.verdict in UNVERIFIABLE:
        return Check(label, "", CheckState.UNVERIFIED, guard=True)
    return Check(label, "", CheckState.MET, guard=True)


def parse_target(text: str) -> Target:
    """``"-20%"`` / ``"2x"`` / ``"<10us"`` -> Target; ValueError when malformed."""
    s = text.strip()
    if m := _RELATIVE.match(s):
        return Target("relative", float(m.group(1)) / 100, s)
    if (m := _SPEEDUP.match(s)) and float(m.group(1)) > 0:
        return Target("speedup", float(m.group(1)), s)
    if (m := _ABSOLUTE.match(s)) and float(m.group(1)) > 0:
        unit = m.group(2)
        return Target("absolute", float(m.group(1)) * UNITS[unit], s, unit)
    raise ValueError(text)


@dataclass(frozen=True)
class Phase:
    """One configured phase of the plan."""

    id: str
    name: str
    before: str
    after: str
    regimes: tuple[str, ...] = ()
    targets: tuple[tuple[str, Target], ...] = ()
    guards: tuple[str, ...] = ()
    status: str | None = None
    comparison: str = ""  # a pinned stored comparison id; empty: the newest that covers the phase

    def primary(self) -> tuple[str, ...]:
        """The regimes the phase aims at: ``regimes`` then any other target keys."""
        extra = tuple(k for k, _ in self.targets if k not in self.regimes)
        return tuple(dict.fromkeys(self.regimes + extra))

    @property
    def live(self) -> bool:
        """Whether the phase is still being worked on."""
        return self.status == IN_PROGRESS or self.after in LIVE_REFS


@dataclass(frozen=True)
class PlanSpec:
    """Every phase, the baseline phase and the source-command template."""

    phases: tuple[Phase, ...]
    baseline_phase: str
    source: str = DEFAULT_SOURCE

    def phase(self, pid: str) -> Phase | None:
        """The phase with this id, if any."""
        return next((p for p in self.phases if p.id == pid), None)

    def command(self, phase: Phase) -> str:
        """The source command shown for a phase; the refs are shell-quoted."""
        before, after = shell_word(phase.before), shell_word(phase.after)
        return self.source.replace("{before}", before).replace("{after}", after)


# --- loading ---------------------------------------------------------------------


class _Bad(Exception):
    """A config problem: the text to point at, the message and the fix."""

    def __init__(self, needle: str, message: str, hint: str) -> None:
        super().__init__(message)
        self.needle, self.message, self.hint = needle, message, hint


class _Where:
    """Finds config-file lines for error messages (best effort: TOML keeps none)."""

    def __init__(self, source: Path | None) -> None:
        self.name = source.name if source else "config"
        text = source.read_text(encoding="utf-8") if source and source.is_file() else ""
        self.lines = text.split("\n")
        header = re.compile(r"^\s*\[\[\s*(tool\s*\.\s*perfctl\s*\.\s*)?plan\s*\.\s*phases\s*\]\]")
        found = [i for i, ln in enumerate(self.lines) if header.match(ln)]
        self.headers = [*found, len(self.lines)]

    def line(self, index: int | None, needle: str) -> int:
        """1-based line of ``needle`` inside phase ``index`` (None: anywhere)."""
        start, stop = 0, len(self.lines)
        if index is not None and index + 1 < len(self.headers):
            start, stop = self.headers[index], self.headers[index + 1]
        hits = (i for i in range(start, stop) if needle and needle in self.lines[i])
        return next(hits, start) + 1

    def error(self, index: int | None, pid: str, bad: _Bad) -> PlanError:
        """A PlanError that names the config line and the phase."""
        who = f"phase {pid}: " if pid else ""
        where = f"{self.name}:{self.line(index, bad.needle)}"
        return PlanError(f"{where}: {who}{bad.message}", bad.hint)


def _known(key: str, known: Sequence[str], noun: str) -> None:
    if key not in known:
        close = difflib.get_close_matches(key, known, n=1)
        hint = f"did you mean `{close[0]}`?" if close else "known keys: " + ", ".join(known)
        raise _Bad(key, f"unknown {noun} `{key}`", hint)


def _strings(table: dict[str, Any], key: str) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        example = f'example: {key} = ["tiny_ping", "echo[size=64]"]'
        raise _Bad(key, f"`{key}` must be a list of regime names", example)
    return tuple(value)


def _text(table: dict[str, Any], key: str) -> str:
    value = table.get(key)
    if not isinstance(value, str) or not value.strip():
        hint = f'every phase needs id, name, before and after, e.g. {key} = "v1.0"'
        raise _Bad(key, f"`{key}` is missing or not a string", hint)
    return value.strip()


def _targets(value: Any) -> tuple[tuple[str, Target], ...]:
    if not isinstance(value, dict):
        example = 'example: targets = { tiny_ping = "-20%" }'
        raise _Bad("targets", "`targets` must be a table of regime = target", example)
    out = []
    for regime, text in value.items():
        try:
            out.append((str(regime), parse_target(text if isinstance(text, str) else "")))
        except ValueError:
            raise _Bad(str(text), f'malformed target `{regime} = "{text}"`', TARGET_HINT) from None
    return tuple(out)


def _phase_id(raw: Any) -> str:
    pid = str(raw).strip() if isinstance(raw, int | str) and not isinstance(raw, bool) else ""
    if not _PHASE_ID.match(pid):
        hint = "use a number or a word of letters, digits, `.`, `_` or `-`"
        raise _Bad("id", f"invalid phase id `{raw}`", hint)
    return pid


def _phase_status(value: Any) -> str | None:
    if value is not None and value not in STATUSES:
        close = difflib.get_close_matches(str(value), STATUSES, n=1)
        hint = 'status is "planned" or "in progress" (or left out)'
        raise _Bad(
            "status",
            f"unknown status `{value}`",
            (f'did you mean "{close[0]}"? ' if close else "") + hint,
        )
    return value


def _phase(table: dict[str, Any]) -> Phase:
    pid = _phase_id(table.get("id"))
    for key in table:
        _known(key, PHASE_KEYS, "phase key")
    return Phase(
        id=pid,
        name=_text(table, "name"),
        before=_text(table, "before"),
        after=_text(table, "after"),
        regimes=_strings(table, "regimes"),
        targets=_targets(table.get("targets", {})),
        guards=_strings(table, "guards"),
        status=_phase_status(table.get("status")),
        comparison=str(table.get("comparison") or "").strip(),  # checked against the store
    )


def _phases(raw: Any, where: _Where) -> tuple[Phase, ...]:
    if not isinstance(raw, list) or not raw:
        raise PlanError(
            f"{where.name}: no plan phases are configured",
            "add [[tool.perfctl.plan.phases]] tables (id, name, before, after, "
            "regimes, targets); see the README (perfctl plan)",
        )
    phases: list[Phase] = []
    for i, table in enumerate(raw):
        pid = str(table.get("id", f"#{i + 1}")) if isinstance(table, dict) else f"#{i + 1}"
        try:
            phase = _phase(table if isinstance(table, dict) else {"id": None})
            if phase.id in {p.id for p in phases}:
                raise _Bad("id", "duplicate phase id", "give every phase its own id")
        except _Bad as bad:
            raise where.error(i, pid, bad) from None
        phases.append(phase)
    return tuple(phases)


def _settings(table: dict[str, Any], phases: Sequence[Phase]) -> tuple[str, str]:
    baseline = str(table.get("baseline_phase", phases[0].id))
    if baseline not in {p.id for p in phases}:
        ids = ", ".join(p.id for p in phases)
        raise _Bad(
            "baseline_phase",
            f"baseline_phase `{baseline}` is not a phase",
            f"configured phases: {ids}",
        )
    source = table.get("source", DEFAULT_SOURCE)
    if not isinstance(source, str) or not source.strip():
        example = 'example: source = "perfctl compare {before} {after}"'
        raise _Bad("source", "`source` must be a command string", example)
    return baseline, source.strip()


def load_spec(config: Config) -> PlanSpec:
    """Read and strictly validate the plan table of the project's config."""
    where = _Where(config.source)
    try:
        for key in config.plan:  # plan-level typos first: `phase = ...` hides the phases
            _known(key, PLAN_KEYS, "plan key")
    except _Bad as bad:
        raise where.error(None, "", bad) from None
    phases = _phases(config.plan.get("phases"), where)
    try:
        baseline, source = _settings(config.plan, phases)
    except _Bad as bad:
        raise where.error(None, "", bad) from None
    return PlanSpec(phases, baseline, source)
