"""Several signals side by side: which signal flags a regime (pure logic; the
end-to-end run is ``test_counters.py::test_compare_several_signals_one_verdict_each``)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from perfctl.caveats import Caveat
from perfctl.cli.measure import Measure
from perfctl.cli.signals import parse_measures
from perfctl.errors import UsageError
from perfctl.model import (
    IMPROVED,
    INCONCLUSIVE,
    NO_CHANGE,
    REGRESSED,
    Comparison,
    Machine,
    RefInfo,
    RegimeComparison,
    Verdict,
)
from perfctl.render.signals import signals_json, signals_markdown
from perfctl.stats.signals import notes, side_by_side

MACHINE = Machine("m", "cpu", 2, 2**30, "6", "none", "3.11")


def _comparison(measure: str, verdicts: dict[str, Verdict], threshold: float) -> Comparison:
    rows = tuple(
        RegimeComparison(name, "fam", v, change=0.1 if v == REGRESSED else 0.0)
        for name, v in verdicts.items()
    )
    return Comparison(
        f"id-{measure}", "now", RefInfo("main", "1" * 40), RefInfo("pr", "2" * 40), MACHINE,
        rows, settings={"measure": measure}, threshold=threshold,
    )  # fmt: skip


SIGNALS = (
    _comparison("time", {"a": NO_CHANGE, "b": REGRESSED, "c": REGRESSED, "d": IMPROVED}, 0.02),
    _comparison(
        "instructions", {"a": NO_CHANGE, "b": REGRESSED, "c": NO_CHANGE, "d": REGRESSED}, 0.005
    ),
    _comparison("memory", {"b": REGRESSED, "c": INCONCLUSIVE, "e": REGRESSED}, 0.005),
)


def test_each_cell_is_its_own_signals_verdict() -> None:
    rows = {r.name: r for r in side_by_side(SIGNALS)}
    assert [c.measure for c in rows["b"].cells if c] == ["time", "instructions", "memory"]
    assert rows["a"].cells[2] is None  # memory did not have regime a
    cell = rows["e"].cells[2]
    assert rows["e"].cells[0] is None and cell is not None and cell.verdict == REGRESSED


def test_a_regime_flagged_by_some_signals_says_which() -> None:
    said = notes(side_by_side(SIGNALS))
    assert said == [
        "c: regressed by time only (instructions: no change, memory: inconclusive)",
        "d: the signals disagree: time improved, instructions regressed",
    ]  # a: nothing flagged; b: all agree; e: the only signal that has it flags it


def test_json_and_markdown_carry_every_signal() -> None:
    data = json.loads(signals_json(SIGNALS))
    assert data["kind"] == "perfctl-signals" and data["schema"] == 1
    assert data["signals"] == ["time", "instructions", "memory"]
    by = {r["regime"]: r for r in data["regimes"]}
    assert by["c"]["flagged_by"] == ["time"] and by["c"]["verdicts"]["memory"] == "inconclusive"
    assert [c["id"] for c in data["comparisons"]] == ["id-time", "id-instructions", "id-memory"]
    md = signals_markdown(SIGNALS)
    assert "| Regime | time (±2%) | instructions (±0.5%) | memory (±0.5%) |" in md
    assert "| b | +10.0% regressed | +10.0% regressed | +10.0% regressed |" in md
    assert "| a | +0.0% no change | +0.0% no change | — |" in md


def test_a_row_on_its_own_band_says_so_under_the_columns_band() -> None:
    """The time column's heading names the comparison's ±2%; a regime that declared ±10%
    says its own band in its cell (and the JSON), the counters' cells do not."""
    time = _comparison("time", {"pipe": NO_CHANGE, "work": NO_CHANGE, "same": NO_CHANGE}, 0.02)
    bands = {"pipe": 0.10, "same": 0.02}  # "same" declared the comparison's own band
    rows = tuple(dataclasses.replace(r, threshold=bands.get(r.name)) for r in time.regimes)
    signals = (dataclasses.replace(time, regimes=rows), SIGNALS[1])
    md = signals_markdown(signals)
    assert "| time (±2%) | instructions (±0.5%) |" in md
    assert "| pipe | +0.0% no change (own band ±10%) | — |" in md
    assert "| work | +0.0% no change | — |" in md
    assert "| same | +0.0% no change | — |" in md
    body = json.loads(signals_json(signals))
    own = {r["regime"]: r["own_bands"] for r in body["regimes"]}
    assert own["pipe"] == {"time": 0.10} and own["work"] == own["same"] == own["a"] == {}


def test_measure_lists_are_parsed_strictly() -> None:
    assert parse_measures("time") == (Measure.time,)
    assert parse_measures(" time, instructions,time") == (Measure.time, Measure.instructions)
    for bad in ("", "time,cycles", ","):
        with pytest.raises(UsageError, match="--measure takes"):
            parse_measures(bad)


def test_a_big_signals_comment_fits_githubs_limit() -> None:
    from perfctl.render.comment import CommentOptions, github_length
    from perfctl.render.signals import signals_comment

    names = {f"regime_{i:04d}_{'x' * 120}": REGRESSED for i in range(600)}
    steady = {n: NO_CHANGE for n in names}
    big = (_comparison("time", names, 0.02), _comparison("memory", steady, 0.005))
    body = signals_comment(big, CommentOptions())
    assert github_length(body) <= CommentOptions().budget
    assert body.count("<!-- perfctl") == 1 and "more rows omitted" in body
    small = signals_comment(SIGNALS, CommentOptions())
    table = small.split("<details>", 1)[0]
    assert "more rows omitted" not in table and "| a |" not in table  # unchanged everywhere
    assert "| c |" in table and "_1 regime changed in no signal._" in table


def test_a_hostile_signals_comment_is_cut_to_fit() -> None:
    # Warnings, refs and names far longer than anything perfctl writes (a fork's file).
    from dataclasses import replace

    from perfctl.render.comment import CommentOptions, github_length
    from perfctl.render.signals import signals_comment

    huge = (Caveat("&" * 200),) * 300
    big = tuple(
        replace(c, warnings=huge, base=RefInfo("&" * 5000, "1" * 40, subject="&" * 5000))
        for c in SIGNALS
    )
    body = signals_comment(big, CommentOptions())
    assert github_length(body) <= CommentOptions().budget
    assert body.startswith("<!-- perfctl:comment -->") and body.count("<!-- perfctl") == 1


def test_a_body_too_long_even_at_its_shortest_is_cut_at_a_line() -> None:
    from perfctl.render.comment import fit, github_length

    assert fit("short\n", 100) == "short\n"
    cut = fit("<!-- m -->\n" + "a line of text\n" * 10_000, 1000)
    assert github_length(cut) <= 1000 and cut.startswith("<!-- m -->\na line of text\n")
    assert cut.endswith("see the report._\n") and "a line of tex\n" not in cut
