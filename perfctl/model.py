"""Frozen result records shared by every stage, and their versioned JSON form.

Durations are always seconds per operation (``*_s``); reports convert to
µs/op or ms/op at render time. ``SCHEMA_VERSION`` history:

1. first format (runs, regime results, comparisons). Later additions are optional
   fields with defaults, so older files still load and older readers ignore them:
   ``Comparison.recomputed_from`` (the measured comparison a ``--from-store``
   recomputation re-decided; empty for a measurement); ``warning_kinds`` beside
   ``warnings`` (:mod:`perfctl.caveats`); ``pairing``, ``seconds`` and ``threshold`` (a
   regime's own noise band) of a result and a row.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from perfctl.caveats import Caveat, caveats, warning_fields
from perfctl.errors import StoreError

SCHEMA_VERSION = 1
_E = TypeVar("_E", bound="StrEnum")


class Verdict(StrEnum):
    """What a comparison says of one regime. Members are strings, so JSON stays plain."""

    REGRESSED = "regressed"
    IMPROVED = "improved"
    WITHIN_NOISE = "within noise"
    NO_CHANGE = "no change"
    INCONCLUSIVE = "inconclusive"
    FAILED = "failed"
    SKIPPED = "skipped"


class Status(StrEnum):
    """How measuring one regime on one ref ended."""

    OK = "ok"
    FAILED = "failed"
    SKIPPED = "skipped"


def finished_status(results: Iterable[RegimeResult]) -> str:
    """A finished run's status: ``failed`` when a regime failed, else ``complete``
    (the same word whichever command measured it)."""
    return "failed" if any(r.status == Status.FAILED for r in results) else "complete"


# The names every stage uses; verdicts in the order reports list them (worst first).
REGRESSED = Verdict.REGRESSED
IMPROVED = Verdict.IMPROVED
WITHIN_NOISE = Verdict.WITHIN_NOISE
NO_CHANGE = Verdict.NO_CHANGE
INCONCLUSIVE = Verdict.INCONCLUSIVE
FAILED = Verdict.FAILED  # equal to Status.FAILED: the same word for a regime and a verdict
SKIPPED = Verdict.SKIPPED
VERDICTS = (REGRESSED, FAILED, INCONCLUSIVE, IMPROVED, WITHIN_NOISE, NO_CHANGE, SKIPPED)
CHANGED_VERDICTS = (REGRESSED, IMPROVED, FAILED)
ON_CPU_CLOCKS = ("cpu", "busy")  # compare --clock: read lower than wall time when busy
OK = Status.OK


class SchemaMismatch(StoreError):
    """A stored record's ``schema`` is not one this perfctl reads (exit 2)."""


def check_schema(d: dict[str, Any], kind: str, current: int = SCHEMA_VERSION) -> None:
    """Refuse a record written by a newer perfctl, or with no valid schema number."""
    version = d.get("schema", current)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise SchemaMismatch(
            f"{kind} has schema {version!r}, not a version perfctl wrote",
            "the record is damaged or not perfctl's; set it aside",
        )
    if version > current:
        raise SchemaMismatch(
            f"{kind} has schema {version}, newer than this perfctl reads ({current})",
            "upgrade perfctl (pip install -U perfctl) to read it",
        )


class Notice(str):
    """A progress message worth a lasting stderr line, not only the spinner's text (lost
    when stderr is not a terminal); stages pass other progress as plain strings."""

    __slots__ = ()


class Fact(Notice):
    """A Notice true of every comparison a command makes (about the machine, or an
    environment it reuses as built): a command that makes many (``bisect``) says it once."""

    __slots__ = ()


@dataclass(frozen=True)
class Machine:
    """Where a measurement ran; ``id`` is a short hash of the stable fields."""

    id: str
    cpu_model: str
    cores: int
    memory_bytes: int
    kernel: str
    governor: str
    python: str
    hostname: str = ""
    gpus: tuple[str, ...] = ()  # "name, driver D, M MiB" per device (nvidia-smi)

    def describe(self) -> str:
        """One line for headers and PR comments."""
        gib = self.memory_bytes / 2**30
        gpus = f", GPU {'; '.join(self.gpus)}" if self.gpus else ""
        return (
            f"{self.cpu_model}, {self.cores} cores, {gib:.0f} GiB, "
            f"Linux {self.kernel}, governor {self.governor}, Python {self.python}{gpus}"
        )


@dataclass(frozen=True)
class RefInfo:
    """A resolved git ref (or the pseudo-ref WORKTREE)."""

    ref: str
    sha: str
    subject: str = ""
    date: str = ""  # ISO-8601: the committer date (a bisection's line: the author date)
    dirty: bool = False

    @property
    def short(self) -> str:
        """The 10-character sha, with '+dirty' for an edited working copy."""
        return self.sha[:10] + ("+dirty" if self.dirty else "")


