"""Orchestration overhead of `perfctl compare` against `asv continuous` (issue: compare).

One small pure-Python project (git repository in a temporary directory, two
commits ``A`` and ``B``, two trivial benchmarks written both as perfctl regimes
and as asv ``time_`` benchmarks) is compared ``A`` against ``B`` by

* ``asv continuous A B`` (virtualenv per commit, its default settings);
* ``perfctl compare A B`` at default settings, and with ``--fast``;

each **cold** (state removed first: ``perfctl clean`` + ``rm -rf .perfctl``;
``rm -rf .asv``) and then **warm** (the same command again). Package caches
(uv's, and pip's/virtualenv's under asv's private HOME) are primed by one
untimed run of each tool, so "cold" means a fresh project state on a machine
that has installed these packages before. Rounds rotate the order of the tools.

Time inside benchmark processes:

* perfctl runs inside a thin wrapper (``python -c WRAPPER compare ...``) that
  times every child process perfctl spawns (``runner.spawn``: calibration and
  pyperf worker processes, spawn to exit), the regime probe, worktree creation
  and environment builds, and perfctl's own start-up (interpreter + imports).
  The stored pyperf files (``.perfctl/runs/<run>/pyperf/*.json``) give each
  worker's own ``duration`` metadata: the part spent warming up and measuring.
* asv: the per-benchmark ``duration`` its results JSON stores for each commit
  (benchmark processes, all rounds) and its ``<build>`` durations.

Goals: cold perfctl <= 0.5x asv's wall time; warm perfctl spends >= 80% of its
wall time in benchmark processes.

Usage: python benchmarks/orchestration.py [--rounds 3] [--perfctl-args ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _peers import (
    ASV_MACHINE,
    asv_env,
    asv_machine,
    commit,
    load,
    timed,
    tool,
    write_suites,
)

MODULE = '''"""Two trivial workloads."""

# {comment}
WORDS = [str(i) for i in range(20)]


def small_sum() -> int:
    return sum(range(10))


def join_words() -> str:
    return "-".join(WORDS)
'''

REGIMES = '''from perfctl import regime


@regime
def small_sum():
    """sum(range(10))."""
    import tinyproj

    return tinyproj.small_sum


@regime
def join_words():
    """'-'.join of 20 short strings."""
    import tinyproj

    return tinyproj.join_words
'''

ASV_BENCH = """import tinyproj


def time_small_sum():
    tinyproj.small_sum()


def time_join_words():
    tinyproj.join_words()
"""

# Runs the perfctl CLI in this process with timing hooks; writes the events to
# $PERFCTL_BENCH_EVENTS at exit. Hooks only wrap module attributes that perfctl
# itself looks up at call time, so its behaviour is unchanged.
WRAPPER = r"""
import atexit, json, os, sys, time
T0 = time.perf_counter()
EVENTS = []
from perfctl import envs
from perfctl.regimes import discovery
from perfctl.git import refs as gitrefs
from perfctl.measure import runner
from perfctl.cli.app import main
IMPORTED = time.perf_counter() - T0

