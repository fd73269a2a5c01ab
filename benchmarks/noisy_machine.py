"""The noisy-machine benchmark (issue: verdicts that hold on a busy machine).

Builds a small project as a real git repository in a temporary directory, with
five commits, tagged:

* ``A``   the base: ``work()`` takes about 100 µs of pure Python;
* ``A2``  identical code, only a comment edited (A/A with ``A``);
* ``P5``  ``work()`` made 5% slower (5% more loop iterations, checked in-process);
* ``P2``  ``work()`` made 2% slower;
* ``Q25`` the child process of ``pipe`` does a loop per line before it answers (a
  change in the second process), calibrated at build to make a bare round trip about
  25% slower on a quiet machine and checked there (``pipe_realised`` in the workdir's
  ``meta.json``). What it adds is fixed CPU time, so the change ``pipe`` shows depends
  on the round trip it is added to: a competitor that puts parent and child on one CPU
  makes the round trip shorter and the same loop a larger share of it.

Two regimes: ``work`` (in-process) and ``pipe`` (a line to a child process and back
over pipes: a two-process round trip that only ``Q25`` changes). By default each trial
runs ``perfctl compare`` A→A2, A→P5 and A→P2, so every trial gives four unchanged
regime results (``work`` in A→A2, ``pipe`` in all three), one +5% and one +2%;
``--heads A2,Q25 --regime pipe --pipe-band 0.1`` asks whether the two-process regime,
judged on its own ±10% band, still finds a real change.

Conditions, each a block of trials, the competitor started and stopped by this
script:

* ``quiet``: no competitor (whatever else the machine runs is noted as its load);
* ``hog``: one CPU-bound process (``while True: pass``), not pinned;
* ``bursty``: one process busy for 1 s, idle for 1 s, in turn.

Designs, each trial running every design in rotating order so that drift hits
them alike: ``today`` (the defaults the issue was filed against: ``--pairing process
--threshold 0.02``), ``auto`` (the defaults: ``--pairing auto``, the ±1% band),
``auto-2pct`` (the defaults before the ±1% band: ``--threshold 0.02``; until
2026-11-28 ``today`` and ``auto`` ran at ±2%, the default then), ``burst-wait``
(``--burst-wait 10``), ``same-process`` (``--pairing same-process``), ``affinity``
(``--affinity`` the first CPU this process may use: every worker of both refs on one CPU),
``cpu-clock`` (``--pairing same-process --clock cpu``: the timing thread's on-CPU
time), ``busy-clock`` (``--pairing same-process --clock busy``: wall time less the
timing thread's wait for a CPU), ``auto-busy`` (``--clock busy``: the default pairing,
its paired regimes on the busy clock), and any ``--design NAME='ARGS'`` given
(``--design "before=exe=PATH ARGS"`` runs another checkout's perfctl, PATH its
``perfctl`` executable: two revisions in one run, each record naming its own
revision). Without ``--designs`` it runs ``today`` and ``auto``, the issue's two
designs; ``--designs none`` runs only the ``--design`` ones (without one, and with an
unknown condition, design or head, it is a usage error). Every comparison runs at the
default settings otherwise (the ±1% band too, where a design names no ``--threshold``).
``--pipe-band F`` has the ``pipe`` regime declare a noise band of its own
(``@regime(threshold=F)``; a project of its own, so another ``--workdir``).

Every result is appended to a JSONL file as it finishes; the table is printed at
the end (or with ``--summarize FILE...``): per condition and design, A/A false
verdicts, the share of unchanged results called ``no change`` and
``inconclusive``, +5% and +2% detection, +2% reported as ``no change`` with a CI
that excludes +2% (an honesty miss) and as ``no change`` at all (the issue's stricter
reading: "at least within noise or inconclusive"), the ``pipe`` regime's own A/A
figures and its ``Q25`` detection (where it ran), and the median wall time per regime
for +5%, for +2% and for unchanged ones, each rate with its Wilson 95% interval.

``--heads A2,P5`` runs only those comparisons and ``--regime work`` only that regime
(a quicker look at one design question; its table covers what ran).

Usage:
    python benchmarks/noisy_machine.py --n 20
    python benchmarks/noisy_machine.py --n 5 --conditions bursty --designs today,burst-wait
    python benchmarks/noisy_machine.py --summarize /tmp/perfctl-bench/noisy-*.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _peers import commit, init_repo, load, rate, timed, tool

from perfctl.measure.machine import allowed_cpus

RESULTS = Path(tempfile.gettempdir()) / "perfctl-bench"
ALARMS = ("regressed", "improved")
# head tag -> (the regime a change was injected into, the change)
PAIRS = {"A2": ("work", 0.0), "P5": ("work", 0.05), "P2": ("work", 0.02), "Q25": ("pipe", 0.25)}
PIPE_SLOWDOWN = PAIRS["Q25"][1]
# The CPUs this process may use; `affinity` pins every worker of both refs to the first.
CPUS = allowed_cpus()
DESIGNS = {
    # The design the issue was filed against: every regime in separate processes, ±2%.
    "today": ["--pairing", "process", "--threshold", "0.02"],
    "auto": [],  # the defaults: --pairing auto (same-process where it can share), ±1%
    "auto-2pct": ["--threshold", "0.02"],  # the defaults before the ±1% band
    "burst-wait": ["--burst-wait", "10"],
    "same-process": ["--pairing", "same-process"],
    "affinity": ["--affinity", str(min(CPUS))],
    # The timing thread's on-CPU time: blind to waiting for a CPU, and to the pipe
    # regime's child process (its A/A figures say what that costs).
    "cpu-clock": ["--pairing", "same-process", "--clock", "cpu"],
    # Wall time less the timing thread's run-queue wait: sees waiting, not preemption.
    "busy-clock": ["--pairing", "same-process", "--clock", "busy"],
    # The default pairing, its paired regimes on the busy clock (the others on wall).
    "auto-busy": ["--clock", "busy"],
}

PYPROJECT = """[project]
name = "noisy"
version = "0.1.0"

