"""False alarms and power of `perfctl compare` against asv and bare pyperf (issue: compare).

Builds a small pure-Python project as a real git repository in a temporary
directory: one module whose ``sum_squares()`` takes about 100 µs, and three
commits, tagged

* ``A``  the base;
* ``A2`` identical code, only a comment edited (an A/A pair with A);
* ``B``  ``sum_squares()`` made slower by a calibrated 5%: extra loop iterations
  worked out from the loop's measured per-iteration cost, then checked
  in-process against A (the realised slowdown is printed and stored).

The project carries a perfctl regimes file (``[tool.perfctl] regimes``) and an
equivalent asv suite (``asv.conf.json``, ``benchmarks/``, virtualenv per commit).
Each trial runs, in rotating order so the neighbours' load hits every tool alike:

* perfctl: ``perfctl compare A A2 --format json`` (default settings, or
  ``--perfctl-args``); a false verdict is "regressed" or "improved";
* asv: ``asv continuous A A2`` (factor 1.1, its default), then ``asv compare
  --factor 1.02`` on the very same stored results (the test ``continuous``
  applies, with our 2% band);
* pyperf: a ``pyperf.Runner.bench_func`` script run ``--fast`` (or
  ``--pyperf-mode default``) once per commit, with the commit's tree on
  PYTHONPATH (a pure-Python module: the same code an install would give), then
  ``python -m pyperf compare_to -v`` (t-test), also with ``--min-speed 2``.

The same trials with ``B`` as head measure power. Environments are built by a
warm-up comparison before the first trial; it is not counted. Every trial is
appended to a JSONL file as it finishes; the summary table is printed at the end
(or with ``--summarize FILE...``): false-alarm rate, power, both with Wilson 95%
intervals, and median wall time per comparison.

Usage:
    python benchmarks/false_alarms.py --n 20
    python benchmarks/false_alarms.py --n 20 --tools perfctl --perfctl-args "--rigorous"
    python benchmarks/false_alarms.py --summarize /tmp/perfctl-bench/false-alarms-*.jsonl
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import shlex
import statistics
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _peers import (
    ASV_MACHINE,
    asv_compare,
    asv_env,
    asv_machine,
    commit,
    git,
    load,
    rate,
    timed,
    tool,
    write_suites,
)

import perfctl

TARGET_S = 100e-6  # the workload's duration
SLOWDOWN = 0.05  # the injected change
BENCH = "sum_squares"
ALARMS = ("regressed", "improved")
RESULTS = Path(tempfile.gettempdir()) / "perfctl-bench"

MODULE = '''"""Sum of squares: the workload of perfctl's false-alarm benchmark."""

# {comment}
N = {n}
EXTRA = {extra}  # extra iterations: 0 on A and A2, a calibrated +5% on B


def sum_squares() -> int:
    """Sum of i*i for i < N + EXTRA (about 100 us on the machine that built it)."""
    total = 0
    for i in range(N + EXTRA):
        total += i * i
    return total
'''

REGIMES = '''from perfctl import regime


@regime
def sum_squares():
    """sqsum.sum_squares(), about 100 us."""
    import sqsum

    return sqsum.sum_squares
'''

ASV_BENCH = '''import sqsum


def time_sum_squares():
    """sqsum.sum_squares(), about 100 us (the perfctl regime's twin)."""
    sqsum.sum_squares()
