"""How often `perfctl bisect` names the right commit, in how many steps, how fast.

Generates the repository of issue #17: ``--commits`` first-parent commits (64) in
which one commit makes regime ``target`` ``--slowdown`` slower (+8%), one commit
elsewhere makes regime ``other`` +3% slower (a distractor: bisect follows
``target`` only), two commits do not build (a broken ``pyproject.toml``, fixed by
the next commit), ten commits touch only docs, and the rest make neutral code
changes. Then it runs ``perfctl bisect good bad --regime target --fresh``
``--runs`` times and prints, per run, the outcome, whether the culprit is right,
the measured steps (against the target of log2(commits) + 3), the skipped
commits it named and the wall time; then the correct-culprit rate.

    python benchmarks/bisect_accuracy.py --runs 20             # the issue's target
    python benchmarks/bisect_accuracy.py --commits 16 --slowdown 0.5 --runs 1 \\
        --perfctl-args "--fast --min-time 0.01"               # a quick smoke run

``--hog`` runs one CPU-bound competitor (``while True: pass``) for the whole
benchmark, the issue's "under one competitor". ``--peers`` also runs, in each run and
on the same repository, the two tools people use today:

* ``git bisect run`` over a pyperf script: GOOD and BAD are timed once with
  ``pyperf timeit --fast`` to set the threshold halfway between them (on a log scale,
  as perfctl judges); each step builds a wheel (exit 125, ``git bisect skip``, when it
  does not build), times ``toy.target()`` the same way and answers bad above the
  threshold. This is the hand-rolled script the issue describes, given the generous
  start of a threshold measured on the very ends.
* ``asv find good..bad time_target`` with an asv suite equivalent to the regimes
  (a virtualenv per commit, built by asv).

Each peer's line says whether its answer is the culprit and its wall time.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _peers import asv_env, asv_machine, git, load, timed, tool, write_asv_conf

PYPROJECT = """\
[project]
name = "toy"
version = "0.1"

[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[tool.setuptools]
packages = ["toy"]

[tool.perfctl]
regimes = ["bench/regimes.py"]
"""

TOY = """\
SCALE = {scale!r}
OTHER = {other!r}
REVISION = {rev}


def target():
    return sum(i * i for i in range(int(20000 * SCALE)))


def other():
    return sum(i for i in range(int(20000 * OTHER)))
"""

REGIMES = """\
from perfctl import regime
import toy

@regime(family="toy")
def target():
    return toy.target

@regime(family="toy")
def other():
    return toy.other
"""


def plan(n: int) -> dict[int, str]:
    """What each commit 1..n does: culprit, distractor, broken/fix pairs, docs, code."""
    kinds = {i: "code" for i in range(1, n + 1)}
    kinds[(2 * n) // 3] = "culprit"
    kinds[n // 4] = "distractor"
    for b in (n // 3, (5 * n) // 6):
        kinds[b], kinds[b + 1] = "broken", "fix"
    docs = [i for i in range(1, n + 1) if kinds[i] == "code"][::3][:10]
    kinds.update({i: "docs" for i in docs})
    return kinds


def make_repo(root: Path, n: int, slowdown: float) -> tuple[list[str], dict[int, str]]:
    """The generated history; its shas (GOOD first) and what each commit does."""
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    (root / "bench").mkdir()
    (root / "toy").mkdir()
    (root / "bench" / "regimes.py").write_text(REGIMES)
    (root / ".gitignore").write_text(".perfctl/\n")
    state = {"scale": 1.0, "other": 1.0, "rev": 0}

    def write(pyproject: str = PYPROJECT) -> None:
        (root / "pyproject.toml").write_text(pyproject)
        (root / "toy" / "__init__.py").write_text(TOY.format(**state))

    write()
    git(root, "add", "-A")
    git(root, "commit", "-qm", "c0: baseline")
    shas, kinds = [git(root, "rev-parse", "HEAD")], plan(n)
    for i in range(1, n + 1):
        kind = kinds[i]
        state["rev"] += kind == "code"
        state["scale"] *= 1 + slowdown if kind == "culprit" else 1
        state["other"] *= 1.03 if kind == "distractor" else 1
        if kind == "docs":
            (root / "NOTES.md").write_text(f"revision {i}\n")
        write(
            PYPROJECT.replace('packages = ["toy"]', "packages = [")
            if kind == "broken"
            else PYPROJECT
        )
        git(root, "add", "-A")
        git(root, "commit", "-qm", f"c{i}: {kind}")
        shas.append(git(root, "rev-parse", "HEAD"))
    git(root, "tag", "good", shas[0])
    git(root, "tag", "bad", shas[-1])
    return shas, kinds


ASV_BENCH = """\
import toy


def time_target():
    toy.target()


def time_other():
    toy.other()
"""

# `git bisect run`'s step: build (or skip), time toy.target() with pyperf, compare.
STEP = """\
import json, os, subprocess, sys, tempfile

def timed():
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "t.json")
        env = {**os.environ, "PYTHONPATH": os.getcwd()}
        subprocess.run([sys.executable, "-m", "pyperf", "timeit", "--fast", "-q", "-o", out,
                        "-s", "import toy", "toy.target()"], check=True, env=env,
                       stdout=subprocess.DEVNULL)
        import pyperf
        return pyperf.Benchmark.load(out).median()

