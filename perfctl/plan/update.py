"""Plan updates: judge each phase against its stored comparison and rewrite the blocks.

The phases themselves (config, targets, checks) live in :mod:`perfctl.plan.spec`;
the document and its markers in :mod:`perfctl.plan.document`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from perfctl.config import Config
from perfctl.errors import PerfctlError, PlanError
from perfctl.files import check_output_file
from perfctl.measure.executor import PYPERF, Executor
from perfctl.model import Comparison, RefInfo, RegimeComparison
from perfctl.plan import blocks
from perfctl.plan import document as plandoc
from perfctl.plan.document import PlanDoc
from perfctl.plan.signals import exact, lacking_signals, shas, stored_signals
from perfctl.plan.spec import (
    IN_PROGRESS,
    PLANNED,
    Check,
    Phase,
    PlanSpec,
    Target,
    guard_check,
    load_spec,
    parse_target,
)
from perfctl.plan.state import PhaseState, Row
from perfctl.render.escape import md_escape, md_name, shell_command, shell_word
from perfctl.stats.signals import measure_of
from perfctl.store.local import Store, open_store

if TYPE_CHECKING:
    from perfctl.jobs.compare import CompareSettings

__all__ = [
    "IN_PROGRESS",
    "PLANNED",
    "Check",
    "Phase",
    "PhaseState",
    "PlanSpec",
    "Row",
    "Target",
    "UpdateResult",
    "guard_check",
    "init_plan",
    "load_spec",
    "parse_target",
    "update_plan",
]


# --- judging ---------------------------------------------------------------------


def regime_matches(ref: str, rc: RegimeComparison) -> bool:
    """Whether a configured name refers to this regime (full, prefix or family.name)."""
    stem = rc.name.split("[", 1)[0]
    return ref in (rc.name, stem, f"{rc.family}.{rc.name}", f"{rc.family}.{stem}")


def _matched(ref: str, comparison: Comparison | None) -> list[tuple[str, RegimeComparison | None]]:
    found: list[tuple[str, RegimeComparison | None]] = [
        (rc.name, rc)
        for rc in (comparison.regimes if comparison else ())
        if regime_matches(ref, rc)
    ]
    return found or [(ref, None)]


def phase_rows(phase: Phase, comparison: Comparison | None) -> tuple[Row, ...]:
    """The result rows of a phase: primary regimes (with targets), then guards."""
    rows: dict[str, Row] = {}
    refs = [(ref, False) for ref in phase.primary()] + [(ref, True) for ref in phase.guards]
    for ref, guard in refs:
        for name, rc in _matched(ref, comparison):
            checks: tuple[Check, ...]
            if guard:
                checks = (guard_check(rc),)
            else:
                checks = tuple(t.evaluate(rc) for k, t in phase.targets if k == ref)
            old = rows.get(name)
            if old is not None:
                checks = old.checks + tuple(c for c in checks if c not in old.checks)
            rows[name] = Row(name, rc, checks, (old is not None and old.primary) or not guard)
    return tuple(rows.values())


def measure_globs(phase: Phase) -> list[str]:
    """Globs for compare: exact full names, every variant for a name without ``[``."""
    out = []
    for ref in (*phase.primary(), *phase.guards):
        # fnmatch reads `[` as a character class: escape it to match literally.
        escaped = re.sub(r"([*?\[])", r"[\1]", ref)
        out.append(escaped if "[" in ref else escaped + "*")
    return list(dict.fromkeys(out))


# --- the API -----------------------------------------------------------------------

Progress = Callable[[str], None]


@dataclass(frozen=True)
class UpdateResult:
    """What `plan update` did, or would do with ``check``."""

    label: str
    changed: tuple[str, ...]  # blocks whose content changed
    measured: tuple[str, ...] = ()  # phases measured now
    pending: tuple[str, ...] = ()  # phases an update would measure (check mode)
    warnings: tuple[str, ...] = ()

    @property
    def stale(self) -> bool:
        """Whether `plan update` would change the file."""
        return bool(self.changed or self.pending)


def init_plan(config: Config, path: Path, *, force: bool = False) -> Path:
    """Write a new plan skeleton: prose placeholders around every generated block."""
    check_output_file(path, "the plan")
    spec = load_spec(config)
    if path.exists() and not force:
        raise PlanError(
            f"{path} already exists",
            "pass --force to overwrite it, or run "
            f"`{shell_command('perfctl', 'plan', 'update', path)}` to refresh its generated blocks",
        )
    if not path.parent.is_dir():
        raise PlanError(f"{path.parent} is not a directory", "create it first")
    plandoc.write_atomic(path, _skeleton(config, spec, str(path)))
    return path


def _skeleton(config: Config, spec: PlanSpec, label: str) -> str:
    from importlib.resources import files

    import jinja2

    source = files("perfctl.render.templates").joinpath("plan.md.j2").read_text(encoding="utf-8")
    # No autoescaping: this renders markdown, not HTML.
    env = jinja2.Environment(keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    env.filters["md"] = md_escape  # phase and project names: one inert markdown line
    # `label` only appears in suggested commands: quoted for the shell.
    return env.from_string(source).render(
        project=config.root.name, phases=spec.phases, label=shell_word(label)
    )


def update_plan(
    config: Config,
    path: Path,
    *,
    measure: bool = True,
    check: bool = False,
    settings: CompareSettings | None = None,
    progress: Progress | None = None,
    executor: Executor = PYPERF,
    signals: Sequence[CompareSettings] = (),
) -> UpdateResult:
    """Regenerate the blocks of a plan (measuring phases with no stored comparison).

    ``signals``: settings of counter signals (instructions, memory) to show beside the
    time, measured for phases that have none stored of their commits.
    """
    check_output_file(path, "the plan")  # it is rewritten in place: never through a link
    if settings is not None and settings.regimes:
        from perfctl.regimes.discovery import regime_files

        # A wrong --regimes fails even when no phase needs measuring.
        regime_files(config, settings.regimes)
    spec = load_spec(config)
    doc = plandoc.read_doc(path, str(path))
    plandoc.check_names(doc, [p.id for p in spec.phases])
    refs = {p.id: _resolve(config, doc, p) for p in spec.phases}
    store = open_store(config.state_dir, config.store_url)
    found = {
        p.id: _stored(store, doc, p, *refs[p.id], whole=p.id == spec.baseline_phase)
        for p in spec.phases
    }
    missing = tuple(p.id for p in spec.phases if p.status != PLANNED and found[p.id] is None)
    say = progress or (lambda _m: None)
    if measure and not check:
        for pid in missing:
            found[pid] = _measure(config, spec, pid, settings, say, executor)
    beside = {p.id: stored_signals(store.comparisons_of(*shas(refs[p.id])), *refs[p.id])
              for p in spec.phases}  # fmt: skip
    lacking = lacking_signals(spec, refs, beside, signals)
    if measure and not check:
        for pid, s in lacking:
            beside[pid] += (_measure(config, spec, pid, s, say, executor),)
    missing += tuple(dict.fromkeys(pid for pid, _ in lacking if pid not in missing))
    states = [_state(p, *refs[p.id], found[p.id], beside[p.id]) for p in spec.phases]
    contents = _contents(spec, doc, states)
    changed = tuple(
        b.name for b in doc.blocks() if "".join(ln + b.eol for ln in contents[b.name]) != b.inner
    )
    if changed and not check:
        plandoc.write_atomic(path, doc.render(contents))
    return UpdateResult(
        str(path),
        changed,
        () if check or not measure else missing,
        missing if check and measure else (),
        _warnings(doc, spec),
    )


def _doc_line(doc: PlanDoc, phase: Phase) -> int:
    block = doc.block(f"phase-{phase.id}") or doc.block("phase-tracker")
    return block.line if block else 1


def _resolve(config: Config, doc: PlanDoc, phase: Phase) -> tuple[RefInfo | None, RefInfo | None]:
    if phase.status == PLANNED:
        return None, None  # not started: its refs may not exist yet
    from perfctl.errors import GitError
    from perfctl.git.refs import resolve_ref

    out = []
    for ref in (phase.before, phase.after):
        try:
            out.append(resolve_ref(config.root, ref, outputs=config.outputs))
        except GitError as exc:
            raise PlanError(
                f"{doc.label}:{_doc_line(doc, phase)}: phase {phase.id}: ref `{ref}` "
                f"does not resolve ({exc.message})",
                "create the ref, fix the phase's before/after in config, or set "
                'status = "planned" until the phase starts',
            ) from None
    return out[0], out[1]


def _stored(
    store: Store,
    doc: PlanDoc,
    phase: Phase,
    before: RefInfo | None,
    after: RefInfo | None,
    *,
    whole: bool,
) -> Comparison | None:
    """The comparison a phase is judged on: the pinned one, else the newest that covers it."""
    if before is None or after is None:
        return None
    if phase.comparison:
        return _pinned(store, doc, phase, before, after)
    for c in store.comparisons_of(before.sha):  # newest first
        timed = _measured(c) == "time"  # a plan's figures and targets are wall time
        if exact(c, before, after) and c.measured and timed and covers(c, phase, whole=whole):
            return c
    return None


def covers(c: Comparison, phase: Phase, *, whole: bool = False) -> bool:
    """Whether a comparison measured every regime, target and guard of a phase.

    With ``whole`` (the baseline phase) it must also have measured the whole suite:
    no --regime or --family narrowing and no single shard.
    """
    s = c.settings
    if whole and (s.get("globs") or s.get("family") or s.get("shard")):
        return False
    wanted = (*phase.primary(), *phase.guards)
    return all(any(regime_matches(ref, rc) for rc in c.regimes) for ref in wanted)


def _pinned(
    store: Store, doc: PlanDoc, phase: Phase, before: RefInfo, after: RefInfo
) -> Comparison:
    from perfctl.errors import StoreError

    where = f"{doc.label}:{_doc_line(doc, phase)}: phase {phase.id}"
    try:
        c = store.load_comparison(phase.comparison)
    except StoreError as exc:
        raise PlanError(
            f"{where}: pinned comparison `{phase.comparison}` cannot be read ({exc.message})",
            "see `perfctl comparisons` for stored ids, or remove the phase's `comparison` key",
        ) from None
    if (c.base.sha, c.head.sha) != (before.sha, after.sha):
        raise PlanError(
            f"{where}: pinned comparison {c.id} compares {c.base.short} → {c.head.short}, "
            f"not `{phase.before}` ({before.short}) → `{phase.after}` ({after.short})",
            "pin a comparison of the phase's before and after refs",
        )
    if _measured(c) != "time":
        raise PlanError(
            f"{where}: pinned comparison {c.id} measured {_measured(c)}, and a plan's "
            "figures and targets are wall time",
            "pin a comparison measured with --measure time and the wall clock (the defaults)",
        )
    return c


def _measured(c: Comparison) -> str:
    """``time`` for wall time, else what the comparison measured (a counter, or a clock)."""
    clock = str(c.settings.get("clock") or "wall")
    return measure_of(c) if clock == "wall" else f"time on the {clock} clock (--clock {clock})"


def _measure(
    config: Config,
    spec: PlanSpec,
    pid: str,
    settings: CompareSettings | None,
    say: Progress,
    executor: Executor,
) -> Comparison:
    from perfctl.jobs.compare import compare_refs

    phase = spec.phase(pid)
    assert phase is not None
    say(f"phase {pid}: measuring {phase.before} → {phase.after}")
    # The baseline phase measures the whole suite, so the baseline snapshot
    # (and its direct-vs-system slowdowns) covers every regime, as seed 000's does.
    globs = None if pid == spec.baseline_phase else measure_globs(phase)
    try:
        return compare_refs(
            config,
            phase.before,
            phase.after,
            regimes=globs,
            settings=settings,
            progress=lambda m: say(f"phase {pid}: {m}"),
            executor=executor,
        )
    except PerfctlError as exc:
        exc.message = f"phase {pid}: {exc.message}"  # same class, so the same exit code
        raise


def _status(phase: Phase, after: RefInfo | None, comparison: Comparison | None) -> str:
    if phase.status == PLANNED:
        return "Planned"
    if phase.live:
        return "In progress"
    if comparison is not None and after is not None:
        return f"Completed ({after.date[:10]})"
    return "Not measured"


def _state(
    phase: Phase,
    before: RefInfo | None,
    after: RefInfo | None,
    comparison: Comparison | None,
    signals: tuple[Comparison, ...] = (),
) -> PhaseState:
    note = ""
    if phase.status == PLANNED:
        note = "the phase has not started"
    elif comparison is None:
        note = (
            f"no stored comparison of {md_name(phase.before)} and {md_name(phase.after)}; "
            "run `perfctl plan update` without --no-measure"
        )
    return PhaseState(
        phase,
        _status(phase, after, comparison),
        before,
        after,
        comparison,
        phase_rows(phase, comparison),
        note,
        signals if comparison is not None else (),
    )


def _contents(spec: PlanSpec, doc: PlanDoc, states: Sequence[PhaseState]) -> dict[str, list[str]]:
    base = next((s for s in states if s.phase.id == spec.baseline_phase), None)
    out = {
        "phase-tracker": blocks.tracker_lines(states),
        "baseline": blocks.baseline_lines(spec, base),
        "success-metrics": blocks.metrics_lines(states, base),
        "update-log": blocks.log_lines(doc.block("update-log"), states),
    }
    out.update({f"phase-{s.phase.id}": blocks.phase_lines(spec, s) for s in states})
    # Blank lines around the content keep markdown from gluing it to the markers.
    return {name: ["", *lines, ""] for name, lines in out.items()}


def _warnings(doc: PlanDoc, spec: PlanSpec) -> tuple[str, ...]:
    return tuple(
        f"phase {p.id} has no `phase-{p.id}` block in {doc.label}"
        for p in spec.phases
        if doc.block(f"phase-{p.id}") is None
    )