def hook(module, name, kind_of):
    orig = getattr(module, name)
    def wrapped(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return orig(*args, **kwargs)
        finally:
            EVENTS.append({"kind": kind_of(args), "start": t0 - T0,
                           "wall": time.perf_counter() - t0})
    setattr(module, name, wrapped)

def spawn_kind(args):
    cmd = list(args[0]) if args else []
    return "calibration" if "--calibrate-loops" in cmd else "worker" if "--worker" in cmd else "spawn"

hook(runner, "spawn", spawn_kind)
hook(discovery, "probe", lambda a: "probe")
hook(envs, "_build", lambda a: "env build")
hook(envs, "prepare_target", lambda a: "prepare target")
hook(gitrefs, "ensure_worktree", lambda a: "worktree")

def dump():
    with open(os.environ["PERFCTL_BENCH_EVENTS"], "w") as f:
        json.dump({"import": IMPORTED, "end": time.perf_counter() - T0, "events": EVENTS}, f)
atexit.register(dump)
sys.argv = ["perfctl", *sys.argv[1:]]
main()
"""


def build_project(root: Path) -> None:
    """The repository: commits A and B (B edits a comment), both benchmark suites."""
    write_suites(root, "tinyproj", REGIMES, ASV_BENCH)
    (root / "tinyproj.py").write_text(MODULE.format(comment="revision A"))
    commit(root, "A", "A")
    (root / "tinyproj.py").write_text(MODULE.format(comment="revision B"))
    commit(root, "B", "B")


def _pyperf_durations(root: Path, run_ids: list[str]) -> tuple[float, int]:
    """Sum of pyperf's per-worker ``duration`` metadata, and the worker count."""
    import pyperf

    total, count = 0.0, 0
    for run_id in run_ids:
        for f in sorted((root / ".perfctl" / "runs" / run_id / "pyperf").glob("*.json")):
            for run in pyperf.Benchmark.load(str(f)).get_runs():
                total += float(run.get_metadata().get("duration", 0.0))
                count += 1
    return total, count


def run_perfctl(root: Path, work: Path, args: list[str], cold: bool) -> dict[str, Any]:
    """One wrapped `perfctl compare A B`; wall time and its breakdown."""
    if cold:
        subprocess.run([tool("perfctl"), "clean"], cwd=root, capture_output=True)
        shutil.rmtree(root / ".perfctl", ignore_errors=True)
    events_file = work / "events.json"
    env = {**os.environ, "PERFCTL_BENCH_EVENTS": str(events_file)}
    cmd = [sys.executable, "-c", WRAPPER, "compare", "A", "B", "--format", "json", *args]
    t = timed(cmd, root, env=env)
    if t.rc != 0:
        raise SystemExit(f"perfctl failed ({t.rc}):\n{t.stderr[-3000:]}")
    out = json.loads(t.stdout)
    ev = json.loads(events_file.read_text())

    def total(kind: str) -> float:
        return sum(e["wall"] for e in ev["events"] if e["kind"] == kind)

    inside, workers = _pyperf_durations(root, [out["base_run"], out["head_run"]])
    worker_wall, cal_wall = total("worker"), total("calibration")
    build, prepare, probe = total("env build"), total("prepare target"), total("probe")
    parts = {
        "interpreter start-up + perfctl import": t.wall - ev["end"] + ev["import"],
        "env build (uv venv + install)": build,
        "worktrees + env checks": prepare - build,
        "probe (regime discovery, 1 process per ref)": probe,
        "calibration processes": cal_wall,
        "worker processes: pyperf warmup+values (duration)": inside,
        "worker processes: start-up/imports/exit": worker_wall - inside,
    }
    parts["other (git, stats, store, lock)"] = t.wall - sum(parts.values())
    return {
        "wall": t.wall,
        "bench_process": worker_wall + cal_wall,
        "measuring": inside,
        "workers": workers,
        "rounds": [len(r.get("base_values") or ()) for r in out["regimes"]],
        "verdicts": [r["verdict"] for r in out["regimes"]],
        "parts": parts,
    }


def _asv_durations(root: Path) -> tuple[float, float]:
    """Sum of per-benchmark and of <build> durations over asv's stored results."""
    bench = build = 0.0
    for f in (root / ".asv" / "results" / ASV_MACHINE).glob("*.json"):
        if f.name == "machine.json":
            continue
        data = json.loads(f.read_text())
        cols = data.get("result_columns", [])
        i = cols.index("duration") if "duration" in cols else None
        for row in data.get("results", {}).values():
            if i is not None and len(row) > i and row[i] is not None:
                bench += float(row[i])
        build += sum(v for k, v in data.get("durations", {}).items() if k == "<build>")
    return bench, build


def run_asv(root: Path, work: Path, cold: bool) -> dict[str, Any]:
    """One `asv continuous A B`; wall time and the benchmark/build durations it stored."""
    if cold:
        shutil.rmtree(root / ".asv", ignore_errors=True)
    else:  # only this run's results count
        shutil.rmtree(root / ".asv" / "results", ignore_errors=True)
    home = work / "home"
    if not (home / ".asv-machine.json").exists():
        asv_machine(root, home)
    t = timed(
        [tool("asv"), "continuous", "--machine", ASV_MACHINE, "A", "B"], root, env=asv_env(home)
    )
    if t.rc not in (0, 1):
        raise SystemExit(f"asv failed ({t.rc}):\n{t.stdout[-3000:]}\n{t.stderr[-2000:]}")
    bench, build = _asv_durations(root)
    return {
        "wall": t.wall,
        "bench_process": bench,
        "measuring": bench,
        "parts": {
            "benchmarks (results 'duration')": bench,
            "wheel builds (<build>)": build,
            "env creation, installs, discovery, other": t.wall - bench - build,
        },
    }


def _fmt_parts(rows: list[dict[str, Any]]) -> list[str]:
    keys = list(rows[0]["parts"])
    wall = statistics.median(r["wall"] for r in rows)
    out = []
    for k in keys:
        v = statistics.median(r["parts"][k] for r in rows)
        out.append(f"|   {k} | {v:.2f} s | {100 * v / wall:.0f}% |")
    return out


def report(rows: list[dict[str, Any]]) -> str:
    """The Markdown tables: wall times and ratios, share in benchmark processes, breakdown."""
    labels = list(dict.fromkeys(r["label"] for r in rows))

    def med(label: str, state: str, key: str = "wall") -> float:
        return statistics.median(
            r[key] for r in rows if r["label"] == label and r["state"] == state
        )

    asv = "asv continuous"
    lines = [
        "| tool | cold wall | warm wall | cold / asv cold | warm / asv warm | "
        "warm share in benchmark processes | warm share measuring |",
        "|---|---|---|---|---|---|---|",
    ]
    for label in labels:
        cold, warm = med(label, "cold"), med(label, "warm")
        share = med(label, "warm", "bench_process") / warm
        measuring = med(label, "warm", "measuring") / warm
        lines.append(
            f"| {label} | {cold:.1f} s | {warm:.1f} s | "
            f"{cold / med(asv, 'cold'):.2f}x | {warm / med(asv, 'warm'):.2f}x | "
            f"{100 * share:.0f}% | {100 * measuring:.0f}% |"
        )
    lines += [
        "",
        "Time outside benchmark processes (wall minus benchmark processes; medians):",
        "",
        "| tool | cold | warm | cold / asv cold | warm / asv warm |",
        "|---|---|---|---|---|",
    ]

    def outside(label: str, state: str) -> float:
        return statistics.median(
            r["wall"] - r["bench_process"]
            for r in rows
            if r["label"] == label and r["state"] == state
        )

    for label in labels:
        oc, ow = outside(label, "cold"), outside(label, "warm")
        lines.append(
            f"| {label} | {oc:.1f} s | {ow:.1f} s | {oc / outside(asv, 'cold'):.2f}x | "
            f"{ow / outside(asv, 'warm'):.2f}x |"
        )
    lines += [
        "",
        "Breakdown (medians; shares of the median wall time):",
        "",
        "| tool, state / part | seconds | share |",
        "|---|---|---|",
    ]
    for label in labels:
        for state in ("cold", "warm"):
            sel = [r for r in rows if r["label"] == label and r["state"] == state]
            lines.append(f"| **{label}, {state}** | {med(label, state):.2f} s | 100% |")
            lines += _fmt_parts(sel)
    loads = [float(r["load_before"].split()[0]) for r in rows]
    lines.append(
        f"\n1-min load average over the runs: median {statistics.median(loads):.1f}, "
        f"min {min(loads):.1f}, max {max(loads):.1f}"
    )
    return "\n".join(lines)


def main() -> None:
    """Build the project, prime caches, run the rounds, print the tables."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="cold+warm pairs per tool")
    ap.add_argument(
        "--perfctl-args",
        action="append",
        default=None,
        help="a perfctl variant to time (repeatable); default: '' and '--fast'",
    )
    ap.add_argument("--out", type=Path, help="JSONL of runs (default under $TMPDIR)")
    ap.add_argument("--summarize", type=Path, nargs="+", help="only summarise these JSONL files")
    args = ap.parse_args()
    if args.summarize:
        print(
            report(
                [json.loads(ln) for f in args.summarize for ln in f.read_text().splitlines() if ln]
            )
        )
        return
    variants = args.perfctl_args if args.perfctl_args is not None else ["", "--fast"]
    out = args.out or (
        Path(tempfile.gettempdir())
        / "perfctl-bench"
        / f"orchestration-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="perfctl-orch-") as tmp:
        work = Path(tmp)
        root = work / "project"
        build_project(root)
        print("priming package caches (untimed)...", file=sys.stderr)
        run_asv(root, work, cold=True)
        run_perfctl(root, work, ["--fast"], cold=True)
        tools: list[tuple[str, str]] = [("asv continuous", "")]
        tools += [
            (f"perfctl compare {v}".strip() if v else "perfctl compare (default)", v)
            for v in variants
        ]
        for i in range(args.rounds):
            order = tools[i % len(tools) :] + tools[: i % len(tools)]
            for label, variant in order:
                for state in ("cold", "warm"):
                    before = load()
                    if label.startswith("asv"):
                        rec = run_asv(root, work, cold=state == "cold")
                    else:
                        rec = run_perfctl(root, work, shlex.split(variant), state == "cold")
                    rec.update(
                        label=label,
                        state=state,
                        round=i,
                        load_before=before,
                        load_after=load(),
                        time=time.strftime("%Y-%m-%dT%H:%M:%S"),
                    )
                    rows.append(rec)
                    with out.open("a") as f:
                        f.write(json.dumps(rec) + "\n")
                    print(
                        f"[{i + 1}/{args.rounds}] {label} {state}: {rec['wall']:.1f} s "
                        f"(load {before})",
                        file=sys.stderr,
                    )
    print(f"runs -> {out}")
    print(report(rows))


if __name__ == "__main__":
    main()