'''

PYPERF_BENCH = """import pyperf
import sqsum

runner = pyperf.Runner()
runner.bench_func("sum_squares", sqsum.sum_squares)
"""


# --- the project -------------------------------------------------------------------


def _loop(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i
    return total


def _best(func: Callable[[], object], reps: int = 7) -> float:
    """Fastest per-call CPU time: CPU time ignores preemption by the neighbours, and
    the minimum resists their cache and frequency effects."""
    number = max(1, int(0.02 / max(timeit.timeit(func, number=3) / 3, 1e-7)))
    return min(timeit.repeat(func, timer=time.process_time, number=number, repeat=reps)) / number


def _module_func(source: str) -> Callable[[], int]:
    space: dict[str, Any] = {}
    exec(compile(source, "<sqsum>", "exec"), space)  # noqa: S102 - our own template
    func: Callable[[], int] = space["sum_squares"]
    return func


def _realised(n: int, extra: int, rounds: int = 15) -> float:
    """B/A - 1 measured in-process: A and B interleaved, median of per-round ratios."""
    a = _module_func(MODULE.format(comment="A", n=n, extra=0))
    b = _module_func(MODULE.format(comment="B", n=n, extra=extra))
    ratios = []
    for i in range(rounds):
        first, second = (a, b) if i % 2 == 0 else (b, a)
        t1, t2 = _best(first), _best(second)
        ratios.append(t2 / t1 if first is a else t1 / t2)
    return statistics.median(ratios) - 1.0


def calibrate() -> tuple[int, int, float]:
    """N for ~100 µs of CPU, EXTRA = 5% more iterations, and the realised change.

    The loop's cost is linear in its iterations plus a call overhead well under
    1% of 100 µs, so 5% more iterations is a 5% slowdown; the in-process check
    (CPU time, interleaved) confirms it and is reported with every result.
    """
    n = 2500
    for _ in range(3):
        n = max(100, round(n * TARGET_S / _best(functools.partial(_loop, n))))
    extra = max(1, round(SLOWDOWN * n))
    return n, extra, _realised(n, extra)


def build_project(root: Path, n: int, extra: int) -> dict[str, str]:
    """The git repository with commits A, A2 and B; returns tag -> sha."""
    write_suites(root, "sqsum", REGIMES, ASV_BENCH)
    mod = root / "sqsum.py"
    shas = {}
    mod.write_text(MODULE.format(comment="revision A: the base", n=n, extra=0))
    shas["A"] = commit(root, "A: base", "A")
    mod.write_text(MODULE.format(comment="revision A2: only this comment", n=n, extra=0))
    shas["A2"] = commit(root, "A2: comment edited", "A2")
    mod.write_text(MODULE.format(comment="revision B: +5% work", n=n, extra=extra))
    shas["B"] = commit(root, "B: injected 5% slowdown", "B")
    return shas


# --- the tools ---------------------------------------------------------------------


def perfctl_rev() -> str:
    """perfctl's commit, plus a hash of the modules that decide verdicts (the package is
    installed editable and may change between trials)."""
    pkg = Path(perfctl.__file__).parent
    digest = hashlib.sha256()
    for name in (
        "stats/decision.py",
        "stats/verdicts.py",
        "measure/interleave.py",
        "measure/quiet.py",
        "measure/runner.py",
        "jobs/compare.py",
    ):
        digest.update((pkg / name).read_bytes())
    return f"{git(pkg, 'describe', '--always', '--dirty')}+src:{digest.hexdigest()[:10]}"


def schedule_text(settings: dict[str, Any]) -> str:
    """A comparison's schedule as "10–60 rounds, 30 s, 3×0.05 s"."""
    try:
        return (
            f"{settings['rounds']}–{settings['max_rounds']} rounds, "
            f"{settings['time_budget']:g} s, {settings['values']}×{settings['min_time']:g} s"
        )
    except (KeyError, TypeError, ValueError):
        return "?"


def run_perfctl(root: Path, base: str, head: str, extra: list[str]) -> dict[str, Any]:
    """One `perfctl compare`; its verdict, change and process counts."""
    t = timed([tool("perfctl"), "compare", base, head, "--format", "json", *extra], root)
    rec: dict[str, Any] = {"wall": t.wall, "rc": t.rc}
    rec["perfctl_rev"] = perfctl_rev()
    try:
        out = json.loads(t.stdout)
        row = out["regimes"][0]
    except (ValueError, KeyError, IndexError):
        return {**rec, "verdict": "failed", "detail": (t.stderr or t.stdout)[-500:]}
    rec.update(
        schedule=schedule_text(out.get("settings", {})),
        comparison=out.get("id"),
    )
    rec.update(
        verdict=row["verdict"],
        change=row.get("change"),
        ci=[row.get("ci_low"), row.get("ci_high")],
        p=row.get("p_adjusted"),
        processes=[len(row.get("base_values") or ()), len(row.get("head_values") or ())],
        reason=row.get("reason", ""),
        base_values=row.get("base_values"),
        head_values=row.get("head_values"),
    )
    return rec


def _asv_verdict(mark: str | None) -> str:
    return {"+": "regressed", "-": "improved", "!": "failed"}.get(mark or "", "no change")


def run_asv(root: Path, home: Path, base: str, head: str) -> list[dict[str, Any]]:
    """One `asv continuous`; rows for its default factor 1.1 and for factor 1.02."""
    cmd = [tool("asv"), "continuous", "--machine", ASV_MACHINE, base, head]
    t = timed(cmd, root, env=asv_env(home))
    if "PERFORMANCE DECREASED" in t.stdout:
        summary = "regressed"
    elif "PERFORMANCE INCREASED" in t.stdout:
        summary = "improved"
    elif "NOT SIGNIFICANTLY CHANGED" in t.stdout:
        summary = "no change"
    else:
        summary = "failed"
    rows = []
    for factor in (1.1, 1.02):
        v = asv_compare(root, home, base, head, factor, BENCH) if summary != "failed" else None
        verdict = summary if factor == 1.1 else _asv_verdict(v.mark if v else None)
        if v is None and summary != "failed" and factor != 1.1:
            verdict = "failed"
        rows.append(
            {
                "label": f"asv continuous --factor {factor:g}",
                "wall": t.wall,
                "rc": t.rc,
                "verdict": verdict,
                "change": (v.ratio - 1) if v and v.ratio else None,
                "detail": "" if summary != "failed" else (t.stderr or t.stdout)[-500:],
            }
        )
    return rows


def _pyperf_once(tmp: Path, tree: Path, out: Path, mode: str) -> float:
    out.unlink(missing_ok=True)
    flag = [] if mode == "default" else [f"--{mode}"]
    cmd = [
        sys.executable,
        str(tmp / "pyperf_bench.py"),
        *flag,
        "-q",
        "-o",
        str(out),
        "--inherit-environ",
        "PYTHONPATH",
    ]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tree)}
    t = timed(cmd, tmp, env=env)
    if t.rc != 0:
        raise RuntimeError(f"pyperf failed: {t.stderr[-500:]}")
    return t.wall


def _pyperf_verdict(text: str) -> tuple[str, float | None]:
    change = None
    for line in text.splitlines():
        if "x slower" in line or "x faster" in line:
            factor = float(line.rsplit(":", 1)[1].split("x")[0])
            change = factor - 1 if "slower" in line else 1 / factor - 1
    if "Significant" not in text or change is None:
        return "no change", change
    return ("regressed" if change > 0 else "improved"), change


def run_pyperf(
    tmp: Path, trees: dict[str, Path], base: str, head: str, mode: str
) -> list[dict[str, Any]]:
    """pyperf on base then head, then compare_to (t-test), plain and --min-speed 2."""
    a, b = tmp / "pyperf-base.json", tmp / "pyperf-head.json"
    try:
        wall = _pyperf_once(tmp, trees[base], a, mode) + _pyperf_once(tmp, trees[head], b, mode)
    except RuntimeError as exc:
        return [{"label": f"pyperf --{mode}", "verdict": "failed", "detail": str(exc)}]
    rows = []
    for label, extra in (
        (f"pyperf --{mode} compare_to", []),
        (f"pyperf --{mode} compare_to --min-speed 2", ["--min-speed", "2"]),
    ):
        t = timed([sys.executable, "-m", "pyperf", "compare_to", "-v", *extra, str(a), str(b)], tmp)
        verdict, change = _pyperf_verdict(t.stdout)
        rows.append({"label": label, "wall": wall + t.wall, "verdict": verdict, "change": change})
    return rows


# --- the experiment ----------------------------------------------------------------


def setup(work: Path, tools: list[str]) -> dict[str, Any]:
    """Build (or reuse) the project, worktrees for pyperf, and warm every tool's envs."""
    root, meta_file = work / "project", work / "meta.json"
    if meta_file.exists():
        meta: dict[str, Any] = json.loads(meta_file.read_text())
        print(f"reusing {root} (N={meta['n']}, EXTRA={meta['extra']})", file=sys.stderr)
    else:
        print("calibrating the workload...", file=sys.stderr)
        n, extra, got = calibrate()
        shas = build_project(root, n, extra)
        meta = {"n": n, "extra": extra, "realised_slowdown": got, "shas": shas}
        for tag in shas:
            git(root, "worktree", "add", "-q", "--detach", str(work / "trees" / tag), tag)
        (work / "pyperf_bench.py").write_text(PYPERF_BENCH)
        meta_file.write_text(json.dumps(meta, indent=2))
        print(
            f"N={n} EXTRA={extra}: realised in-process slowdown {got * 100:+.2f}%", file=sys.stderr
        )
    if "perfctl" in tools:
        for head in ("A2", "B"):  # builds the three envs, not counted
            timed([tool("perfctl"), "compare", "A", head, "--fast", "--format", "json"], root)
    if "asv" in tools and not (work / "home").exists():
        asv_machine(root, work / "home")
        for head in ("A2", "B"):
            t = timed(
                [tool("asv"), "continuous", "--machine", ASV_MACHINE, "A", head],
                root,
                env=asv_env(work / "home"),
            )
            if t.rc not in (0, 1):
                raise SystemExit(f"asv warm-up failed:\n{t.stdout[-2000:]}\n{t.stderr[-2000:]}")
    return meta


def trial(
    work: Path,
    i: int,
    kind: str,
    tools: list[str],
    perfctl_args: list[str],
    perfctl_label: str,
    pyperf_mode: str,
) -> list[dict[str, Any]]:
    """One A/A ("aa") or A/B ("ab") comparison with every tool, order rotated by ``i``."""
    root, head = work / "project", "A2" if kind == "aa" else "B"
    trees = {t: work / "trees" / t for t in ("A", "A2", "B")}
    order = tools[i % len(tools) :] + tools[: i % len(tools)]
    rows: list[dict[str, Any]] = []
    for name in order:
        before = load()
        if name == "perfctl":
            rec = run_perfctl(root, "A", head, perfctl_args)
            # perfctl is installed editable and its defaults may move between trials:
            # the label names the schedule each comparison actually ran with.
            got = [{**rec, "label": f"{perfctl_label} [{rec.pop('schedule', '?')}]"}]
        elif name == "asv":
            got = run_asv(root, work / "home", "A", head)
        else:
            got = run_pyperf(work, trees, "A", head, pyperf_mode)
        after = load()
        for r in got:
            rows.append(
                {
                    "tool": name,
                    "kind": kind,
                    "trial": i,
                    "load_before": before,
                    "load_after": after,
                    "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                    **r,
                }
            )
    return rows


def summarize(rows: list[dict[str, Any]]) -> str:
    """The Markdown table: false alarms (A/A), power (A/B), median wall per comparison."""
    labels = list(dict.fromkeys(r["label"] for r in rows))
    lines = [
        "| tool | A/A false verdicts | A/B detected (power) | A/B median est. change "
        "| median wall / comparison | A/A verdicts | A/B verdicts |",
        "|---|---|---|---|---|---|---|",
    ]
    for label in labels:
        aa = [r for r in rows if r["label"] == label and r["kind"] == "aa"]
        ab = [r for r in rows if r["label"] == label and r["kind"] == "ab"]
        fa = sum(r["verdict"] in ALARMS for r in aa)
        hits = sum(r["verdict"] == "regressed" for r in ab)
        changes = [r["change"] for r in ab if r.get("change") is not None]
        walls = [r["wall"] for r in aa + ab if "wall" in r]

        def tally(rs: list[dict[str, Any]]) -> str:
            counts: dict[str, int] = {}
            for r in rs:
                counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
            return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))

        lines.append(
            f"| {label} | {rate(fa, len(aa)) if aa else '–'} | "
            f"{rate(hits, len(ab)) if ab else '–'} | "
            f"{f'{statistics.median(changes) * 100:+.1f}%' if changes else '–'} | "
            f"{f'{statistics.median(walls):.1f} s' if walls else '–'} | {tally(aa)} | "
            f"{tally(ab)} |"
        )
    revs: dict[str, int] = {}
    for r in rows:
        if r.get("perfctl_rev"):
            revs[r["perfctl_rev"]] = revs.get(r["perfctl_rev"], 0) + 1
    if revs:
        seen = ", ".join(f"{k} ({v} trials)" for k, v in revs.items())
        lines.append(f"\nperfctl sources (commit+hash of the deciding modules): {seen}")
    loads = [float(r["load_before"].split()[0]) for r in rows if "load_before" in r]
    if loads:
        lines.append(
            f"\n1-min load average over the trials: median {statistics.median(loads):.1f}"
            f", min {min(loads):.1f}, max {max(loads):.1f}"
        )
    return "\n".join(lines)


def _reduce(procs: list[list[float]], how: str) -> list[tuple[float]]:
    """Each process reduced to one value by ``how`` (mean, median or min)."""
    if how == "min":
        return [(min(p),) for p in procs if p]
    if how == "median":
        return [(statistics.median(p),) for p in procs if p]
    return [(statistics.fmean(p),) for p in procs if p]


def _what_if(
    base: list[list[float]], head: list[list[float]], how: str, min_rounds: int
) -> tuple[str, int, float]:
    """perfctl's decision on the same processes with another per-process reducer.

    Replays sequential sampling: stops at the first round >= ``min_rounds`` where
    :func:`perfctl.stats.decision.is_clear` holds, else uses every round measured.
    """
    from perfctl.stats import decision as stats

    b, h = _reduce(base, how), _reduce(head, how)
    k = len(b)
    for r in range(min_rounds, len(b) + 1):
        if stats.is_clear(stats.compare_sides(b[:r], h[:r]), threshold=0.02):
            k = r
            break
    change = stats.compare_sides(b[:k], h[:k])
    cvs = [stats.summarize(x[:k]).cv for x in (b, h)]
    verdict, _ = stats.decide(
        change, change.p_value, threshold=0.02, alpha=0.05, base_cv=cvs[0], head_cv=cvs[1]
    )
    return verdict, k, max(cvs)


def reanalyze(work: Path) -> str:
    """What-if table from the comparisons stored in WORKDIR's perfctl store.

    perfctl reduces each worker process to the mean of its values. On a busy
    machine a value that lost the CPU to a neighbour is inflated, and the mean
    carries it. This re-decides every stored comparison of A/A2 and A/B (the
    warm-up ``--fast`` ones excepted), grouped by schedule, with the decision code
    of the perfctl installed *now* and the per-process mean, median or minimum
    (same processes, sequential stopping replayed from the schedule's minimum
    rounds), to show what that choice and today's statistics would have said.
    """
    meta = json.loads((work / "meta.json").read_text())
    kinds = {meta["shas"]["A2"]: "aa", meta["shas"]["B"]: "ab"}
    comps: dict[str, list[tuple[str, dict[str, Any], int]]] = {}
    for f in sorted((work / "project" / ".perfctl" / "comparisons").glob("*.json")):
        c = json.loads(f.read_text())
        c = c.get("comparison", c)
        settings = c.get("settings", {})
        if settings.get("preset") == "fast" or c["head"]["sha"] not in kinds:
            continue
        row = c["regimes"][0]
        if row.get("base_values") and row.get("head_values"):
            key = schedule_text(settings)
            comps.setdefault(key, []).append(
                (kinds[c["head"]["sha"]], row, int(settings.get("rounds", 10)))
            )
    lines = [
        f"Re-decided with perfctl {perfctl_rev()}:",
        "",
        "| schedule | per-process statistic | A/A false verdicts | A/B detected "
        "| median rounds | median worst-side CV |",
        "|---|---|---|---|---|---|",
    ]
    for key, group in comps.items():
        for how in ("mean", "median", "min"):
            got: dict[str, list[tuple[str, int, float]]] = {"aa": [], "ab": []}
            for kind, row, first in group:
                got[kind].append(_what_if(row["base_values"], row["head_values"], how, first))
            aa, ab = got["aa"], got["ab"]
            every = aa + ab
            lines.append(
                f"| {key} | {how}{' (perfctl)' if how == 'mean' else ''} | "
                f"{rate(sum(v in ALARMS for v, _, _ in aa), len(aa))} | "
                f"{rate(sum(v == 'regressed' for v, _, _ in ab), len(ab))} | "
                f"{statistics.median(k for _, k, _ in every):.0f} | "
                f"{100 * statistics.median(cv for _, _, cv in every):.1f}% |"
            )
    return "\n".join(lines)


def main() -> None:
    """Parse arguments, run the trials, print the summary."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20, help="trials of each kind (A/A and A/B)")
    ap.add_argument("--tools", default="perfctl,asv,pyperf")
    ap.add_argument("--kinds", default="aa,ab", help="aa (A vs A2), ab (A vs B) or both")
    ap.add_argument("--perfctl-args", default="", help="extra `perfctl compare` options")
    ap.add_argument("--pyperf-mode", default="fast", choices=("fast", "default", "rigorous"))
    ap.add_argument("--workdir", type=Path, help="keep/reuse the project here (default: temp)")
    ap.add_argument("--out", type=Path, help="JSONL of trials (default under $TMPDIR)")
    ap.add_argument("--summarize", type=Path, nargs="+", help="only summarise these JSONL files")
    ap.add_argument("--reanalyze", type=Path, help="what-if table from WORKDIR's perfctl store")
    args = ap.parse_args()
    if args.reanalyze:
        print(reanalyze(args.reanalyze))
        return
    if args.summarize:
        stored = [json.loads(ln) for f in args.summarize for ln in f.read_text().splitlines() if ln]
        print(summarize(stored))
        return
    tools = [t for t in args.tools.split(",") if t]
    kinds = [k for k in args.kinds.split(",") if k]
    perfctl_args = shlex.split(args.perfctl_args)
    label = "perfctl compare" + (f" {args.perfctl_args}" if perfctl_args else " (default)")
    out = args.out or RESULTS / f"false-alarms-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="perfctl-fa-") as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        meta = setup(work, tools)
        print(f"trials -> {out}", file=sys.stderr)
        rows: list[dict[str, Any]] = []
        for i in range(args.n):
            for kind in kinds if i % 2 == 0 else kinds[::-1]:
                got = trial(work, i, kind, tools, perfctl_args, label, args.pyperf_mode)
                for r in got:
                    r["realised_slowdown"] = meta["realised_slowdown"]
                with out.open("a") as f:
                    f.writelines(json.dumps(r) + "\n" for r in got)
                rows += got
                short = ", ".join(f"{r['label']}: {r['verdict']}" for r in got)
                print(f"[{i + 1}/{args.n} {kind}] {short}", file=sys.stderr)
    print(
        f"workload: N={meta['n']}, B adds {meta['extra']} iterations, realised in-process "
        f"slowdown {meta['realised_slowdown'] * 100:+.2f}%"
    )
    print(summarize(rows))


if __name__ == "__main__":
    main()