@dataclass(frozen=True)
class RegimeInfo:
    """Static description of one expanded regime (as `perfctl list` shows it)."""

    name: str
    family: str
    params: dict[str, Any]
    ops: int
    baseline: str | None
    requires: tuple[str, ...]
    description: str
    source: str
    tags: tuple[str, ...] = ()
    timeout: float | None = None
    skip_reason: str | None = None
    clock: str = "wall"  # "device": the regime times itself (CUDA events); host time is a metric
    max_peak: int | None = None  # bytes: the regime's declared memory limit
    threshold: float | None = None  # the regime's own noise band (None: the comparison's)


@dataclass(frozen=True)
class RegimeResult:
    """Everything measured for one regime on one ref within one run.

    ``processes`` holds the per-op values of each worker process in the order
    they ran; ``order`` gives each process's global position in an interleaved
    comparison (so the ABBA schedule can be shown on hover).
    """

    name: str
    family: str
    status: Status
    ops: int = 1
    processes: tuple[tuple[float, ...], ...] = ()
    order: tuple[int, ...] = ()
    reason: str = ""
    log_path: str = ""
    pyperf_file: str = ""
    baseline: str | None = None
    description: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    loops: int = 0
    # What ``processes`` count: "s" (seconds per op, the default), "instructions/op"
    # or "blocks/op" (``--measure instructions|memory``, one value per process).
    unit: str = "s"
    clock: str = "wall"  # what timed the values: "wall", "device" (its own), "cpu"/"busy" (--clock)
    max_peak: int | None = None  # bytes: the regime's declared memory limit (RegimeInfo)
    threshold: float | None = None  # its declared noise band (RegimeInfo)
    # How the values were measured: "process" (each ref in its own worker processes) or
    # "same-process" (both refs in every worker); "" in records older than the field.
    pairing: str = ""
    # Wall seconds spent measuring it (a comparison: both refs, one figure); 0: unknown.
    seconds: float = 0.0

    @property
    def values(self) -> tuple[float, ...]:
        """Every raw per-op value, all processes pooled."""
        return tuple(v for proc in self.processes for v in proc)


@dataclass(frozen=True)
class Run:
    """One measurement session of one ref: provenance plus its regime results."""

    id: str
    project: str
    ref: RefInfo
    machine: Machine
    started: str
    finished: str = ""
    status: str = "running"  # running | complete | failed | interrupted
    settings: dict[str, Any] = field(default_factory=dict)
    python_version: str = ""
    perfctl_version: str = ""
    pyperf_version: str = ""
    results: tuple[RegimeResult, ...] = ()
    schema: int = SCHEMA_VERSION


@dataclass(frozen=True)
class SideStats:
    """Summary of one ref's values for one regime (process = unit)."""

    median_s: float
    q1_s: float
    q3_s: float
    ci_low_s: float
    ci_high_s: float
    cv: float
    n_processes: int
    baseline_ratio: float | None = None


@dataclass(frozen=True)
class RegimeComparison:
    """The verdict for one regime between base and head."""

    name: str
    family: str
    verdict: Verdict
    reason: str = ""
    description: str = ""
    base: SideStats | None = None
    head: SideStats | None = None
    change: float | None = None  # Hodges-Lehmann: median head/base ratio of process means - 1
    ci_low: float | None = None  # CI of the relative change
    ci_high: float | None = None
    p_value: float | None = None
    p_adjusted: float | None = None
    base_status: Status = OK
    head_status: Status = OK
    base_values: tuple[tuple[float, ...], ...] = ()
    head_values: tuple[tuple[float, ...], ...] = ()
    base_order: tuple[int, ...] = ()
    head_order: tuple[int, ...] = ()
    baseline: str | None = None
    metrics_base: dict[str, float] = field(default_factory=dict)
    metrics_head: dict[str, float] = field(default_factory=dict)
    artifacts: dict[str, str] = field(default_factory=dict)  # e.g. flamegraph paths
    unit: str = "s"  # of the values and SideStats "*_s" figures: see RegimeResult.unit
    clock: str = "wall"
    max_peak: int | None = None  # head's declared memory limit, bytes
    over_limit: str = ""  # why head is over max_peak (only --measure memory can tell)
    threshold: float | None = None  # head's declared noise band: judged on it, not the comparison's
    pairing: str = ""  # the pairing the verdict's test assumed (RegimeResult.pairing)
    seconds: float = 0.0  # wall seconds spent measuring it (RegimeResult.seconds); 0: unknown


