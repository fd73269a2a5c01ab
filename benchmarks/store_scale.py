"""The shared PostgreSQL store against the embedded SQLite one, at scale.

Targets (issue #16): writing and reading 10,000 stored comparisons' index rows,
and reading the history of 500 runs x 50 regimes (what `report --history`
loads) from PostgreSQL within 2x the time from SQLite. A throw-away server is
started the way the test suite does (tests/pg.py: initdb into a temporary
directory, a free local port). Data is synthetic (seeded), shaped like
render_scale.py's: 20 processes x 3 values per regime.

    python benchmarks/store_scale.py [--comparisons 10000] [--runs 500] [--regimes 50]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.render_scale import make_comparison, make_runs  # noqa: E402
from perfctl.store.local import SqliteStore  # noqa: E402
from perfctl.store.postgres import PostgresStore  # noqa: E402
from tests.pg import running_server  # noqa: E402


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def index_rows(store: Any, n: int) -> dict[str, float]:
    """Write n small comparisons, then list them and look one up by its commits."""
    base = replace(make_comparison(2), settings={})
    items = [
        replace(base, id=f"c{i:06d}", created=f"2026-01-01T00:00:{i % 60:02d}") for i in range(n)
    ]
    write, _ = _timed(lambda: [store.save_comparison(c) for c in items])
    read, listed = _timed(store.list_comparisons)
    find, _ = _timed(lambda: store.find_comparison(base.base.sha, base.head.sha))
    assert len(listed) == n
    return {"write_s": write, "list_s": read, "find_s": find}


def history(store: Any, runs: int, regimes: int) -> dict[str, float]:
    """Store ``runs`` runs of ``regimes`` results, then load them all (report --history)."""
    made = make_runs(runs, regimes)
    write, _ = _timed(lambda: [store.begin_run(r) for r in made])
    read, loaded = _timed(store.list_runs)
    assert len(loaded) == runs and all(len(r.results) == regimes for r in loaded)
    return {"write_s": write, "read_s": read}


def main(argv: list[str] | None = None) -> int:
    """Run both measurements on both stores and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--comparisons", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--regimes", type=int, default=50)
    args = parser.parse_args(argv)
    with running_server() as server, tempfile.TemporaryDirectory() as tmp:
        stores = {
            "sqlite": lambda name: SqliteStore(Path(tmp) / name),
            "postgresql": lambda name: PostgresStore(
                server.create_database(name), Path(tmp) / f"pg-{name}"
            ),
        }
        rows = {}
        for kind, make in stores.items():
            rows[kind] = {
                **{f"index_{k}": v for k, v in index_rows(make("idx"), args.comparisons).items()},
                **{f"history_{k}": v for k, v in history(make("hist"), args.runs, args.regimes).items()},
            }  # fmt: skip
    print(f"{args.comparisons} comparisons; history {args.runs} runs x {args.regimes} regimes")
    print(f"{'':<22}{'sqlite':>10}{'postgresql':>12}{'ratio':>8}")
    for key in rows["sqlite"]:
        a, b = rows["sqlite"][key], rows["postgresql"][key]
        print(f"{key:<22}{a:>9.2f}s{b:>11.2f}s{b / a if a else float('nan'):>8.2f}")
    ratio = rows["postgresql"]["history_read_s"] / rows["sqlite"]["history_read_s"]
    print(f"history read: PostgreSQL / SQLite = {ratio:.2f} (target <= 2)")
    return 0 if ratio <= 2 else 1


if __name__ == "__main__":
    sys.exit(main())
