"""Callgrind call graphs: parsing, the N/2N subtraction, rebuilt stacks, the per-function diff.

The real-valgrind end-to-end check is ``test_counters.py::test_compare_instructions_regressed``;
these drive the pure logic with text in callgrind's documented format.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perfctl.profile import callgrind
from perfctl.profile import instruction_records as records
from perfctl.profile import instructions as diffs
from perfctl.profile.stacks import Frame, Stacks

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

MAIN, WORK, WORK2, HELPER = (
    Frame(n, "libpython3.11.so.1.0") for n in ("main", "work", "work'2", "helper")
)
MEMCPY = Frame("memcpy", "libc.so.6")


def _graph(helper: int) -> callgrind.Graph:
    return callgrind.parse(TEXT.format(helper=helper, total=310 + helper))


def test_parse_reads_self_costs_and_call_edges() -> None:
    text = TEXT.format(helper=50, total=360)
    g = callgrind.parse(text)
    assert g.self_cost == {MAIN: 10, WORK: 200, WORK2: 40, HELPER: 50, MEMCPY: 60}
    totals = int(re.search(r"^totals: (\d+)$", text, re.M).group(1))  # type: ignore[union-attr]
    assert g.total == totals  # every instruction callgrind counted is some function's
    assert g.calls[(MAIN, WORK)] == 300 and g.calls[(WORK, MEMCPY)] == 60
    assert g.calls[(WORK, WORK2)] == 40  # the nested level keeps callgrind's name
    # Per function, the levels merge: work'2 is work.
    assert g.functions() == {MAIN: 10, WORK: 240, HELPER: 50, MEMCPY: 60}


def test_uncompressed_names_are_read_as_written() -> None:
    # A compressed definition whose name starts with a parenthesis, then its reference.
    text = TEXT.replace("cfn=(3) helper", "cfn=(3) (anonymous namespace)::helper")
    found = callgrind.parse(text.format(helper=50, total=360)).functions()
    assert found[Frame("(anonymous namespace)::helper", "libpython3.11.so.1.0")] == 50
    assert HELPER not in found
    plain = "fn=(anonymous namespace)::f\n0 7\n"
    assert callgrind.parse(plain).self_cost == {Frame("(anonymous namespace)::f", ""): 7}


def test_the_loop_graph_is_the_difference_per_op() -> None:
    small, big = _graph(helper=50), _graph(helper=250)
    loop = callgrind.loop_graph(small, big, per=4)
    assert loop.self_cost == {HELPER: 50.0}
    assert loop.calls == {(MAIN, HELPER): 50.0}
    assert loop.total == (big.total - small.total) / 4
    # A function the small process ran more of keeps its negative residue: the sum stays exact.
    fewer = callgrind.loop_graph(_graph(helper=50), _graph(helper=46), per=2)
    assert fewer.self_cost == {HELPER: -2.0} and fewer.total == -2.0
    assert callgrind.to_stacks(fewer, floor=0).weights == {}  # nothing to draw


def test_rebuilt_stacks_keep_every_instruction_and_draw_recursion() -> None:
    g = _graph(helper=50)
    stacks = callgrind.to_stacks(g, floor=0)
    assert sum(stacks.weights.values()) == pytest.approx(g.total)
    assert stacks.weights[(MAIN, WORK, MEMCPY)] == pytest.approx(60)
    assert stacks.weights[(MAIN, WORK, WORK)] == pytest.approx(40)  # work'2, below work
    assert stacks.weights[(MAIN, HELPER)] == pytest.approx(50)


def _self_in(stacks: Stacks) -> dict[Frame, float]:
    out: dict[Frame, float] = {}
    for stack, w in stacks.weights.items():
        out[stack[-1]] = out.get(stack[-1], 0.0) + w
    return out


def test_a_call_back_into_a_function_keeps_every_functions_self_cost() -> None:
    # A calls B, B calls back into A (A'2), which calls C: no cycle among callgrind's
    # names, so the stacks are exact, each function's self as callgrind counted it.
    a, b, a2, c = (Frame(n, "x.so") for n in ("A", "B", "A'2", "C"))
    g = callgrind.Graph({a: 20, b: 20, a2: 20, c: 20}, {(a, b): 60, (b, a2): 40, (a2, c): 20})
    stacks = callgrind.to_stacks(g, floor=0)
    assert stacks.weights == {(a,): 20, (a, b): 20, (a, b, a): 20, (a, b, a, c): 20}
    assert _self_in(stacks) == pytest.approx(g.functions())


def test_a_graph_with_left_out_negatives_still_draws_every_instruction() -> None:
    # A loop graph: D's negative residue (and the edge to it) are left out of the
    # drawing, so A's recorded edges no longer add up to what A passes on.
    m, a, c, d = (Frame(n, "x.so") for n in "MACD")
    g = callgrind.Graph({m: 1, a: 1, c: 40, d: -9}, {(m, a): 32, (a, c): 40, (a, d): -9})
    stacks = callgrind.to_stacks(g, floor=0)
    assert sum(stacks.weights.values()) == pytest.approx(42)  # every positive self cost
    assert _self_in(stacks)[c] == pytest.approx(40)  # called from one place: its own count
    # Two callers whose edges disagree with the callee: shared, never more than it has.
    b = Frame("B", "x.so")
    g2 = callgrind.Graph(
        {m: 1, a: 1, b: 1, c: 70}, {(m, a): 101, (m, b): 1, (a, c): 100, (b, c): -30}
    )
    drawn = callgrind.to_stacks(g2, floor=0)
    assert _self_in(drawn)[c] == pytest.approx(70) and sum(drawn.weights.values()) == pytest.approx(
        73
    )


def test_a_cycle_among_recursion_levels_becomes_one_node() -> None:
    x, y, x2, y2, z = (Frame(n, "x.so") for n in ("X", "Y", "X'2", "Y'2", "Z"))
    g = callgrind.Graph(
        {x: 10, y: 20, x2: 30, y2: 20, z: 10},
        {(x, y): 80, (y, x2): 60, (x2, y2): 45, (y2, x2): 25, (y2, z): 10},
    )
    stacks = callgrind.to_stacks(g, floor=0)
    cycle = Frame("X / Y (cycle)", "x.so")
    assert stacks.weights == pytest.approx(
        {(x,): 10, (x, y): 20, (x, y, cycle): 50, (x, y, cycle, z): 10}
    )
    assert sum(stacks.weights.values()) == pytest.approx(g.total)


def test_small_branches_fold_into_their_caller() -> None:
    g = _graph(helper=50)
    stacks = callgrind.to_stacks(g, floor=72)  # memcpy (60), work'2 (40) and helper (50)
    assert (MAIN, WORK, MEMCPY) not in stacks.weights
    assert stacks.weights[(MAIN,)] == pytest.approx(10 + 50)
    assert stacks.weights[(MAIN, WORK)] == pytest.approx(300)
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


SORT = """\
import sys
n = int(sys.argv[1])
data = list(range(300))
for _ in range(n):
    sorted(data, key=lambda x: -x)