@dataclass(frozen=True)
class Comparison:
    """A stored comparison of two refs; the input of report, plan and comment."""

    id: str
    created: str
    base: RefInfo
    head: RefInfo
    machine: Machine
    regimes: tuple[RegimeComparison, ...]
    settings: dict[str, Any] = field(default_factory=dict)
    threshold: float = 0.01  # stats.band.DEFAULT_BAND (the model sits below stats)
    alpha: float = 0.05
    correction: str = "benjamini-hochberg"
    commits: tuple[RefInfo, ...] = ()  # commits in base..head, newest first
    warnings: tuple[Caveat, ...] = ()  # with their kinds: ``warning_kinds`` in the JSON
    base_run: str = ""
    head_run: str = ""
    head_machine: Machine | None = None
    # The measured comparison this one re-decides (`compare --from-store`); with
    # `--mix-runs`, the two comparisons its runs came from, joined by "+".
    recomputed_from: str = ""
    schema: int = SCHEMA_VERSION

    @property
    def measured(self) -> bool:
        """Whether this comparison was measured (both sides interleaved), not recomputed."""
        # Older perfctl marked recomputations only with settings.from_store.
        return not (self.recomputed_from or self.settings.get("from_store"))

    def counts(self) -> dict[str, int]:
        """Number of regimes per verdict, every verdict present (maybe 0)."""
        out: dict[str, int] = {v: 0 for v in VERDICTS}
        for r in self.regimes:
            out[r.verdict] = out.get(r.verdict, 0) + 1
        return out

    def sorted_regimes(self) -> list[RegimeComparison]:
        """Regimes worst first (regressions, failures, ...), then by name."""
        rank = {v: i for i, v in enumerate(VERDICTS)}
        return sorted(self.regimes, key=lambda r: (rank.get(r.verdict, 99), r.name))


def to_dict(obj: Any) -> Any:
    """A JSON-ready dict of a record (tuples become lists; warning kinds beside the texts)."""
    d = dataclasses.asdict(obj)
    return {**d, **warning_fields(obj.warnings)} if isinstance(obj, Comparison) else d


def _build(cls: type, data: dict[str, Any]) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}  # fields a newer writer added are dropped
    return cls(**{key: value for key, value in data.items() if key in names})


def machine_from_dict(d: dict[str, Any]) -> Machine:
    """Rebuild a Machine."""
    d = dict(d)
    d["gpus"] = tuple(d.get("gpus") or ())
    return _build(Machine, d)


def ref_from_dict(d: dict[str, Any]) -> RefInfo:
    """Rebuild a RefInfo."""
    return _build(RefInfo, d)


def _enum(cls: type[_E], value: Any, what: str) -> _E:
    try:
        return cls(value)
    except ValueError:
        shown = repr(str(value)[:40])  # repr keeps control characters inert
        raise StoreError(
            f"unknown {what} {shown} in a stored record",
            f"expected one of: {', '.join(m.value for m in cls)}",
        ) from None


def _tuples(rows: Any) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(float(v) for v in row) for row in rows or ())


def result_from_dict(d: dict[str, Any]) -> RegimeResult:
    """Rebuild a RegimeResult."""
    d = dict(d)
    d["status"] = _enum(Status, d["status"], "regime status")
    d["processes"] = _tuples(d.get("processes"))
    d["order"] = tuple(d.get("order") or ())
    return _build(RegimeResult, d)


def run_from_dict(d: dict[str, Any]) -> Run:
    """Rebuild a Run from its JSON form (its schema checked first)."""
    check_schema(d, "run")
    d = dict(d)
    d["ref"] = ref_from_dict(d["ref"])
    d["machine"] = machine_from_dict(d["machine"])
    d["results"] = tuple(result_from_dict(r) for r in d.get("results", ()))
    return _build(Run, d)


def regime_comparison_from_dict(d: dict[str, Any]) -> RegimeComparison:
    """Rebuild a RegimeComparison."""
    d = dict(d)
    d["verdict"] = _enum(Verdict, d["verdict"], "verdict")
    for key in ("base_status", "head_status"):
        if key in d:
            d[key] = _enum(Status, d[key], "regime status")
    for key in ("base", "head"):
        d[key] = None if d.get(key) is None else _build(SideStats, d[key])
    for key in ("base_values", "head_values"):
        d[key] = _tuples(d.get(key))
    for key in ("base_order", "head_order"):
        d[key] = tuple(d.get(key) or ())
    return _build(RegimeComparison, d)


def comparison_from_dict(d: dict[str, Any]) -> Comparison:
    """Rebuild a Comparison from its JSON form (its schema checked first)."""
    check_schema(d, "comparison")
    d = dict(d)
    d["base"] = ref_from_dict(d["base"])
    d["head"] = ref_from_dict(d["head"])
    d["machine"] = machine_from_dict(d["machine"])
    if d.get("head_machine"):
        d["head_machine"] = machine_from_dict(d["head_machine"])
    d["regimes"] = tuple(regime_comparison_from_dict(r) for r in d.get("regimes", ()))
    d["commits"] = tuple(ref_from_dict(c) for c in d.get("commits", ()))
    d["warnings"] = caveats(d.get("warnings", ()), d.get("warning_kinds") or ())
    return _build(Comparison, d)
