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

Run a CPU-bound competitor beside it to reproduce "under one competitor"
(e.g. ``python -c 'while True: pass'``). Peers (``asv find``, ``git bisect run``
over a pyperf script) are not driven yet.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _peers import git, load

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


def bisect_once(root: Path, extra: list[str]) -> tuple[dict, float]:  # type: ignore[type-arg]
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


def summarize(record: dict, shas: list[str], kinds: dict[int, str], wall: float) -> dict:  # type: ignore[type-arg]
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
    args = ap.parse_args()
    root = (args.workdir or Path(tempfile.mkdtemp(prefix="bisect-bench-"))) / "proj"
    shas, kinds = make_repo(root, args.commits, args.slowdown)
    target = math.log2(args.commits) + 3
    print(
        f"# {root}: {args.commits} commits, culprit +{args.slowdown:.0%}, step target {target:.0f}"
    )
    right = 0
    for _ in range(args.runs):
        record, wall = bisect_once(root, shlex.split(args.perfctl_args))
        line = summarize(record, shas, kinds, wall)
        right += line["right"]
        print(json.dumps(line), flush=True)
    print(f"# right culprit in {right} of {args.runs} runs")


if __name__ == "__main__":
    main()
