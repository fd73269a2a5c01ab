"""Do instruction counts move the way wall time does? The demo's four phases, both signals.

    python benchmarks/counters_direction.py [--fast] [--phases 1,2,3,4]
    python benchmarks/counters_direction.py --builtin

Writes the bundled demo project (minibridge, the history `perfctl demo` uses) into a
temporary git repository and runs, for each phase, the real CLI:

    perfctl compare phase-(i-1) phase-i --measure time,instructions --format json

so both signals of a phase are measured in one run, each in its own processes.
For every regime whose wall time changed (verdict improved or regressed) it checks
whether the instruction count moved the same way (the sign of the change), and
whether the instructions verdict flagged it too. Regimes whose time did not change
are listed with their instruction change for reference (an IPC regime's count can
move while its time does not, and the reverse: callgrind does not follow the child
process, see the README's "What counters cannot see").

``--builtin`` does the same for the built-in suite's CPU-bound family, where the
change is not a commit but a mode: every ``propagation.*`` regime runs as
``[mode=recompute]`` and ``[mode=epoch]``, so it runs ``perfctl run --regimes
builtin:propagation --fast`` and ``perfctl run --regimes builtin:propagation
--measure instructions`` and compares the epoch/recompute ratio of each shape in
both signals (a run has no confidence interval between two regimes: a small time
ratio can be noise).

Prints a markdown table and a summary line; the figures in benchmarks/README.md
come from it. Nothing here is asserted: it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from perfctl.jobs.demo import write_project

FLAGS = ("improved", "regressed")


def _compare(root: Path, before: str, after: str, fast: bool) -> tuple[dict, float]:
    cmd = [sys.executable, "-m", "perfctl", "compare", before, after,
           "--measure", "time,instructions", "--format", "json"]  # fmt: skip
    cmd += ["--fast"] if fast else []
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - t0
    if proc.returncode not in (0, 1):
        sys.exit(f"compare {before} {after} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout), seconds


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x * 100:+.1f}%"


def _sign(x: float | None) -> int:
    return 0 if not x else (1 if x > 0 else -1)


def _run(extra: list[str]) -> dict[str, float]:
    cmd = [sys.executable, "-m", "perfctl", "run", "--regimes", "builtin:propagation",
           "--format", "json", *extra]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="perfctl-direction-") as tmp:
        proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"perfctl run failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return {r["regime"]: r["median_s"] for r in json.loads(proc.stdout)["rows"]}


def builtin() -> None:
    """Epoch against recompute mode of the built-in propagation regimes, both signals."""
    t0 = time.monotonic()
    timed, counted = _run(["--fast"]), _run(["--measure", "instructions"])
    print("| regime | time epoch/recompute | instructions epoch/recompute | same direction |")
    print("|---|---|---|---|")
    agree = total = 0
    for name in sorted(n.removesuffix("[mode=epoch]") for n in timed if n.endswith("[mode=epoch]")):
        t = timed[f"{name}[mode=epoch]"] / timed[f"{name}[mode=recompute]"] - 1
        i = counted[f"{name}[mode=epoch]"] / counted[f"{name}[mode=recompute]"] - 1
        same = _sign(t) == _sign(i)
        agree, total = agree + same, total + 1
        print(f"| {name} | {_pct(t)} | {_pct(i)} | {'yes' if same else '**no**'} |")
    print(f"\n{agree} of {total} shapes moved the same way; {time.monotonic() - t0:.0f} s; "
          f"load average {os.getloadavg()[0]:.1f}.")  # fmt: skip


def main() -> None:
    """Measure each chosen phase with both signals and tabulate the directions."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fast", action="store_true", help="compare's --fast preset for time")
    p.add_argument("--phases", default="1,2,3,4", help="which phases (1-4)")
    p.add_argument("--builtin", action="store_true", help="the built-in propagation family")
    args = p.parse_args()
    if args.builtin:
        builtin()
        return
    phases = [int(x) for x in args.phases.split(",")]
    load0 = os.getloadavg()[0]
    rows, changed, same_way, flagged, total_s = [], 0, 0, 0, 0.0
    with tempfile.TemporaryDirectory(prefix="perfctl-direction-") as tmp:
        root = Path(tmp) / "minibridge"
        write_project(root, lambda _m: None)
        for i in phases:
            data, seconds = _compare(root, f"phase-{i - 1}", f"phase-{i}", args.fast)
            total_s += seconds
            for r in data["regimes"]:
                v, c = r["verdicts"], r["changes"]
                t_v, i_v = v.get("time"), v.get("instructions")
                agree = ""
                if t_v in FLAGS:
                    changed += 1
                    ok = _sign(c.get("time")) == _sign(c.get("instructions"))
                    same_way += ok
                    flagged += i_v == t_v
                    agree = "yes" if ok else "**no**"
                rows.append(
                    f"| {i} | {r['regime']} | {_pct(c.get('time'))} {t_v} | "
                    f"{_pct(c.get('instructions'))} {i_v} | {agree} |"
                )
            print(f"phase {i}: {seconds:.0f} s", file=sys.stderr)
    load1 = os.getloadavg()[0]
    print("| phase | regime | time | instructions | same direction |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    print(
        f"\n{same_way} of {changed} time-changed regimes moved the same way in instructions "
        f"({flagged} of {changed} also flagged with the same verdict by instructions); "
        f"{total_s:.0f} s in all; load average {load0:.1f} before, {load1:.1f} after; "
        f"{'--fast' if args.fast else 'default'} preset for time."
    )


if __name__ == "__main__":
    main()
