"""Where the noise of a busy machine lives: between processes or within them.

Measures a ~100 µs pure-Python call three ways and prints one line per cell:

* ``separate``: one process per measurement (perfctl's process pairing); the CV
  of the process means against the spread of values inside each process, with
  and without a fixed hash seed and ASLR;
* ``same-process``: two copies of the same module loaded into one process and
  timed alternately (perfctl's ``--pairing same-process``); the spread of the
  per-process mean log ratio (A/A: its true value is 0), on the wall clock and
  on the thread's CPU time.

Each condition runs quiet and with N CPU-bound competitors (``--hogs``), which
the script starts and stops itself. Usage::

    python benchmarks/process_noise.py [--processes 20] [--hogs 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import numpy as np

WORK = """\
N = 2000
def work():
    s = 0
    for i in range(N):
        s += i * i
    return s
"""

SEPARATE = """\
import json, sys, time
sys.path.insert(0, sys.argv[2])
from mypkg import work
loops = int(sys.argv[1])
out = []
for _ in range(4):
    t = time.perf_counter()
    for _ in range(loops):
        work()
    out.append((time.perf_counter() - t) / loops)
print(json.dumps(out[1:]))
"""

SAME = """\
import importlib, json, math, sys, time
def load(path):
    sys.path.insert(0, path)
    mod = importlib.import_module("mypkg")
    sys.path.remove(path)
    del sys.modules["mypkg"]
    return mod
a, b = load(sys.argv[2]), load(sys.argv[3])
loops = int(sys.argv[1])
def value(mod, clock):
    w = mod.work
    t = clock()
    for _ in range(loops):
        w()
    return clock() - t
ratios = {"wall": [], "cpu": []}
for name, clock in (("wall", time.perf_counter), ("cpu", time.thread_time)):
    value(a, clock), value(b, clock)
    for i in range(20):
        pair = (a, b) if i % 2 == 0 else (b, a)
        got = {id(m): value(m, clock) for m in pair}
        ratios[name].append(math.log(got[id(b)] / got[id(a)]))
print(json.dumps({k: sum(v) / len(v) for k, v in ratios.items()}))
"""

HOG = "while True: pass"


def _run(argv: list[str], env: dict[str, str] | None = None) -> Any:  # the worker script's JSON
    out = subprocess.run(argv, capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout)


def separate(tmp: Path, n: int, mode: str) -> str:
    """CV of process means vs the spread inside processes, for one start-up mode."""
    env = dict(os.environ)
    prefix: list[str] = []
    if "seed" in mode:
        env["PYTHONHASHSEED"] = "0"
    if "noaslr" in mode:
        prefix = ["setarch", "-R"]
    script, pkg = str(tmp / "separate.py"), str(tmp / "a")
    procs = [_run([*prefix, sys.executable, script, "300", pkg], env) for _ in range(n)]
    means = np.array([np.mean(p) for p in procs])
    inside = np.median([np.std(p) / np.mean(p) for p in procs])
    return f"process CV {means.std(ddof=1) / means.mean():6.1%}  inside {inside:5.1%}"


def same_process(tmp: Path, n: int) -> str:
    """Spread of per-process A/A log ratios, wall clock and CPU clock."""
    script = str(tmp / "same.py")
    rows = [_run([sys.executable, script, "100", str(tmp / "a"), str(tmp / "b")]) for _ in range(n)]
    wall = np.array([r["wall"] for r in rows])
    cpu = np.array([r["cpu"] for r in rows])
    return f"ratio spread wall {wall.std(ddof=1):6.1%}  cpu {cpu.std(ddof=1):6.1%}"


def main() -> None:
    """Run every cell quiet and under the competitors; print one line per cell."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=20)
    ap.add_argument("--hogs", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for side in ("a", "b"):
            (tmp / side / "mypkg").mkdir(parents=True)
            (tmp / side / "mypkg" / "__init__.py").write_text(WORK)
        (tmp / "separate.py").write_text(textwrap.dedent(SEPARATE))
        (tmp / "same.py").write_text(textwrap.dedent(SAME))
        for load in ("quiet", f"{args.hogs} hog(s)"):
            hogs = [] if load == "quiet" else [
                subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(args.hogs)
            ]  # fmt: skip
            try:
                print(f"load average {os.getloadavg()[0]:.2f}, {load}")
                for mode in ("plain", "seed", "seed-noaslr"):
                    print(f"  separate     {mode:12s} {separate(tmp, args.processes, mode)}")
                print(f"  same-process {'':12s} {same_process(tmp, args.processes)}")
            finally:
                for h in hogs:
                    h.kill()


if __name__ == "__main__":
    main()