"""


@pytest.mark.slow  # valgrind measures: two real callgrind runs
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_real_callgrind_files_subtract_into_the_loops_graph(tmp_path: Path) -> None:
    # A sort with a Python key: C calls back into Python, the interpreter's usual shape.
    (tmp_path / "sort.py").write_text(SORT)
    graphs = []
    for n in ("0020", "0040"):  # same command-line length, as the counter worker does
        out = tmp_path / f"cg.{n}"
        # -S: no site import, half of the start-up valgrind would otherwise run through.
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
               "-S", str(tmp_path / "sort.py"), n]  # fmt: skip
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        subprocess.run(cmd, check=True, capture_output=True, timeout=300, env=env)
        text = out.read_text()
        g = callgrind.parse(text)
        totals = int(re.search(r"^totals: (\d+)$", text, re.M).group(1))  # type: ignore[union-attr]
        assert g.total == totals
        assert {f for edge in g.calls for f in edge} <= set(g.self_cost)  # callees are functions
        graphs.append(g)
    loop = callgrind.loop_graph(graphs[0], graphs[1], per=20)
    assert loop.total == pytest.approx((graphs[1].total - graphs[0].total) / 20)
    stacks = callgrind.to_stacks(loop, floor=0)
    drawn = sum(c for c in loop.self_cost.values() if c > 0)
    assert sum(stacks.weights.values()) == pytest.approx(drawn, rel=1e-9)
    rebuilt = _self_in(stacks)
    cycles = [f for f in rebuilt if f.name.endswith(" (cycle)")]
    inside = {n for c in cycles for n in c.name.removesuffix(" (cycle)").split(" / ")}
    positive = {f: c for f, c in loop.self_cost.items() if c > 0}
    exact = callgrind.Graph(positive).functions()
    assert len(exact) > 20  # the loop's functions: interpreter, sort, the key's calls
    # Branches under a millionth of the total still fold into their caller (a floor of 0
    # is not allowed: the paths through a call graph can be exponentially many).
    slack = 1e-4 * drawn
    for f, cost in exact.items():
        if f.name not in inside:  # outside a collapsed cycle: each function's own count
            assert rebuilt.get(f, 0.0) == pytest.approx(cost, rel=1e-6, abs=slack), f


def test_notes_read_a_diff_linked_relative_to_an_artefacts_folder(tmp_path: Path) -> None:
    # `ci` stores artefact paths relative to its folder; the HTML report passes that root.
    from perfctl.model import REGRESSED, Comparison, Machine, RefInfo, RegimeComparison
    from perfctl.render.notes import comparison_notes

    meta = {"regime": "r", "before_run": "a", "after_run": "b"}
    labels = {"before_label": "main", "after_label": "pr"}
    diffs.write_diff(_graph(helper=50), _graph(helper=250), tmp_path / "art" / "p", meta | labels)
    row = RegimeComparison(
        "r", "f", REGRESSED, artifacts={"instructions_functions": "p/functions.json"}
    )
    machine = Machine("m", "cpu", 2, 2**30, "6", "none", "3.11")
    c = Comparison("id", "now", RefInfo("main", "1" * 40), RefInfo("pr", "2" * 40), machine, (row,))
    said = comparison_notes(c, root=tmp_path / "art")
    assert said[0].startswith("Where the instructions moved in r (self instructions/op, 360 → 560")
    assert said[1].strip().startswith("+200  helper")
    assert comparison_notes(c) == []  # relative to the current directory: not found, no note
