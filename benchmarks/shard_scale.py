"""Four shards of a 40-regime suite against one unsharded run: same verdicts, wall ≈ slowest shard.

The issue #16 target: 4 shards run as 4 concurrent processes on 4 separate
temporary projects (clones) sharing one PostgreSQL store, merged from that
store by `perfctl merge --shard-run`, give the same verdict as an unsharded
run of the same commits for every clearly changed regime, and the sharded
wall time is about the slowest shard's. The suite: 40 regimes of a summing
loop; the head commit makes 8 of them 2x slower and 8 of them 2x faster and
leaves 24 alone. A throw-away PostgreSQL server is started like the tests do.

    python benchmarks/shard_scale.py [--regimes 40] [--shards 4] [--perfctl-args "--fast"]

On a machine with fewer cores than shards the concurrent shards share the
cores, so the speed-up is bounded by the core count; the line "wall / slowest
shard" is the target, "speed-up" is what this machine could give.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _peers import commit, init_repo  # noqa: E402

from tests.pg import running_server  # noqa: E402

PYPROJECT = """\
[project]
name = "scale"
version = "0.1"

[tool.perfctl]
regimes = ["bench/regimes.py"]
install = false
"""
TOY = """\
FACTOR = {factors!r}


def work(i):
    total = 0
    for k in range(int(1500 * FACTOR.get(i, 1.0))):
        total += k
    return total
"""
REGIME = """
@regime(family="scale")
def r{i:02d}():
    \"\"\"Regime {i}.\"\"\"
    yield lambda: toy.work({i})
"""


def make_project(path: Path, regimes: int, changed: int) -> tuple[str, str, dict[str, str]]:
    """A git project with a base and a head commit; the expected verdict per regime."""
    init_repo(path)
    (path / "pyproject.toml").write_text(PYPROJECT)
    (path / ".gitignore").write_text(".perfctl/\nreports/\n")
    (path / "bench").mkdir()
    body = "from perfctl import regime\nimport toy\n" + "".join(
        REGIME.format(i=i) for i in range(regimes)
    )
    (path / "bench" / "regimes.py").write_text(body)
    (path / "toy.py").write_text(TOY.format(factors={}))
    base = commit(path, "base")
    factors = {i: 2.0 for i in range(changed)}
    factors.update({i: 0.5 for i in range(changed, 2 * changed)})
    (path / "toy.py").write_text(TOY.format(factors=factors))
    head = commit(path, "head")
    expected = {
        f"r{i:02d}": "regressed" if i < changed else "improved" if i < 2 * changed else "no change"
        for i in range(regimes)
    }
    return base, head, expected


def _perfctl(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "perfctl", *args],
        cwd=cwd,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _verdicts(out: str) -> dict[str, str]:
    return {r["name"]: r["verdict"] for r in json.loads(out)["regimes"]}


def run(args: argparse.Namespace, url: str, tmp: Path) -> dict[str, object]:
    """Sharded (concurrent clones) then unsharded; verdicts and wall times."""
    source = tmp / "source"
    base, head, expected = make_project(source, args.regimes, args.changed)
    env = {**os.environ, "PERFCTL_STORE_URL": url}
    extra = shlex.split(args.perfctl_args)
    clones = []
    for k in range(1, args.shards + 1):
        clones.append(tmp / f"shard{k}")
        subprocess.run(["git", "clone", "-q", str(source), str(clones[-1])], check=True)
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    procs = [
        (time.perf_counter(), _perfctl(
            ["compare", base, head, *extra, "--shard", f"{k}/{args.shards}",
             "--shard-run", "bench", "--format", "json"], clones[k - 1], env,
        ))
        for k in range(1, args.shards + 1)
    ]  # fmt: skip
    shard_walls = []
    for began, proc in procs:
        _out, err = proc.communicate()
        shard_walls.append(time.perf_counter() - began)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"a shard failed ({proc.returncode}): {err[-2000:]}")
    sharded_wall = time.perf_counter() - start
    load_sharded = os.getloadavg()[0]
    merge = _perfctl(["merge", "--shard-run", "bench", "--format", "json"], clones[0], env)
    merged_out, merged_err = merge.communicate()
    if merge.returncode not in (0, 1):
        raise SystemExit(f"merge failed ({merge.returncode}): {merged_err[-2000:]}")
    start = time.perf_counter()
    whole = _perfctl(["compare", base, head, *extra, "--format", "json"], source, env)
    whole_out, whole_err = whole.communicate()
    whole_wall = time.perf_counter() - start
    if whole.returncode not in (0, 1):
        raise SystemExit(f"the unsharded run failed: {whole_err[-2000:]}")
    return {
        "expected": expected,
        "merged": _verdicts(merged_out),
        "whole": _verdicts(whole_out),
        "shard_walls": shard_walls,
        "sharded_wall": sharded_wall,
        "whole_wall": whole_wall,
        "load": (load_before, load_sharded, os.getloadavg()[0]),
    }


def report(r: dict[str, object]) -> int:
    """Print the table; exit 1 when a clearly changed regime's verdicts differ."""
    expected, merged, whole = r["expected"], r["merged"], r["whole"]
    assert isinstance(expected, dict) and isinstance(merged, dict) and isinstance(whole, dict)
    changed = [n for n, v in expected.items() if v != "no change"]
    same_changed = sum(merged.get(n) == whole.get(n) for n in changed)
    right = {
        k: sum(v.get(n) == expected[n] for n in expected)
        for k, v in (("merged", merged), ("unsharded", whole))
    }
    same_all = sum(merged.get(n) == whole.get(n) for n in expected)
    walls = r["shard_walls"]
    assert isinstance(walls, list)
    sharded, unsharded = float(r["sharded_wall"]), float(r["whole_wall"])  # type: ignore[arg-type]
    print(
        f"regimes {len(expected)} ({len(changed)} clearly changed), cpus {os.cpu_count()}, "
        f"load 1-min before/after shards/after unsharded {r['load']}"
    )
    print(f"clearly changed: same verdict merged vs unsharded {same_changed}/{len(changed)}")
    print(f"all regimes:     same verdict merged vs unsharded {same_all}/{len(expected)}")
    print(
        f"verdict = expected: merged {right['merged']}/{len(expected)}, unsharded {right['unsharded']}/{len(expected)}"
    )
    for name in expected:
        if merged.get(name) != whole.get(name) or merged.get(name) != expected[name]:
            print(
                f"  {name}: expected {expected[name]}, merged {merged.get(name)}, unsharded {whole.get(name)}"
            )
    print(
        f"shard walls {', '.join(f'{w:.1f}' for w in walls)} s; sharded wall {sharded:.1f} s; "
        f"wall / slowest shard {sharded / max(walls):.2f}; unsharded {unsharded:.1f} s; "
        f"speed-up {unsharded / sharded:.2f}x"
    )
    return 0 if same_changed == len(changed) else 1  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Run the sharded and the unsharded comparison and print how they agree."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regimes", type=int, default=40)
    parser.add_argument(
        "--changed", type=int, default=8, help="regimes 2x slower (and as many 2x faster)"
    )
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--perfctl-args", default="--fast")
    args = parser.parse_args(argv)
    with running_server() as server, tempfile.TemporaryDirectory() as tmp:
        return report(run(args, server.create_database("shards"), Path(tmp)))


if __name__ == "__main__":
    sys.exit(main())
