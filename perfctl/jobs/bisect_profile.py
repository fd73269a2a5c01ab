"""``perfctl bisect --profile``: differentials of an answer's two ends.

py-spy's always (:func:`profile_ends`); with ``--measure instructions`` also
callgrind's (:func:`callgrind_ends`), read from a comparison that measured the two
ends together: the bisection's own step of exactly those ends (the verification,
as a rule), else one measured for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from perfctl.config import Config
from perfctl.jobs.compare import Progress
from perfctl.jobs.instructions import KEYS
from perfctl.jobs.settings import CompareSettings
from perfctl.model import OK, Comparison, RefInfo
from perfctl.profile import PROFILE_SECONDS
from perfctl.stats.bisection import Bisection, ProfileLink, StepKind


def profile_ends(
    config: Config,
    regime: str,
    before: RefInfo,
    after: RefInfo,
    regimes: Sequence[str],
    *,
    duration: float = PROFILE_SECONDS,
) -> ProfileLink:
    """py-spy profiles of both ends (``duration`` s each), diffed per op; a failure is kept
    as the link's error."""
    from perfctl.errors import PerfctlError
    from perfctl.jobs import profile as profiling

    try:
        a = profiling.resolve_target(config, after.sha, isolated=True)
        b = profiling.resolve_target(config, before.sha, isolated=True)
        d = profiling.profile_pair(config, regime, b, a, regimes=regimes, duration=duration)
    except PerfctlError as exc:
        return ProfileLink(before, after, error=exc.message, seconds=duration)
    except OSError as exc:  # the reports folder cannot be written, say: never fatal
        return ProfileLink(before, after, error=f"{type(exc).__name__}: {exc}", seconds=duration)
    moved = [f for f in d.diff.functions if f.change != "same"][:5]
    movers = tuple(
        f"{f.where}: self time per op {_signed_us(f.delta_self_per_op_s)} ({f.change})"
        for f in moved
    )
    files = {
        "diff_svg": str(d.diff_svg),
        "diff_reverse_svg": str(d.diff_reverse_svg),
        "diff_json": str(d.diff_json),
    }
    return ProfileLink(before, after, files, movers, seconds=duration)


def _signed_us(seconds: float) -> str:
    return f"{seconds * 1e6:+.2f} µs"


# The callgrind link's files: ProfileLink key → the artefact key a comparison links.
_CALLGRIND_FILES = {
    "diff_svg": KEYS["flame"],
    "diff_reverse_svg": KEYS["reverse"],
    "functions_json": KEYS["functions"],
}


def callgrind_ends(
    config: Config,
    record: Bisection,
    ends: tuple[RefInfo, RefInfo],
    cs: CompareSettings,
    say: Progress,
) -> ProfileLink:
    """callgrind's differential of ``ends`` (before, after), never fatal: from the
    record's newest step of exactly those ends, else from a comparison measured now."""
    from perfctl.errors import PerfctlError
    from perfctl.jobs.compare import compare_refs

    before, after = ends
    try:
        found = _from_steps(config, record, before, after)
        if found is not None:
            say(
                f"profile: {record.regime} {before.short} → {after.short} (callgrind, {found.source})"
            )
            return found
        say(
            f"profile: {record.regime} {before.short} → {after.short} (callgrind, measured together)"
        )
        c = compare_refs(
            config, before.sha, after.sha, regimes=[record.regime], settings=cs, progress=say
        )
    except PerfctlError as exc:  # a build, a regime or the store: a line, never the answer
        return ProfileLink(before, after, error=exc.message)
    link = _link(config, c, record.regime, ends, "measured for this profile")
    return link or ProfileLink(before, after, error=_no_diff(c, record.regime))


def _no_diff(c: Comparison, regime: str) -> str:
    """Why comparison ``c`` links no instructions diff of ``regime``."""
    row = next((r for r in c.regimes if r.name == regime), None)
    if row is not None and (row.base_status != OK or row.head_status != OK):
        why = row.reason or "the regime did not run on both ends"
    else:
        why = "its call graphs could not be written or read"
    return f"no instructions diff in comparison {c.id}: {why}"


# Which of the record's comparisons measured the ends together, as a source names it.
_WHOSE = {
    StepKind.VERIFY: "the verification",
    StepKind.STEP: "a search step",
    StepKind.CONFIRM: "BAD vs GOOD",
}


def _from_steps(
    config: Config, record: Bisection, before: RefInfo, after: RefInfo
) -> ProfileLink | None:
    """The link from the newest stored comparison of a step of exactly these ends."""
    from perfctl.errors import StoreError
    from perfctl.store.local import open_store

    steps = [s for s in record.steps if (s.base.sha, s.commit.sha) == (before.sha, after.sha)]
    steps.sort(key=lambda s: s.kind != StepKind.VERIFY)  # the verification first
    store = open_store(config.state_dir, config.store_url)
    for step in steps:
        for cid in reversed(step.comparisons):
            try:
                c = store.load_comparison(cid)
            except StoreError:
                continue  # removed since: the next one, or measure anew
            whose = _WHOSE[step.kind]
            if link := _link(config, c, record.regime, (before, after), whose):
                return link
    return None


def _link(
    config: Config, c: Comparison, regime: str, ends: tuple[RefInfo, RefInfo], whose: str
) -> ProfileLink | None:
    """The diff ``c`` linked for ``regime`` as a link, or None when it has none."""
    from perfctl.profile.instruction_records import count, format_moves, load_diff

    row = next((r for r in c.regimes if r.name == regime), None)
    if row is None or _CALLGRIND_FILES["functions_json"] not in row.artifacts:
        return None
    files = {
        k: str(config.root / row.artifacts[a])  # stays as it is when stored absolute
        for k, a in _CALLGRIND_FILES.items()
        if a in row.artifacts
    }
    try:
        d = load_diff(Path(files["functions_json"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # moved or damaged since: no view from this comparison
    total = f"in all: {count(d.before_total)} → {count(d.after_total)}"
    source = f"comparison {c.id} ({whose}: both ends measured together)"
    return ProfileLink(*ends, files, (total, *format_moves(d)), source=source)
