"""The records a profile leaves behind: ``summary.json`` and ``diff.json``.

:class:`ProfileSummary` (one regime on one ref) and :class:`DiffSummary` (two
refs, per operation) are frozen dataclasses saved as versioned JSON; their
docstrings are the schema the HTML report reads. ``format_*`` functions turn
them into the lines ``perfctl profile`` prints. Schema history (both files):

1. first format.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfctl.caveats import Caveat, WarningKind, caveats, warning_fields
from perfctl.config import Config
from perfctl.model import RefInfo, check_schema, ref_from_dict
from perfctl.profile.hotspots import Hotspot, TreeEntry, format_time, format_tree, signed_time
from perfctl.profile.stackdiff import FunctionDelta, MovedStep, NodeDelta

SUMMARY_SCHEMA = 1
DIFF_SCHEMA = 1


@dataclass(frozen=True)
class ProfileSummary:
    """What dominates one regime on one ref; saved as ``summary.json``.

    JSON schema (version 1; times are seconds, shares are fractions of the
    regime's samples)::

        {"schema": 1, "kind": "perfctl-profile", "regime": str,
         "ref": {"ref", "sha", "subject", "date", "dirty"},
         "created": ISO-8601, "settings": {"duration_s", "rate_hz", "native",
         "subprocesses", "idle", "gil", "nolineno"},
         "ops": int, "calls": int, "elapsed_s": float, "interrupted": bool,
         "wall_per_op_s": float,             # elapsed_s / ops
         "cpu_s": float,                     # the worker process's CPU time in the loop
         "wait_s": float,                    # the loop's wait for a CPU (busy machine)
         "per_op_s": float,                  # (elapsed_s - wait_s) / ops: the tree's total
         "samples": int, "errors": int,      # py-spy's own count, all phases
         "regime_samples": int,              # below the loop + threads + subprocesses
         "outside_samples": int,             # start-up, set-up, teardown
         "coverage": float,                  # regime sampled s / elapsed_s
         "top_self": [Hotspot], "top_inclusive": [Hotspot],
         "tree": TreeEntry | null,           # under the regime's entry point
         "files": {"flame_svg", "speedscope", "collapsed", "summary"},
         "warnings": [str], "warning_kinds": [str]}   # same order: perfctl.caveats
        Hotspot   = {"function", "file", "where", "share", "per_op_s", "samples"}
        TreeEntry = {"function", "file", "share", "per_op_s", "self_per_op_s",
                     "children": [TreeEntry]}

    ``per_op_s = share × (elapsed_s - wait_s) / ops``: a function's share of the
    sampled regime time spread over the loop's wall time per operation, less the
    time the loop sat runnable while the machine ran other work (so a busy machine
    does not inflate every figure); the tree's root sums to ``per_op_s``.
    """

    regime: str
    ref: RefInfo
    created: str
    settings: dict[str, Any]
    ops: int
    calls: int
    elapsed_s: float
    wall_per_op_s: float
    samples: int
    errors: int
    regime_samples: int
    outside_samples: int
    coverage: float
    top_self: tuple[Hotspot, ...]
    top_inclusive: tuple[Hotspot, ...]
    tree: TreeEntry | None
    files: dict[str, str] = field(default_factory=dict)
    warnings: tuple[Caveat, ...] = ()  # with their kinds: ``warning_kinds`` in the JSON
    interrupted: bool = False
    cpu_s: float = 0.0
    wait_s: float = 0.0
    per_op_s: float = 0.0
    schema: int = SUMMARY_SCHEMA
    kind: str = "perfctl-profile"


def _hotspot_dict(h: Hotspot) -> dict[str, Any]:
    return {**dataclasses.asdict(h), "where": h.where}


def summary_to_dict(s: ProfileSummary) -> dict[str, Any]:
    """The JSON-ready form of a summary (see :class:`ProfileSummary`)."""
    out = dataclasses.asdict(s)
    out["top_self"] = [_hotspot_dict(h) for h in s.top_self]
    out["top_inclusive"] = [_hotspot_dict(h) for h in s.top_inclusive]
    return {**out, **warning_fields(s.warnings)}


def _hotspot(d: dict[str, Any]) -> Hotspot:
    return Hotspot(
        str(d["function"]),
        str(d["file"]),
        float(d["share"]),
        float(d["per_op_s"]),
        int(d["samples"]),
    )


def _entry(d: dict[str, Any]) -> TreeEntry:
    return TreeEntry(
        str(d["function"]),
        str(d["file"]),
        float(d["share"]),
        float(d["per_op_s"]),
        float(d["self_per_op_s"]),
        tuple(_entry(c) for c in d.get("children", ())),
    )


def _check_record(d: Any, kind: str, current: int) -> None:
    """A profile record of this kind that this perfctl can read (schema checked as the store's)."""
    if not isinstance(d, dict) or d.get("kind", kind) != kind:
        raise ValueError(f"not a {kind} record")
    check_schema(d, kind, current)


def summary_from_dict(d: dict[str, Any]) -> ProfileSummary:
    """Rebuild a summary from its JSON form (its kind and schema checked first)."""
    _check_record(d, "perfctl-profile", SUMMARY_SCHEMA)
    names = {f.name for f in dataclasses.fields(ProfileSummary)}
    kwargs = {k: v for k, v in d.items() if k in names}
    kwargs["ref"] = ref_from_dict(d["ref"])
    kwargs["top_self"] = tuple(_hotspot(h) for h in d.get("top_self", ()))
    kwargs["top_inclusive"] = tuple(_hotspot(h) for h in d.get("top_inclusive", ()))
    kwargs["tree"] = _entry(d["tree"]) if d.get("tree") else None
    kwargs["warnings"] = caveats(d.get("warnings", ()), d.get("warning_kinds") or ())
    return ProfileSummary(**kwargs)


def format_hotspots(title: str, rows: tuple[Hotspot, ...]) -> list[str]:
    """A titled table: share, time per op, samples, file:function."""
    lines = [title, f"  {'share':>6}  {'per op':>10}  {'samples':>7}  function"]
    for h in rows:
        lines.append(f"  {h.share:>6.1%}  {format_time(h.per_op_s):>10}  {h.samples:>7}  {h.where}")
    return lines


def _waited(s: ProfileSummary) -> str:
    if s.wait_s <= 0.01 * s.elapsed_s:
        return ""
    return f", not counting {s.wait_s:.2f} s of waiting for a busy CPU"


def format_summary(s: ProfileSummary, limit: int = 10) -> list[str]:
    """The human-readable report of one profile (what dominates, then files)."""
    ref = s.ref.ref + (f" ({s.ref.short})" if s.ref.sha else "")
    lines = [
        f"Profile of {s.regime} on {ref}",
        f"  {s.elapsed_s:.2f} s looped, {s.calls:,} calls = {s.ops:,} ops, "
        f"{format_time(s.per_op_s)}/op{_waited(s)} (profiled: never quote as a timing)",
        f"  {s.samples:,} samples at {s.settings.get('rate_hz')} Hz, {s.errors} errors; "
        f"{s.regime_samples:,} in the regime, {s.outside_samples:,} in start-up/set-up",
        "",
        *format_hotspots("Top functions by self time", s.top_self[:limit]),
        "",
        *format_hotspots("Top functions by inclusive time", s.top_inclusive[:limit]),
    ]
    if s.tree is not None:
        lines += ["", "Call tree under the regime's entry point", *format_tree(s.tree)]
    return lines


# -- diffs (diff.json) ---------------------------------------------------------


@dataclass(frozen=True)
class DiffSide:
    """One side of a diff: its ref, its summary file and its per-op totals."""

    ref: RefInfo
    summary: str
    ops: int
    elapsed_s: float
    wall_per_op_s: float
    regime_samples: int
    cpu_per_op_s: float = 0.0
    per_op_s: float = 0.0


@dataclass(frozen=True)
class DiffSummary:
    """A before/after profile comparison; saved as ``diff.json``.

    JSON schema (version 1; all times are seconds per operation)::

        {"schema": 1, "kind": "perfctl-profile-diff", "regime": str, "created": str,
         "before": DiffSide, "after": DiffSide,
         "functions": [{"function", "file", "where", "before_self_per_op_s",
                        "after_self_per_op_s", "before_inclusive_per_op_s",
                        "after_inclusive_per_op_s", "delta_self_per_op_s",
                        "change"}],            # biggest |delta_self| first
         "moved": {"before_per_op_s", "after_per_op_s",
                   "steps": [{"label", "path", "before_per_op_s", "after_per_op_s",
                              "delta_per_op_s"}]},   # deltas sum to after - before
         "nodes": [{"path", "before_inclusive_per_op_s", "after_inclusive_per_op_s",
                    "before_self_per_op_s", "after_self_per_op_s",
                    "delta_self_per_op_s", "change", "fill"}],
         "files": {"diff_svg", "diff_reverse_svg", "diff_json"},
         "warnings": [str], "warning_kinds": [str]}   # same order: perfctl.caveats
        DiffSide = {"ref": {...}, "summary": path, "ops", "elapsed_s",
                    "wall_per_op_s", "regime_samples", "cpu_per_op_s", "per_op_s"}

    ``change`` is ``grew``/``shrank``/``new``/``removed``, or ``same`` within
    1% of the larger total per op; ``fill`` is the node's colour (red grew,
    blue shrank).
    """

    regime: str
    created: str
    before: DiffSide
    after: DiffSide
    functions: tuple[FunctionDelta, ...]
    steps: tuple[MovedStep, ...]
    nodes: tuple[NodeDelta, ...]
    files: dict[str, str] = field(default_factory=dict)
    warnings: tuple[Caveat, ...] = ()  # with their kinds: ``warning_kinds`` in the JSON
    schema: int = DIFF_SCHEMA
    kind: str = "perfctl-profile-diff"


def load_warning(before: DiffSide, after: DiffSide) -> tuple[Caveat, ...]:
    """Warn when time and CPU time per op moved apart: the machine's load changed."""
    if not (before.cpu_per_op_s and after.cpu_per_op_s and before.per_op_s):
        return ()
    time_ratio = after.per_op_s / before.per_op_s
    cpu = after.cpu_per_op_s / before.cpu_per_op_s
    if 1 / LOAD_TOLERANCE <= time_ratio / cpu <= LOAD_TOLERANCE:
        return ()
    return (
        Caveat(
            f"time per op changed {time_ratio - 1:+.0%} but the worker's CPU time per op "
            f"{cpu - 1:+.0%}: the regime waits differently, or the machine's load changed "
            "between the two runs (shares are still comparable)",
            WarningKind.LOAD_CHANGED,
        ),
    )


LOAD_TOLERANCE = 1.25  # time vs CPU time per op ratio that makes the diff warn


def diff_to_dict(d: DiffSummary) -> dict[str, Any]:
    """The JSON-ready form of a diff (see :class:`DiffSummary`)."""
    out = dataclasses.asdict(d)
    out.pop("steps")
    out["functions"] = [{**dataclasses.asdict(f), "where": f.where} for f in d.functions]
    out["moved"] = {
        "before_per_op_s": d.before.per_op_s,
        "after_per_op_s": d.after.per_op_s,
        "steps": [{**dataclasses.asdict(s), "delta_per_op_s": s.delta_per_op_s} for s in d.steps],
    }
    return {**out, **warning_fields(d.warnings)}


def _only(cls: type, data: dict[str, Any]) -> Any:
    return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})


