"""Warnings carry their kind from where they are made (equality is the text's, so every
check here asserts the kind itself)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from perfctl.caveats import Caveat, WarningKind, caveats, kind_of
from perfctl.jobs import results
from perfctl.measure.quiet import Quiet
from perfctl.model import IMPROVED, REGRESSED, RefInfo, RegimeComparison
from perfctl.profile.records import DiffSide, load_warning
from tests.test_store import comparison


def test_each_comparison_warning_is_made_with_its_kind() -> None:
    c = comparison("20260101T000000-cccccc", "2026-01-01")
    busy = results.with_load(c, [(3.5, 2), (1.0, 2)])
    assert [kind_of(w) for w in busy.warnings] == [WarningKind.BUSY_MACHINE]
    held = results.with_quiet(c, Quiet(limit=10, held=12.0, rounds=3, busiest=1.6))
    assert [kind_of(w) for w in held.warnings] == [WarningKind.HELD_FOR_BURSTS]
    limited = replace(
        c,
        regimes=(
            replace(c.regimes[0], max_peak=1000, over_limit="peak 2 kB is over max_peak 1 kB"),
        ),
    )
    assert [kind_of(w) for w in results.with_limits(limited).warnings] == [
        WarningKind.OVER_LIMIT,
        WarningKind.LIMIT_NOT_CHECKED,  # a time comparison cannot check a memory limit
    ]
    flagged = replace(c, regimes=(RegimeComparison("r", "f", REGRESSED),))
    again = {"r": RegimeComparison("r", "f", IMPROVED)}
    confirmed = results.with_confirmed(flagged, again)
    assert [kind_of(w) for w in confirmed.warnings] == [WarningKind.CONFIRMED]
    assert confirmed.regimes[0].reason == "regression not confirmed on re-measure (improved)"


def test_a_diff_whose_time_and_cpu_time_moved_apart_warns_with_its_kind() -> None:
    def side(per_op: float, cpu: float) -> DiffSide:
        return DiffSide(RefInfo("a", "1"), "s.json", 10, 1.0, per_op, 100, cpu, per_op)

    (said,) = load_warning(side(1.0, 1.0), side(2.0, 1.0))
    assert said.kind == WarningKind.LOAD_CHANGED
    assert load_warning(side(1.0, 1.0), side(2.0, 2.0)) == ()


def test_a_caveat_is_frozen_and_bad_kinds_read_as_other() -> None:
    w = Caveat("text", WarningKind.BUSY_MACHINE)
    with pytest.raises(AttributeError):
        del w.kind
    assert kind_of(w) == WarningKind.BUSY_MACHINE and kind_of("plain") == WarningKind.OTHER
    # An optional field never costs its record: anything odd in it reads as "other".
    for kinds in (5, None, [[1]], ["busy-machine", 7], "busy-machine"):
        got = caveats(["a", "b"], kinds)
        assert [str(g) for g in got] == ["a", "b"]
        assert got[1].kind == WarningKind.OTHER
