"""Callgrind call graphs: parsing, the N/2N subtraction, rebuilt stacks, the per-function diff.

The real-valgrind end-to-end check is ``test_counters.py::test_compare_instructions_regressed``;
these drive the pure logic with text in callgrind's documented format.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfctl.profile import callgrind
from perfctl.profile import instruction_records as records
from perfctl.profile import instructions as diffs
from perfctl.profile.stacks import Frame

# main calls work twice (cost 300 inclusive) and helper once; work calls itself
# (callgrind's fn'2 naming) and memcpy in libc. Name compression throughout.
TEXT = """\
# callgrind format
version: 1
creator: callgrind-3.19.0
positions: line
events: Ir
summary: {total}

ob=(1) /usr/lib/libpython3.11.so.1.0
fl=(1) main.c
fn=(1) main
0 10
cfn=(2) work
calls=2 5
0 300
cfn=(3) helper
calls=1 7
0 {helper}

fn=(2)
+1 200
cob=(2) /lib/x86_64-linux-gnu/libc.so.6
cfi=(2) memcpy.S
cfn=(4) memcpy
calls=4 0
* 60
cfn=(5) work'2
calls=1 5
0 40

fn=(5)
0 40

fn=(3)
0 {helper}

ob=(2)
fl=(2)
fn=(4)
0 60

totals: {total}
"""

MAIN, WORK, HELPER = (Frame(n, "libpython3.11.so.1.0") for n in ("main", "work", "helper"))
MEMCPY = Frame("memcpy", "libc.so.6")


def _graph(helper: int) -> callgrind.Graph:
    return callgrind.parse(TEXT.format(helper=helper, total=310 + helper))


def test_parse_reads_self_costs_and_call_edges() -> None:
    g = _graph(helper=50)
    assert g.self_cost == {MAIN: 10, WORK: 240, HELPER: 50, MEMCPY: 60}
    assert g.total == 360  # the totals line, as callgrind summed it
    assert g.calls[(MAIN, WORK)] == 300 and g.calls[(WORK, MEMCPY)] == 60
    assert g.calls[(WORK, WORK)] == 40  # work'2 is work: recursion, not another function
    incl = g.inclusive()
    assert incl[MAIN] == 360 and incl[WORK] == 300  # its call of itself counted once


def test_the_loop_graph_is_the_difference_per_op() -> None:
    small, big = _graph(helper=50), _graph(helper=250)
    loop = callgrind.loop_graph(small, big, per=4)
    assert loop.self_cost == {HELPER: 50.0}
    assert loop.calls == {(MAIN, HELPER): 50.0}
    assert loop.total == (big.total - small.total) / 4


def test_rebuilt_stacks_keep_every_instruction_and_cut_recursion() -> None:
    g = _graph(helper=50)
    stacks = callgrind.to_stacks(g, min_share=0)
    assert sum(stacks.weights.values()) == pytest.approx(g.total)
    assert stacks.weights[(MAIN, WORK, MEMCPY)] == pytest.approx(60)
    assert stacks.weights[(MAIN, HELPER)] == pytest.approx(50)
    assert not any(s.count(WORK) > 1 for s in stacks.weights)


def test_small_branches_fold_into_their_caller() -> None:
    g = _graph(helper=50)
    stacks = callgrind.to_stacks(g, min_share=0.2)  # memcpy (60/360) and helper are small
    assert (MAIN, WORK, MEMCPY) not in stacks.weights
    assert stacks.weights[(MAIN,)] == pytest.approx(10 + 50)
    assert sum(stacks.weights.values()) == pytest.approx(g.total)


def test_graph_json_is_versioned_and_checked(tmp_path: Path) -> None:
    g = _graph(helper=50)
    path = tmp_path / "graph.json"
    callgrind.save(g, path, {"regime": "r"})
    assert callgrind.load(path) == g
    data = json.loads(path.read_text())
    data["schema"] = 99
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="schema"):
        callgrind.load(path)


def test_the_diff_ranks_functions_by_self_change_and_round_trips(tmp_path: Path) -> None:
    before, after = _graph(helper=50), _graph(helper=250)
    meta = {"regime": "r<1>", "before_run": "a", "after_run": "b"}
    d = diffs.write_diff(
        before, after, tmp_path, {**meta, "before_label": "main", "after_label": "pr"}
    )
    top = d.functions[0]
    assert (top.function, top.object, top.delta_self) == ("helper", "libpython3.11.so.1.0", 200)
    assert top.before_inclusive == pytest.approx(50) and top.after_inclusive == pytest.approx(250)
    assert [m.delta_self for m in d.functions[1:]] == [0, 0, 0]
    assert records.load_diff(tmp_path / "functions.json") == d
    svg = (tmp_path / "diff.svg").read_text()
    assert "instructions per op" in svg and "r&lt;1&gt;" in svg and "<r<1>" not in svg
    assert "helper (libpython3.11.so.1.0)" in svg
    assert records.format_moves(d)[0].startswith("+200  helper (libpython3.11.so.1.0)  (50 → 250)")
    data = json.loads((tmp_path / "functions.json").read_text())
    data["kind"] = "something-else"
    (tmp_path / "functions.json").write_text(json.dumps(data))
    with pytest.raises(ValueError):
        records.load_diff(tmp_path / "functions.json")