if sys.argv[1] == "measure":
    print(timed())
    sys.exit(0)
with tempfile.TemporaryDirectory() as tmp:
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                            "--no-build-isolation", "-w", tmp, "."],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if sys.argv[1] == "build":
    sys.exit(built.returncode)
if built.returncode != 0:
    sys.exit(125)  # git bisect skip
sys.exit(1 if timed() > float(sys.argv[1]) else 0)
"""


def git_bisect_run(root: Path, work: Path) -> tuple[str | None, float, int]:
    """``git bisect run`` over the pyperf script: (its first bad commit, wall, steps)."""
    step = work / "bisect_step.py"
    step.write_text(STEP)
    # A step that cannot build GOOD skips every commit (no `wheel` package, say): that
    # is this script's environment failing, never a figure of git bisect's. Checked
    # before the clock starts.
    git(root, "checkout", "-q", "good")
    if subprocess.run([sys.executable, str(step), "build"], cwd=root).returncode != 0:
        raise SystemExit(
            f"the git bisect run step cannot build GOOD with {sys.executable}: "
            "pip install wheel setuptools into that environment"
        )
    started = time.monotonic()
    ends = []
    for ref in ("good", "bad"):
        git(root, "checkout", "-q", ref)
        ends.append(float(timed([sys.executable, str(step), "measure"], cwd=root).stdout))
    threshold = math.sqrt(ends[0] * ends[1])
    git(root, "checkout", "-q", "main")
    git(root, "bisect", "start", "bad", "good")
    try:
        run = timed(["git", "bisect", "run", sys.executable, str(step), str(threshold)], cwd=root)
        log = git(root, "bisect", "log")
    finally:
        git(root, "bisect", "reset")
    found = None
    for line in run.stdout.splitlines():
        if line.endswith("is the first bad commit"):
            found = line.split()[0]
    # Each measured step is one "git bisect good|bad <sha>" line (skips built nothing).
    steps = sum(1 for line in log.splitlines() if re.match(r"git bisect (good|bad) ", line))
    return found, time.monotonic() - started, steps


def asv_find(root: Path, work: Path) -> tuple[str | None, float]:
    """``asv find good..bad time_target``: (the commit it names, wall)."""
    bench = root / "benchmarks"
    if not bench.exists():
        bench.mkdir()
        (bench / "__init__.py").write_text("")
        (bench / "bench_toy.py").write_text(ASV_BENCH)
        write_asv_conf(root, "toy")
        with (root / ".git" / "info" / "exclude").open("a") as fh:
            fh.write("benchmarks/\nasv.conf.json\n.asv/\n")
        asv_machine(root, work / "home")
    run = timed(
        [tool("asv"), "find", "--machine", "bench", "good..bad", "time_target"],
        cwd=root,
        env=asv_env(work / "home"),
    )
    found = None
    for line in run.stdout.splitlines():
        if "Greatest regression found:" in line:
            found = line.rsplit(":", 1)[1].split()[0]  # "8be9d58b <bad~6>"
    return found, run.wall


def bisect_once(root: Path, extra: list[str]) -> tuple[dict[str, Any], float]:
    """One fresh `perfctl bisect`: the target regime's JSON record and the wall time."""
    argv = [sys.executable, "-m", "perfctl", "bisect", "good", "bad", "--regime", "target"]
    started = time.monotonic()
    proc = subprocess.run(
        [*argv, "--fresh", "--format", "json", *extra],
        cwd=root,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"perfctl bisect failed ({proc.returncode}): {proc.stderr[-2000:]}")
    (record,) = json.loads(proc.stdout)["bisections"]
    return record, wall