def diff_from_dict(d: dict[str, Any]) -> DiffSummary:
    """Rebuild a diff from its JSON form (its kind and schema checked first)."""
    _check_record(d, "perfctl-profile-diff", DIFF_SCHEMA)
    sides = {
        k: DiffSide(**{**d[k], "ref": ref_from_dict(d[k]["ref"])}) for k in ("before", "after")
    }
    steps = tuple(
        MovedStep(s["label"], tuple(s["path"]), s["before_per_op_s"], s["after_per_op_s"])
        for s in d["moved"]["steps"]
    )
    nodes = tuple(_only(NodeDelta, {**n, "path": tuple(n["path"])}) for n in d["nodes"])
    return DiffSummary(
        d["regime"],
        d["created"],
        sides["before"],
        sides["after"],
        tuple(_only(FunctionDelta, f) for f in d["functions"]),
        steps,
        nodes,
        dict(d.get("files", {})),
        caveats(d.get("warnings", ()), d.get("warning_kinds") or ()),
        d.get("schema", DIFF_SCHEMA),
    )


def _pct(before: float, after: float) -> str:
    return f"{after / before - 1:+.0%}" if before > 0 else "new"


def format_diff(d: DiffSummary, limit: int = 10) -> list[str]:
    """The human-readable report of a diff: totals, movers, where the time moved."""
    b, a = d.before, d.after
    lines = [
        f"Profile diff of {d.regime}: before {b.ref.ref} ({b.ref.short}) → after "
        f"{a.ref.ref} ({a.ref.short})",
        f"  time per op (profiled): {format_time(b.per_op_s)} → "
        f"{format_time(a.per_op_s)} ({_pct(b.per_op_s, a.per_op_s)})",
        "",
        "Functions whose self time per op moved most",
        f"  {'before':>10}  {'after':>10}  {'change':>11}  function",
    ]
    for f in [f for f in d.functions if f.change != "same"][:limit]:
        lines.append(
            f"  {format_time(f.before_self_per_op_s):>10}  "
            f"{format_time(f.after_self_per_op_s):>10}  "
            f"{signed_time(f.delta_self_per_op_s):>11}  {f.where} ({f.change})"
        )
    if all(f.change == "same" for f in d.functions):
        lines.append("  (no function moved by more than 1% of the time per op)")
    lines += [
        "",
        "Where the time moved (inclusive time per op)",
        f"  {'before':>10}  {'after':>10}  {'change':>11}  node",
    ]
    for s in d.steps:
        lines.append(
            f"  {format_time(s.before_per_op_s):>10}  "
            f"{format_time(s.after_per_op_s):>10}  "
            f"{signed_time(s.delta_per_op_s):>11}  {s.label}"
        )
    return lines


