"""Real changes measured with each pairing: the demo project's optimization phases.

Writes the bundled demo project (minibridge: a parent and a child process over a
multiprocessing pipe, five tagged phases) into a temporary directory and runs
``perfctl compare`` on phases 0→1, 1→2 and 2→3 with ``--pairing process`` and
``same-process`` (``--pairs``/``--designs`` choose others, e.g. ``auto``), all regimes,
at the default settings. Three of its regimes talk to a child process (``payload_large_sum``,
``increment_small``, ``bytes_roundtrip_512kb``), two run in-process (``direct_sum``,
``propagation_update``). It prints one line per comparison and regime: how the
row was measured (``pairing``), verdict, change and CI, processes, reason.

What it is for: same-process pairing cancels what the two refs share inside one worker
process, including what a ref changes in that process's environment (a helper
process it starts, interpreter settings). A regime whose speed depends on its
process environment is then measured wrongly; this shows whether that happens on
real code.

Usage:
    python benchmarks/pairing_phases.py
    python benchmarks/pairing_phases.py --pairs phase-2:phase-3 --designs process,same-process,auto
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from perfctl.jobs.demo import write_project


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v * 100:+.1f}%"


def main() -> int:
    """Run the comparisons and print their rows."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", default="phase-0:phase-1,phase-1:phase-2,phase-2:phase-3")
    ap.add_argument("--designs", default="process,same-process")
    args = ap.parse_args()
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)  # each line as it is printed
    with tempfile.TemporaryDirectory(prefix="perfctl-phases-") as tmp:
        root = Path(tmp) / "minibridge"
        write_project(root, lambda _: None)
        for pair in args.pairs.split(","):
            base, head = pair.split(":")
            for design in args.designs.split(","):
                started = time.monotonic()
                cmd = [sys.executable, "-m", "perfctl", "compare", base, head,
                       "--pairing", design, "--format", "json"]  # fmt: skip
                out = subprocess.run(cmd, cwd=root, capture_output=True, text=True, check=False)
                load = Path("/proc/loadavg").read_text().split()[:3]
                print(f"{base} → {head} --pairing {design}: exit {out.returncode}, "
                      f"{time.monotonic() - started:.0f} s, load {' '.join(load)}")  # fmt: skip
                if out.returncode not in (0, 1):
                    print("   " + out.stderr.strip()[-300:])
                    continue
                for r in json.loads(out.stdout)["regimes"]:
                    ci = f"[{_pct(r['ci_low'])}, {_pct(r['ci_high'])}]"
                    print(f"   {r['name']:22} {r.get('pairing', ''):12} {r['verdict']:12} "
                          f"{_pct(r['change'])} {ci} n={len(r['base_values'])} "
                          f"{r['reason'][:60]}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