def summarize(
    record: dict[str, Any], shas: list[str], kinds: dict[int, str], wall: float
) -> dict[str, Any]:
    """One run's line: right culprit?, measured steps, named skips, wall time."""
    culprit = shas[next(i for i, k in kinds.items() if k == "culprit")]
    steps = [s for s in record["steps"] if s["kind"] == "step"]
    measured = [s for s in steps if s["comparisons"]]
    broken = {shas[i] for i, k in kinds.items() if k == "broken"}
    named = {s["commit"]["sha"] for s in steps if s["likeness"] == "skipped"}
    return {
        "outcome": record["outcome"],
        "right": (record.get("culprit") or {}).get("sha") == culprit,
        "in_range": culprit in {c["sha"] for c in record["candidates"]},
        "measured_steps": len(measured),
        "skipped_named": len(named & broken),
        "skipped_met": len(named),
        "wall_s": round(wall, 1),
        "load": load(),
    }


def main() -> None:
    """Generate, bisect ``--runs`` times, print one JSON line per run and the rate."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--commits", type=int, default=64)
    ap.add_argument("--slowdown", type=float, default=0.08)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--perfctl-args", default="", help="extra `perfctl bisect` options")
    ap.add_argument("--workdir", type=Path, help="where to generate (default: a temp dir)")
    ap.add_argument("--peers", action="store_true", help="also git bisect run and asv find")
    ap.add_argument("--hog", action="store_true", help="one CPU-bound competitor throughout")
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bisect-bench-"))
    root = work / "proj"
    shas, kinds = make_repo(root, args.commits, args.slowdown)
    culprit = shas[next(i for i, k in kinds.items() if k == "culprit")]
    target = math.log2(args.commits) + 3
    print(
        f"# {root}: {args.commits} commits, culprit +{args.slowdown:.0%}, step target {target:.0f}"
        + (", one CPU hog" if args.hog else "")
    )
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.hog else None
    right = {"perfctl": 0, "git bisect run": 0, "asv find": 0}
    try:
        for _ in range(args.runs):
            record, wall = bisect_once(root, shlex.split(args.perfctl_args))
            line = summarize(record, shas, kinds, wall)
            right["perfctl"] += line["right"]
            print(json.dumps({"tool": "perfctl", **line}), flush=True)
            if not args.peers:
                continue
            found, wall, steps = git_bisect_run(root, work)
            ok = bool(found) and culprit.startswith(found or "-")
            right["git bisect run"] += ok
            print(json.dumps({"tool": "git bisect run", "right": ok, "found": found,
                              "steps": steps, "wall_s": round(wall, 1), "load": load()}),
                  flush=True)  # fmt: skip
            found, wall = asv_find(root, work)
            ok = bool(found) and culprit.startswith(found or "-")
            right["asv find"] += ok
            print(json.dumps({"tool": "asv find", "right": ok, "found": found,
                              "wall_s": round(wall, 1), "load": load()}), flush=True)  # fmt: skip
    finally:
        if hog is not None:
            hog.kill()
    for tool_name, k in right.items():
        if tool_name == "perfctl" or args.peers:
            print(f"# {tool_name}: right culprit in {k} of {args.runs} runs")


if __name__ == "__main__":
    main()
