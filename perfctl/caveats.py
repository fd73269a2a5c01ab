"""Warnings of a record (a comparison, a profile): the text every output shows, and its kind.

A warning is a ``str`` (every renderer and escaper takes it as it always did) with a
:class:`WarningKind`; a record's JSON keeps ``warnings`` as the texts and adds
``warning_kinds`` beside them, so readers of either version read both.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum


class WarningKind(StrEnum):
    """What a warning of a comparison or a profile is about: ``warning_kinds`` in the record's
    JSON, beside the texts."""

    BUSY_MACHINE = "busy-machine"  # the load average was above the CPU count
    HELD_FOR_BURSTS = "held-for-bursts"  # --burst-wait held rounds (or could not)
    OVER_LIMIT = "over-limit"  # a regime's peak memory is over its max_peak
    LIMIT_NOT_CHECKED = "limit-not-checked"  # max_peak declared, memory not measured
    CONFIRMED = "confirmed"  # --confirm re-measured the flagged regimes
    MEASURED_APART = "measured-apart"  # --mix-runs: the sides come from two sessions
    MACHINES_DIFFER = "machines-differ"  # sides (or shards) ran on different machines
    PLACEMENT_DIFFERS = "placement-differs"  # workers pinned differently (--affinity)
    # A profile's (summary.json, diff.json):
    SAMPLING_ERRORS = "sampling-errors"  # py-spy reported errors
    SAMPLER_BEHIND = "sampler-behind"  # py-spy fell behind its rate
    LOW_COVERAGE = "low-coverage"  # the regime was on CPU for under half its loop time
    FEW_SAMPLES = "few-samples"  # too few samples for the shares to hold
    STOPPED_EARLY = "stopped-early"  # the loop was interrupted
    LOAD_CHANGED = "load-changed"  # time and CPU time per op moved apart between sides
    OTHER = "other"  # stored before kinds were, or a kind this perfctl does not know


class Caveat(str):
    """One warning of a comparison or a profile: the text every output shows, and its ``kind``.

    A ``str``, so every renderer and escaper takes it as the text it always was;
    the kind travels beside it (``to_dict`` writes ``warning_kinds``). Equality and hashing
    are the text's (two warnings saying the same are one), and ``Caveat(text)`` of another
    Caveat starts again at ``other``: give the kind.
    """

    kind: WarningKind

    def __new__(cls, text: str, kind: WarningKind = WarningKind.OTHER) -> Caveat:
        self = super().__new__(cls, text)
        object.__setattr__(self, "kind", WarningKind(kind))
        return self

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a Caveat is frozen: cannot set {name}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a Caveat is frozen: cannot delete {name}")

    def __getnewargs__(self) -> tuple[str, WarningKind]:  # type: ignore[override]
        return str(self), self.kind

    def __repr__(self) -> str:
        return f"Caveat({str(self)!r}, {self.kind.value!r})"


def kind_of(warning: str) -> WarningKind:
    """A warning's kind: a Caveat's own, else ``other``."""
    return warning.kind if isinstance(warning, Caveat) else WarningKind.OTHER


def caveats(texts: Iterable[str], kinds: object) -> tuple[Caveat, ...]:
    """Warnings rebuilt from a record's ``warnings`` and ``warning_kinds`` (missing or
    unknown kinds are ``other``)."""
    # An optional field: anything but a list of known names reads as "other" rather than
    # costing the whole record (the hostile-input check refuses worse before this).
    given = list(kinds) if isinstance(kinds, list | tuple) else []
    known = {k.value: k for k in WarningKind}
    return tuple(
        Caveat(
            t,
            known.get(given[i], WarningKind.OTHER)
            if i < len(given) and isinstance(given[i], str)
            else WarningKind.OTHER,
        )
        for i, t in enumerate(texts)
    )


def warning_fields(warnings: Iterable[str]) -> dict[str, list[str]]:
    """``warnings`` (the texts) and ``warning_kinds`` (the same order) of a record's JSON."""
    warnings = list(warnings)
    return {"warnings": [str(w) for w in warnings], "warning_kinds": [kind_of(w) for w in warnings]}
