"""Unit tests of the profile data path: parsing, regime view, tables, diff, SVG."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from perfctl.caveats import Caveat, WarningKind
from perfctl.model import RefInfo, SchemaMismatch
from perfctl.profile import hotspots, links, stackdiff, stacks
from perfctl.profile import records as profile_records
from perfctl.profile.stacks import LOOP, SUBPROCESS, THREAD, Frame, Stacks
from perfctl.render import flame

W = "/tmp/proj/bench/regimes.py"
WORKER = "/site/perfctl/measure/workers/profile.py"


def _labels(s: Stacks) -> dict[str, float]:
    return {";".join(f.label for f in k): round(v, 6) for k, v in s.weights.items()}


# -- collapsed text -------------------------------------------------------------


def test_collapsed_process_frame_with_semicolons_and_newline() -> None:
    text = (
        "process 4242:\"python -c import x; x.run('a;b')\nsecond line\";"
        "<module> (w.py:3);hot (w.py:5) 7\n"
        "<module> (w.py:3);cold (w.py:9) 2\n"
    )
    got = stacks.parse_collapsed(text, sample_s=0.01)
    assert _labels(got) == {
        "<module> (w.py:3);hot (w.py:5)": 0.07,
        "<module> (w.py:3);cold (w.py:9)": 0.02,
    }


def test_collapsed_cmdline_line_ending_in_a_number_is_not_a_record() -> None:
    text = 'process 1:"python w.py --n 12\n--m 3";hot (w.py) 4\n'
    got = stacks.parse_collapsed(text, sample_s=1.0)
    assert _labels(got) == {"hot (w.py)": 4.0}


def test_collapsed_cmdline_with_quote_semicolon_inside() -> None:
    text = 'process 1:"python -c "a";b"";<module> (<string>);f (<string>) 5\n'
    got = stacks.parse_collapsed(text, sample_s=1.0)
    assert _labels(got) == {"<module> (<string>);f (<string>)": 5.0}


def test_collapsed_child_process_is_rooted_at_subprocess_marker() -> None:
    text = 'process 1:"python w.py";process 2:"python w.py; child";child (w.py:2) 3\n'
    got = stacks.parse_collapsed(text, sample_s=1.0)
    assert list(got.weights) == [(SUBPROCESS, Frame("child", "w.py", 2))]


def test_frames_without_line_numbers_and_bare_names() -> None:
    assert stacks.parse_frame("hot (w.py)") == Frame("hot", "w.py", None)
    assert stacks.parse_frame("hot (w.py:12)") == Frame("hot", "w.py", 12)
    assert stacks.parse_frame("<module> (<frozen importlib._bootstrap>:1176)") == Frame(
        "<module>", "<frozen importlib._bootstrap>", 1176
    )
    assert stacks.parse_frame("PyEval_EvalFrameDefault") == Frame("PyEval_EvalFrameDefault")
    text = "a (x.py);b (x.py) 2\na (x.py:1);b (x.py:7) 3\n"
    norm = stacks.normalise(stacks.parse_collapsed(text, 1.0), roots=[])
    assert _labels(norm) == {"a (x.py);b (x.py)": 5.0}


def test_thread_frames_are_dropped() -> None:
    got = stacks.parse_collapsed("thread (0x7f3a);main (m.py) 2\n", 1.0)
    assert _labels(got) == {"main (m.py)": 2.0}


def test_collapsed_round_trip_sanitises_separators() -> None:
    s = Stacks({(Frame("a;b", "x.py"), Frame("c\nd", "x.py")): 0.03})
    text = stacks.to_collapsed(s, sample_s=0.01)
    assert text == "a,b (x.py);c d (x.py) 3\n"
    assert _labels(stacks.parse_collapsed(text, 0.01)) == {"a,b (x.py);c d (x.py)": 0.03}


# -- speedscope ------------------------------------------------------------------


def _speedscope(profiles: list[tuple[str, list[list[int]]]], frames: list[Any]) -> dict:
    return {
        "shared": {"frames": frames},
        "profiles": [
            {
                "type": "sampled",
                "name": n,
                "unit": "seconds",
                "samples": s,
                "weights": [0.01] * len(s),
            }
            for n, s in profiles
        ],
    }


def test_speedscope_strips_process_frames_with_any_characters() -> None:
    frames = [
        {"name": 'process 10:"python -c "x;\ny""', "file": "", "line": None},
        {"name": "<module>", "file": W, "line": None},
        {"name": "hot", "file": W, "line": 4},
        {"name": 'process 11:"child;\n"', "file": "", "line": None},
    ]
    data = _speedscope(
        [
            ('Process 10 Thread 10 ""', [[0, 1, 2], [0, 1, 2]]),
            ('Process 10 Thread 12 "Thread-1 (work)"', [[0, 2]]),
            ('Process 11 Thread 11 "MainThread"', [[0, 3, 1, 2]]),
        ],
        frames,
    )
    got = stacks.parse_speedscope(data)
    module, hot = Frame("<module>", W), Frame("hot", W, 4)
    assert dict(got.weights) == {
        (module, hot): pytest.approx(0.02),
        (THREAD, hot): pytest.approx(0.01),
        (SUBPROCESS, module, hot): pytest.approx(0.01),
    }


@pytest.mark.parametrize(
    ("name", "main"),
    [
        ('Process 7 Thread 7 ""', True),
        ('Process 7 Thread 9 "MainThread"', False),
        ('Thread 9 "MainThread"', True),
        ('Thread 9 ""', True),
        ('Thread 9 "Thread-1 (spin)"', False),
        ("something else", True),
    ],
)
def test_main_thread_detection(name: str, main: bool) -> None:
    assert stacks.is_main_thread(name) is main


# -- normalising and the regime view --------------------------------------------------


@pytest.mark.parametrize(
    ("file", "short"),
    [
        ("/venv/lib/python3.11/site-packages/numpy/core/a.py", "numpy/core/a.py"),
        ("/proj/.perfctl/worktrees/abc/src/pkg/m.py", "pkg/m.py"),
        ("/proj/src/pkg/m.py", "pkg/m.py"),
        ("/proj/bench/regimes.py", "bench/regimes.py"),
        ("/usr/lib/python3.11/multiprocessing/pool.py", "multiprocessing/pool.py"),
        ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap>"),
        ("/elsewhere/x.py", "/elsewhere/x.py"),
    ],
)
def test_short_file(file: str, short: str) -> None:
    roots = [Path("/proj"), Path("/proj/.perfctl/worktrees/abc")]
    assert stacks.short_file(file, roots) == short


def test_regime_view_cuts_at_the_loop_and_keeps_threads_and_children() -> None:
    loop = Frame(stacks.LOOP_FUNCTION, WORKER)
    module, run, hot = Frame("<module>", WORKER), Frame("run", W), Frame("hot", W)
    s = Stacks(
        {
            (module, loop, run, hot): 3.0,
            (module, loop): 1.0,
            (THREAD, Frame("Thread._bootstrap", "threading.py")): 2.0,
            (SUBPROCESS, Frame("child", W)): 4.0,
            (module, Frame("import_stuff", W)): 5.0,
        }
    )
    inside, outside = stacks.regime_view(s)
    assert dict(inside.weights) == {
        (run, hot): 3.0,
        (LOOP,): 1.0,
        (THREAD, Frame("Thread._bootstrap", "threading.py")): 2.0,
        (SUBPROCESS, Frame("child", W)): 4.0,
    }
    assert outside.total_s == 5.0


# -- tables and tree ----------------------------------------------------------------


def _regime() -> Stacks:
    run, hot, cold, rec = (
        Frame("run", "r.py"),
        Frame("hot", "r.py"),
        Frame("cold", "r.py"),
        Frame("rec", "r.py"),
    )
    return Stacks({(run, hot): 6.0, (run, cold): 2.0, (run, rec, rec): 1.0, (run,): 1.0})


def test_function_stats_count_recursion_once() -> None:
    stats = hotspots.function_stats(_regime())
    assert stats[Frame("rec", "r.py")].inclusive_s == 1.0
    assert stats[Frame("run", "r.py")].inclusive_s == 10.0
    assert stats[Frame("run", "r.py")].self_s == 1.0


def test_tables_put_the_hot_function_on_top_and_root_the_tree_at_run() -> None:
    top_self, top_incl, tree = hotspots.tables(_regime(), scale=1e-3, sample_s=0.01)
    assert top_self[0].function == "hot" and top_self[0].share == pytest.approx(0.6)
    assert top_self[0].per_op_s == pytest.approx(6e-3) and top_self[0].samples == 600
    assert top_incl[0].function == "run" and top_incl[0].where == "r.py:run"
    assert tree is not None and tree.function == "run"
    assert [c.function for c in tree.children] == ["hot", "cold", "rec"]
    lines = hotspots.format_tree(tree)
    assert lines[0] == "run (r.py) [10 ms/op, 100%]"
    assert lines[1] == "├─ hot (r.py) [6 ms/op, 60%] ← most self time"
    assert lines[-1] == "└─ rec → rec (r.py) [1 ms/op, 10%]"


def test_a_stray_sample_in_another_top_frame_keeps_the_tree_rooted_at_run() -> None:
    weights = dict(_regime().weights)
    weights[(Frame("handler", "signal.py"),)] = 0.1  # 1% of the samples
    _, _, tree = hotspots.tables(Stacks(weights), scale=1e-3, sample_s=0.01)
    assert tree is not None and tree.function == "run"
    # Two real entry points (a third of the time elsewhere): the synthetic root.
    weights[(Frame("other", "o.py"),)] = 5.0
    _, _, tree = hotspots.tables(Stacks(weights), scale=1e-3, sample_s=0.01)
    assert tree is not None and tree.function == "(regime)"


def _child_process_stacks() -> Stacks:
    """A pool regime as py-spy sees it: a forked child a dozen wrapper frames deep."""
    worker = "perfctl/measure/workers/profile.py"
    setup = (
        stacks.SUBPROCESS,
        Frame("<module>", worker),
        Frame("main", worker),
        Frame("_profile", worker),
        Frame("_GeneratorContextManager.__enter__", "contextlib.py"),
        Frame("open_regime", "perfctl/regimes/loader.py"),
        Frame("pool", "bench/regimes.py"),
        *(Frame(f"mp{i}", "multiprocessing/pool.py") for i in range(10)),
        Frame("BaseProcess._bootstrap", "multiprocessing/process.py"),
        Frame("worker", "multiprocessing/pool.py"),
    )
    run = Frame("run", "bench/regimes.py")
    return Stacks(
        {
            (*setup, Frame("child_hot", "bench/regimes.py")): 6.6,
            (*setup, Frame("put", "multiprocessing/queues.py")): 0.4,
            (run, Frame("parent_hot", "bench/regimes.py")): 0.3,
            (run, Frame("wait", "threading.py")): 2.7,
        }
    )


def test_tree_depth_counts_meaningful_frames_so_a_child_process_reaches_its_function() -> None:
    top_self, _, tree = hotspots.tables(_child_process_stacks(), scale=1e-3, sample_s=0.01)
    assert tree is not None and top_self[0].function == "child_hot"
    lines = hotspots.format_tree(tree)
    marked = [ln for ln in lines if "← most self time" in ln]
    assert len(marked) == 1 and "child_hot (bench/regimes.py) [6.6 ms/op, 66%]" in marked[0]
    assert not any("parent_hot" in ln and "most self" in ln for ln in lines)


def test_most_self_time_mark_is_on_the_real_maximum_below_the_depth_limit() -> None:
    deep = tuple(Frame(f"f{i}", "d.py") for i in range(20))
    s = Stacks({(*deep, Frame("hot", "d.py")): 6.6, (deep[0], Frame("side", "d.py")): 3.4})
    _, _, tree = hotspots.tables(s, scale=1e-3, sample_s=0.01)
    assert tree is not None
    lines = hotspots.format_tree(tree)
    marked = [ln for ln in lines if "← most self time" in ln]
    assert len(marked) == 1 and "hot (d.py)" in marked[0] and "66%" in marked[0]


@pytest.mark.parametrize(
    ("frame", "wrapper"),
    [
        (Frame("<module>", "app.py"), True),
        (Frame("main", "/site/perfctl/measure/workers/profile.py"), True),
        (Frame("Runner.bench_func", "pyperf/_runner.py"), True),
        (Frame("BaseProcess.run", "multiprocessing/process.py"), True),
        (Frame("_find_and_load", "<frozen importlib._bootstrap>"), True),
        (stacks.SUBPROCESS, True),
        (Frame("child_hot", "bench/regimes.py"), False),
        (Frame("echo", "perfctl/regimes/builtin/ipc.py"), False),
    ],
)
def test_wrapper_frames(frame: Frame, wrapper: bool) -> None:
    assert hotspots.is_wrapper(frame) is wrapper


def test_format_time_units() -> None:
    assert hotspots.format_time(8.12e-7) == "812 ns"
    assert hotspots.format_time(1.234e-5) == "12.3 µs"
    assert hotspots.format_time(0.00456) == "4.56 ms"
    assert hotspots.format_time(-2.5e-6) == "-2.5 µs"


def test_summary_round_trip() -> None:
    top_self, top_incl, tree = hotspots.tables(_regime(), scale=1e-3, sample_s=0.01)
    s = profile_records.ProfileSummary(
        regime="r",
        ref=RefInfo("WORKTREE", "abc"),
        created="now",
        settings={"rate_hz": 100},
        ops=10,
        calls=10,
        elapsed_s=1.0,
        wall_per_op_s=0.1,
        samples=110,
        errors=0,
        regime_samples=100,
        outside_samples=10,
        coverage=1.0,
        top_self=top_self,
        top_inclusive=top_incl,
        tree=tree,
        files={"summary": "x"},
        warnings=(Caveat("w", WarningKind.FEW_SAMPLES),),
    )
    d = profile_records.summary_to_dict(s)
    assert d["top_self"][0]["where"] == "r.py:hot"
    assert profile_records.summary_from_dict(d) == s
    assert (d["warnings"], d["warning_kinds"]) == (["w"], ["few-samples"])
    assert profile_records.summary_from_dict(d).warnings[0].kind == WarningKind.FEW_SAMPLES
    assert profile_records.summary_from_dict({**d, "warning_kinds": []}).warnings[0].kind == (
        WarningKind.OTHER  # a summary written before kinds were
    )
    # Checked on load: a newer perfctl's record is refused with a hint, a foreign one too.
    with pytest.raises(SchemaMismatch, match="newer than this perfctl reads") as e:
        profile_records.summary_from_dict({**d, "schema": 2})
    assert "upgrade perfctl" in e.value.hint
    with pytest.raises(SchemaMismatch, match="not a version perfctl wrote"):
        profile_records.summary_from_dict({**d, "schema": "1"})
    with pytest.raises(ValueError, match="not a perfctl-profile record"):
        profile_records.summary_from_dict({**d, "kind": "perfctl-profile-diff"})


# -- diff -------------------------------------------------------------------------


def _pair() -> stackdiff.PairNode:
    run, hot, cold = Frame("run", "r.py"), Frame("hot", "r.py"), Frame("cold", "r.py")
    gone = Frame("gone", "r.py")
    before = Stacks({(run, hot): 2.0, (run, cold): 2.0, (run, gone): 1.0})
    after = Stacks({(run, hot): 6.0, (run, cold): 1.0})
    root, _, _ = stackdiff.compare(before, after, 1.0, 1.0)
    return root


def test_diff_functions_rank_the_grower_first() -> None:
    run, hot, cold = Frame("run", "r.py"), Frame("hot", "r.py"), Frame("cold", "r.py")
    before = Stacks({(run, hot): 2.0, (run, cold): 2.0, (run, Frame("gone", "r.py")): 1.0})
    after = Stacks({(run, hot): 6.0, (run, cold): 1.0})
    _, functions, band = stackdiff.compare(before, after, 1e-6, 2e-6)
    assert band == pytest.approx(0.01 * 14e-6)
    assert [(f.function, f.change) for f in functions[:3]] == [
        ("hot", "grew"),
        ("gone", "removed"),
        ("cold", "same"),
    ]
    assert functions[0].delta_self_per_op_s == pytest.approx(10e-6)


def test_where_moved_partitions_the_total_change() -> None:
    root = _pair()
    steps = stackdiff.where_moved(root)
    assert [s.label for s in steps] == ["hot (r.py)", "cold (r.py)", "gone (r.py)"]
    assert sum(s.delta_per_op_s for s in steps) == pytest.approx(root.after_s - root.before_s)
    assert steps[0].path == ("(regime)", "run (r.py)", "hot (r.py)")


def test_node_colours_red_grew_blue_shrank() -> None:
    root = _pair()
    nodes = stackdiff.node_deltas(root, band=0.07, scale=stackdiff.max_delta(root))
    by_name = {n.path[-1]: n for n in nodes}
    assert by_name["hot (r.py)"].change == "grew"
    assert by_name["hot (r.py)"].fill == "#ff2323"
    assert by_name["gone (r.py)"].change == "removed"
    assert by_name["gone (r.py)"].fill.endswith("ff") and by_name["gone (r.py)"].fill != "#ff"
    assert by_name["run (r.py)"].fill == flame.NEUTRAL


def test_diff_round_trip(tmp_path: Path) -> None:
    root = _pair()
    side = profile_records.DiffSide(RefInfo("a", "1"), "s.json", 10, 1.0, 0.1, 100)
    d = profile_records.DiffSummary(
        "r",
        "now",
        side,
        side,
        (),
        stackdiff.where_moved(root),
        stackdiff.node_deltas(root, 0.07, 4.0),
        {"diff_json": "d"},
    )
    data = profile_records.diff_to_dict(d)
    assert data["moved"]["steps"][0]["delta_per_op_s"] == pytest.approx(4.0)
    assert profile_records.diff_from_dict(data) == d
    with pytest.raises(SchemaMismatch, match="newer than this perfctl reads"):
        profile_records.diff_from_dict({**data, "schema": 2})
    with pytest.raises(ValueError, match="not a perfctl-profile-diff record"):
        profile_records.diff_from_dict({**data, "kind": "perfctl-profile"})
    # Linking a report to its `profile --vs` diffs passes over a newer perfctl's diff,
    # however new, and finds the one this perfctl wrote.
    for folder, record in (("a-vs-b", data), ("c-vs-d", {**data, "created": "zz", "schema": 2})):
        path = tmp_path / "profiles" / profile_records.slug("r") / folder / "diff.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(record))
    c = SimpleNamespace(base=side.ref, head=side.ref)
    found = links.matching_diff(tmp_path, "r", c)  # type: ignore[arg-type]
    assert found is not None and found[0].parent.name == "a-vs-b"


# -- SVG ----------------------------------------------------------------------------


def test_svg_is_well_formed_and_escapes_user_text() -> None:
    evil = 'f<script>alert("x")</script>&\x01'
    tree = hotspots.call_tree(Stacks({(Frame(evil, "a&b.py"), Frame("g", "a.py")): 1.0}))
    svg = flame.render_svg(
        flame.tree_boxes(tree, lambda n: f"tip {n.frame.label}"), title="t <&>", subtitle="s"
    )
    assert "<script>" not in svg
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    titles = [t.text for t in root.iter(f"{ns}title")]
    assert 'tip f<script>alert("x")</script>&? (a&b.py)' in titles
    assert len(list(root.iter(f"{ns}rect"))) == 1 + 3  # background + three frames


def test_diff_fill_directions() -> None:
    assert flame.diff_fill(1.0, 1.0) == "#ff2323"
    assert flame.diff_fill(-1.0, 1.0) == "#2323ff"
    assert flame.diff_fill(0.0, 1.0) == flame.NEUTRAL
    grown = flame.diff_fill(0.5, 1.0)
    assert int(grown[1:3], 16) > int(grown[5:7], 16)


# -- py-spy's command line and output ------------------------------------------------


def test_py_spy_command_records_speedscope_without_line_numbers() -> None:
    from perfctl.profile import pyspy

    settings = pyspy.RecordSettings(duration=2, rate=250, native=True, subprocesses=False)
    argv = pyspy.command(Path("/bin/py-spy"), Path("/o.json"), settings, ["python", "w.py"])
    assert argv == [
        "/bin/py-spy",
        "record",
        "--output",
        "/o.json",
        "--format",
        "speedscope",
        "--rate",
        "250",
        "--nolineno",
        "--native",
        "--",
        "python",
        "w.py",
    ]


def test_py_spy_output_parsing() -> None:
    from perfctl.profile import pyspy

    log = (
        "py-spy> Sampling process 100 times a second. Press Control-C to exit.\n"
        "py-spy> Wrote speedscope file to 'x'. Samples: 152 Errors: 3\n"
    )
    assert pyspy.samples_line(log) == (152, 3)
    assert pyspy.samples_line("Error: Failed to find python version") == (None, None)
    assert pyspy.permission_denied(
        "Permission Denied: Try running again with elevated permissions by going 'sudo env "
        '"PATH=$PATH" !!\''
    )
    assert pyspy.permission_denied("Error: Operation not permitted (os error 1)")
    assert not pyspy.permission_denied(log)


def test_malformed_collapsed_lines_are_skipped() -> None:
    text = "no count here\n\nhot (w.py) 2\ngarbage;(( x\ncold (w.py) 1\n"
    got = stacks.parse_collapsed(text, 1.0)
    assert _labels(got) == {"hot (w.py)": 2.0, "cold (w.py)": 1.0}


def test_very_deep_stacks_do_not_hit_the_recursion_limit() -> None:
    deep = Stacks({tuple(Frame(f"f{i}", "d.py") for i in range(900)): 1.0})
    tree = hotspots.call_tree(deep)
    svg = flame.render_svg(flame.tree_boxes(tree, lambda n: n.frame.label), title="deep")
    assert svg.count("<rect") == 1 + 1 + hotspots.MAX_DEPTH
    root, _, _ = stackdiff.compare(deep, deep, 1.0, 1.0)
    assert stackdiff.where_moved(root)
    hotspots.tables(deep, scale=1.0, sample_s=0.01)