[tool.perfctl]
regimes = ["perf_regimes.py"]
install = false
pythonpath = ["."]
"""

MODULE = '''"""The workload of perfctl's noisy-machine benchmark."""

# {comment}
N = {n}
EXTRA = {extra}  # extra iterations: 0 on A, A2 and Q25, +5% on P5, +2% on P2


def work() -> int:
    """Sum of i*i for i < N + EXTRA (about 100 us on the machine that built it)."""
    total = 0
    for i in range(N + EXTRA):
        total += i * i
    return total


ECHO = {echo!r}  # the child's code: on Q25 it loops before it answers


def echo():
    """A child process that echoes lines (on Q25 after a loop of its own)."""
    import subprocess
    import sys

    return subprocess.Popen(
        [sys.executable, "-c", ECHO], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )


def ping(child) -> None:
    """One line to the child and back."""
    child.stdin.write(b"ping\\n")
    child.stdin.flush()
    child.stdout.readline()
'''

REGIMES = '''from perfctl import regime


@regime
def work():
    """noisy.work(), about 100 us in-process."""
    import noisy

    return noisy.work


@regime
def pipe():
    """A line to a child process and back over pipes (two processes)."""
    import noisy

    child = noisy.echo()
    yield lambda: noisy.ping(child)
    child.kill()
    child.wait()