# -- where things live ---------------------------------------------------------


def slug(text: str) -> str:
    """A file-name-safe form of a regime or ref name (``echo[size=64]`` -> ``echo-size=64``)."""
    return re.sub(r"[^A-Za-z0-9._=+-]+", "-", text).strip("-.") or "unnamed"


def ref_dir(ref: RefInfo) -> str:
    """A branch/tag name as itself; expressions (HEAD~1) and shas as the short sha."""
    name = ref.ref
    stable = (
        re.fullmatch(r"[A-Za-z0-9._/-]+", name)
        and name != "HEAD"
        and not (ref.sha and ref.sha.startswith(name.lower()))
    )
    return slug(name) if stable or not ref.sha else ref.sha[:10]


def profile_dir(config: Config, regime: str, ref: RefInfo) -> Path:
    """``<reports>/profiles/<regime>/<ref>``: the one place a profile lives."""
    return config.reports_dir / "profiles" / slug(regime) / ref_dir(ref)


def diff_dir(config: Config, regime: str, before: RefInfo, after: RefInfo) -> Path:
    """``<reports>/profiles/<regime>/<before>-vs-<after>``."""
    return (
        config.reports_dir
        / "profiles"
        / slug(regime)
        / (f"{ref_dir(before)}-vs-{ref_dir(after)}".replace("/", "-"))
    )


def load_summary(path: Path) -> ProfileSummary:
    """Read a ``summary.json`` (or the folder holding it)."""
    path = path / "summary.json" if path.is_dir() else path
    return summary_from_dict(json.loads(path.read_text(encoding="utf-8")))


def load_diff(path: Path) -> DiffSummary:
    """Read a ``diff.json`` (or the folder holding it)."""
    path = path / "diff.json" if path.is_dir() else path
    return diff_from_dict(json.loads(path.read_text(encoding="utf-8")))