'''

# The child of the `pipe` regime: echoes each line; on Q25 it first loops SPIN times.
ECHO = (
    "import sys\nfor line in iter(sys.stdin.buffer.readline, b''):\n"
    "    sys.stdout.buffer.write(line)\n    sys.stdout.buffer.flush()\n"
)
ECHO_SPIN = (
    "import sys\n\n\ndef spin():\n    total = 0\n    for i in range({spin}):\n"
    "        total += i * i\n\n\nfor line in iter(sys.stdin.buffer.readline, b''):\n"
    "    spin()\n    sys.stdout.buffer.write(line)\n    sys.stdout.buffer.flush()\n"
)

COMPETITORS = {
    "quiet": None,
    "hog": "while True: pass",
    "bursty": (
        "import time\n"
        "while True:\n"
        "    end = time.monotonic() + 1.0\n"
        "    while time.monotonic() < end: pass\n"
        "    time.sleep(1.0)\n"
    ),
}


def _round_trip(code: str, pings: int) -> float:
    """Median seconds of one line to a child running ``code`` and back."""
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert child.stdin is not None and child.stdout is not None
    times = []
    try:
        for _ in range(pings):
            t0 = time.perf_counter()
            child.stdin.write(b"ping\n")
            child.stdin.flush()
            child.stdout.readline()
            times.append(time.perf_counter() - t0)
    finally:
        child.kill()
        child.wait()
    return statistics.median(times)


def _realised_pipe(spin: int, rounds: int = 6) -> float:
    """Q25/A - 1 of the round trip: the two children in turn, median of the ratios."""
    spun = ECHO_SPIN.format(spin=spin)
    ratios = []
    for i in range(rounds):  # a tuple's items are evaluated left to right
        if i % 2 == 0:
            base, slow = _round_trip(ECHO, 1000), _round_trip(spun, 1000)
        else:
            slow, base = _round_trip(spun, 1000), _round_trip(ECHO, 1000)
        ratios.append(slow / base)
    return statistics.median(ratios) - 1.0


def calibrate_pipe(n: int) -> tuple[int, float]:
    """The child's loop (``SPIN`` iterations of ``work``'s body, N of which take ~100 µs)
    for a round trip ~25% slower, corrected twice by measurement; and what it realised."""
    from false_alarms import TARGET_S

    rt = min(_round_trip(ECHO, 2000) for _ in range(3))
    spin = max(1, round(PIPE_SLOWDOWN * rt * n / TARGET_S))
    realised = _realised_pipe(spin)
    for _ in range(2):
        spin = max(1, round(spin * PIPE_SLOWDOWN / max(realised, 0.01)))
        realised = _realised_pipe(spin)
    return spin, realised


def build(root: Path, pipe_band: float | None = None) -> dict[str, Any]:
    """The repository with A, A2, P5, P2 and Q25; the calibration it used (``pipe_band``:
    the noise band the ``pipe`` regime declares, ``@regime(threshold=)``)."""
    from false_alarms import calibrate  # ~100 µs of CPU, checked linear in iterations

    n, _, _ = calibrate()
    spin, realised = calibrate_pipe(n)
    init_repo(root)
    (root / ".gitignore").write_text(".perfctl/\n__pycache__/\n")
    (root / "pyproject.toml").write_text(PYPROJECT)
    declared = f"@regime(threshold={pipe_band!r})\ndef pipe" if pipe_band else "@regime\ndef pipe"
    (root / "perf_regimes.py").write_text(REGIMES.replace("@regime\ndef pipe", declared))
    mod = root / "noisy.py"
    extras = {"A": 0, "A2": 0, "P5": round(0.05 * n), "P2": round(0.02 * n), "Q25": 0}
    shas = {}
    for tag, extra in extras.items():
        comment = "only this comment differs" if tag == "A2" else f"revision {tag}"
        q25 = tag == "Q25"
        echo = ECHO_SPIN.format(spin=spin) if q25 else ECHO
        mod.write_text(MODULE.format(comment=comment, n=n, extra=extra, echo=echo))
        shas[tag] = commit(root, f"{tag}: extra {extra}" + (f", spin {spin}" if q25 else ""), tag)
    return {
        "n": n,
        "extras": extras,
        "spin": spin,
        "pipe_realised": realised,  # Q25's round trip against A's, measured at build
        "shas": shas,
        "pipe_band": pipe_band,
    }


def executable(args: list[str]) -> tuple[str, list[str]]:
    """A design's perfctl (``exe=PATH`` as its first word: another checkout's, to put two
    revisions side by side in one run) and its compare arguments."""
    if args and args[0].startswith("exe="):
        exe = shutil.which(os.path.expanduser(args[0][4:]))  # compare() runs elsewhere
        if exe is None:
            raise SystemExit(f"{args[0]}: no such executable")
        return os.path.abspath(exe), args[1:]
    return tool("perfctl"), args


def revision(exe: str) -> str:
    """The git revision of the perfctl that ``exe`` runs (``+`` when its tree is edited)."""
    if exe == tool("perfctl"):
        from false_alarms import perfctl_rev

        return perfctl_rev()
    python = Path(exe).with_name("python")
    code = "import os, perfctl; print(os.path.dirname(perfctl.__file__))"
    # -I: the working folder (another perfctl checkout, maybe) stays off sys.path.
    src = subprocess.run(
        [str(python), "-I", "-c", code], capture_output=True, text=True, check=True
    )
    # As perfctl_rev() names this checkout's (an installed, not editable, perfctl has
    # no repository: "unknown").
    git = ["git", "-C", src.stdout.strip(), "describe", "--always", "--dirty"]
    out = subprocess.run(git, capture_output=True, text=True, check=False)
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def compare(root: Path, head: str, args: list[str]) -> dict[str, Any]:
    """One default `perfctl compare A HEAD`; its rows by regime and its wall time."""
    exe, args = executable(args)
    t = timed([exe, "compare", "A", head, "--format", "json", *args], root)
    try:
        out = json.loads(t.stdout)
    except ValueError:
        return {"wall": t.wall, "rc": t.rc, "rows": {}, "error": (t.stderr or t.stdout)[-500:]}
    rows = {
        r["name"]: {
            "verdict": r["verdict"],
            "change": r.get("change"),
            "ci": [r.get("ci_low"), r.get("ci_high")],
            "processes": len(r.get("base_values") or ()),
            "reason": r.get("reason", ""),
            "seconds": r.get("seconds", 0.0),  # this regime's own measuring time
        }
        for r in out.get("regimes", [])
    }
    return {
        "wall": t.wall,
        "rc": t.rc,
        "rows": rows,
        "id": out.get("id"),
        "held": (out.get("settings") or {}).get("burst_held"),
        "warnings": out.get("warnings", []),
    }


def start(condition: str) -> subprocess.Popen[bytes] | None:
    """The condition's competitor, running."""
    code = COMPETITORS[condition]
    return None if code is None else subprocess.Popen([sys.executable, "-c", code])


def run(args: argparse.Namespace) -> Path:
    """Every condition × trial × design; the JSONL file written."""
    work = Path(args.workdir)
    root = work / "project"
    meta_file = work / "meta.json"
    if meta_file.exists():
        meta = json.loads(meta_file.read_text())
        if "Q25" not in meta["shas"]:
            raise SystemExit(
                f"{work} was built before the Q25 commit: delete it or use another --workdir"
            )
        if meta.get("pipe_band") != args.pipe_band:
            raise SystemExit(
                f"{work} was built with --pipe-band {meta.get('pipe_band')}: use another --workdir"
            )
    else:
        work.mkdir(parents=True, exist_ok=True)
        meta = build(root, args.pipe_band)
        meta_file.write_text(json.dumps(meta, indent=2))
    designs = {k: DESIGNS[k] for k in args.designs.split(",") if k in DESIGNS}
    for spec in args.design:
        name, _, extra = spec.partition("=")
        designs[name] = shlex.split(extra)
    for head in PAIRS:  # builds the environments: not counted
        timed([tool("perfctl"), "compare", "A", head, "--fast", "--format", "json"], root)
    revs = {name: revision(executable(extra)[0]) for name, extra in designs.items()}
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"noisy-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    print(f"writing {out}", file=sys.stderr)
    print(f"Q25: pipe round trip {meta['pipe_realised']:+.1%} at build", file=sys.stderr)
    pairs = {h: x for h, x in PAIRS.items() if h in args.heads.split(",")}
    only = [a for g in args.regime for a in ("--regime", g)]  # the regimes asked for
    for condition in args.conditions.split(","):
        hog = start(condition)
        try:
            for i in range(args.n):
                names = list(designs)
                names = names[i % len(names) :] + names[: i % len(names)]
                for design in names:
                    for head, (changed, injected) in pairs.items():
                        before = load()
                        got = compare(root, head, [*designs[design], *only])
                        rec = {
                            "perfctl": revs[design],
                            "condition": condition,
                            "design": design,
                            "args": [*designs[design], *only],
                            "trial": i,
                            "head": head,
                            "changed": changed,  # the regime the change was injected into
                            "injected": injected,
                            "load_before": before,
                            "load_after": load(),
                            "cpus": len(CPUS),
                            **got,
                        }
                        with out.open("a") as f:
                            f.write(json.dumps(rec) + "\n")
                        verdicts = {k: v["verdict"] for k, v in got["rows"].items()}
                        print(
                            f"{condition} {design} #{i} A→{head}: {verdicts} "
                            f"({got['wall']:.0f} s, load {before})",
                            file=sys.stderr,
                        )
        finally:
            if hog is not None:
                hog.kill()
                hog.wait()
    return out


def _results(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (compare, regime): what was injected into that regime (records made
    before ``changed`` was stored injected into ``work`` alone), and its time:
    the regime's own measuring time where perfctl recorded it (``seconds``), else (older
    records) the comparison's wall time shared equally among its regimes."""
    rows = []
    for r in recs:
        n = max(1, len(r["rows"]))
        for name, row in r["rows"].items():
            injected = r["injected"] if name == r.get("changed", "work") else 0.0
            wall = row.get("seconds") or r["wall"] / n
            rows.append({**row, "regime": name, "injected": injected, "wall": wall})
    return rows


def _share(rows: list[dict[str, Any]], verdicts: tuple[str, ...]) -> str:
    """How many of ``rows`` read one of ``verdicts``, with its interval; "–" for none ran."""
    return rate(sum(r["verdict"] in verdicts for r in rows), len(rows)) if rows else "–"


def _median_s(xs: list[float]) -> str:
    return f"{statistics.median(xs):.0f} s" if xs else "–"


def _cell(rec: dict[str, Any]) -> tuple[str, str, str]:
    """Condition, design and perfctl revision (short) of one record."""
    return rec["condition"], rec["design"], str(rec.get("perfctl", ""))[:7]


def summarize(recs: list[dict[str, Any]]) -> str:
    """The Markdown table, one line per condition × design."""
    lines = [
        "| condition | design | A/A false verdicts | unchanged: no change | unchanged: "
        "inconclusive | +5% detected | +2% detected | +2% called no change, CI excluding it "
        "| +2% called no change (any CI) "
        "| work A/A: no change | pipe A/A false | pipe: no change | pipe Q25 detected "
        "| median s/regime, +5% | median s/regime, +2% "
        "| median s/regime, unchanged (work A/A / pipe) "
        "| median s/regime, pipe Q25 | load (1-min) |",
        "|" + "---|" * 18,
    ]
    # Records of different perfctl revisions are never pooled: each is its own cell.
    cells = list(dict.fromkeys(map(_cell, recs)))
    revs = {rev for _, _, rev in cells}
    for condition, design, rev in cells:
        mine = [r for r in recs if _cell(r) == (condition, design, rev)]
        rows = _results(mine)
        same = [r for r in rows if r["injected"] == 0.0]
        p5 = [r for r in rows if r["injected"] == 0.05]
        p2 = [r for r in rows if r["injected"] == 0.02]
        q25 = [r for r in rows if r["injected"] == PIPE_SLOWDOWN]
        pipe = [r for r in same if r["regime"] == "pipe"]
        work = [r for r in same if r["regime"] == "work"]  # the in-process A/A
        dishonest = [r for r in p2 if r["verdict"] == "no change" and (r["ci"][1] or 0.0) < 0.02]
        loads = [float(r["load_before"].split()[0]) for r in mine]
        lines.append(
            "| "
            + " | ".join(
                [
                    condition,
                    f"{design} @{rev}" if len(revs) > 1 else design,
                    _share(same, ALARMS),
                    _share(same, ("no change",)),
                    _share(same, ("inconclusive",)),
                    _share(p5, ("regressed",)),
                    _share(p2, ("regressed",)),
                    f"{len(dishonest)}/{len(p2)}" if p2 else "–",
                    _share(p2, ("no change",)),
                    _share(work, ("no change",)),
                    _share(pipe, ALARMS),
                    _share(pipe, ("no change",)),
                    _share(q25, ("regressed",)),
                    _median_s([r["wall"] for r in p5]),
                    _median_s([r["wall"] for r in p2]),
                    f"{_median_s([r['wall'] for r in work])} / "
                    f"{_median_s([r['wall'] for r in pipe])}",
                    _median_s([r["wall"] for r in q25]),
                    f"{statistics.median(loads):.1f} ({min(loads):.1f}–{max(loads):.1f})"
                    if loads
                    else "–",
                ]
            )
            + " |"
        )
    lines.append(
        "\nWall time per regime is the time perfctl spent measuring that regime (its "
        "`seconds`, both refs, calibration included); records made before perfctl "
        "recorded it share the comparison's wall time equally among its regimes. "
        "Rates: k/n = p% [Wilson 95%]."
    )
    return "\n".join(lines)


def _selection_error(args: argparse.Namespace) -> str | None:
    """An unknown condition, design or head, or nothing to run, said; a typo would drop a
    cell silently."""
    asked: dict[str, tuple[str, list[str]]] = {
        "--conditions": (args.conditions, list(COMPETITORS)),
        "--designs": (args.designs, [*DESIGNS, "none"]),
        "--heads": (args.heads, list(PAIRS)),
    }
    for flag, (value, known) in asked.items():
        if unknown := [name for name in value.split(",") if name not in known]:
            return f"{flag}: unknown {', '.join(unknown)} (known: {', '.join(known)})"
    if args.designs == "none" and not args.design and not args.summarize:
        return "--designs none runs only the --design ones, and none is given"
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20, help="trials per condition and design")
    ap.add_argument("--conditions", default="quiet,hog,bursty")
    ap.add_argument(
        "--designs", default="today,auto", help="built-in designs to run ('none': only --design)"
    )
    ap.add_argument(
        "--design", action="append", default=[], help="NAME='perfctl compare args' (repeatable)"
    )
    ap.add_argument("--heads", default="A2,P5,P2", help="which comparisons (A→head) to run")
    ap.add_argument(
        "--regime", action="append", default=[], help="measure only these regimes (repeatable)"
    )
    ap.add_argument("--workdir", default=str(RESULTS / "noisy-work"))
    ap.add_argument(
        "--pipe-band", type=float, help="the pipe regime declares this noise band (0.10 = 10%%)"
    )
    ap.add_argument("--summarize", nargs="+", help="summarize these JSONL files only")
    args = ap.parse_args()
    if problem := _selection_error(args):
        ap.error(problem)
    # A plain kill unwinds like Ctrl-C, so run()'s finally stops the competitor it started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    if args.summarize:
        recs = [json.loads(x) for f in args.summarize for x in Path(f).read_text().splitlines()]
    else:
        path = run(args)
        recs = [json.loads(x) for x in path.read_text().splitlines()]
    print(summarize(recs))


if __name__ == "__main__":
    main()
