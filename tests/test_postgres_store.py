"""The shared PostgreSQL store, against a real server started by the suite (tests/pg.py)."""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest

from perfctl.caveats import WarningKind
from perfctl.config import load_config
from perfctl.errors import StoreError
from perfctl.model import Comparison, RefInfo, RegimeResult, Run, Status
from perfctl.store import migrations
from perfctl.store.local import SqliteStore, open_store
from perfctl.store.postgres import PostgresStore
from perfctl.store.url import redact, scrub
from tests.conftest import run_cli
from tests.pg import PASSWORD, PgServer
from tests.test_report import MACHINE, make_comparison

REPO = Path(__file__).resolve().parents[1]


def _run(rid: str, started: str, sha: str = "c" * 40) -> Run:
    return Run(id=rid, project="p", ref=RefInfo("main", sha), machine=MACHINE, started=started)


def _exercise(store: SqliteStore | PostgresStore, pyperf: Path) -> dict[str, object]:
    """The same calls on either store; returns what they gave back."""
    store.begin_run(_run("20260101T000000-abcdef", "2026-01-01T00:00:00"))
    first = RegimeResult("r[x=1]", "f", Status.OK, processes=((1.0, 2.0), (3.0, 4.0)), order=(0, 1))
    store.save_result("20260101T000000-abcdef", first, pyperf)
    rid = "20260101T000000-abcdef"
    store.save_result(rid, RegimeResult("r[x=2]", "f", Status.FAILED, reason="boom"), None)
    store.save_result(rid, replace(first, processes=((5.0,),)), pyperf)  # replaced
    done = store.finish_run("20260101T000000-abcdef", "complete")
    c = make_comparison()
    older = replace(c, id="20251231T000000-111111", created="2025-12-31T00:00:00+00:00")
    store.save_comparison(older)
    edited = replace(c.head, dirty=True)  # a worktree with edits: never an exact pair
    made = "2025-12-30T00:00:00+00:00"
    store.save_comparison(replace(c, id="20251230T000000-222222", created=made, head=edited))
    store.save_comparison(c)
    store.save_comparison(c)  # saving again replaces, never duplicates
    store.mark_pending("k1", {"base": done.id, "head": done.id})
    return {
        "run": replace(store.load_run("20260101T0"), finished=""),  # a clock reading
        "finished": done.status,
        "runs": [r.id for r in store.list_runs()],
        "comparison": store.load_comparison("20260101"),
        "listed": [x.id for x in store.list_comparisons()],
        "last": store.last_comparison().id,
        "between": [x.id for x in store.comparisons_between("a" * 40, "b" * 40)],
        "of": [x.id for x in store.comparisons_of("b" * 40, "c" * 40)],  # either side
        "pending": store.pending("k1"),  # the run is complete: not resumable
    }


def test_round_trip_matches_the_sqlite_store(pg_url: str, tmp_path: Path) -> None:
    pyperf = tmp_path / "bench.json"
    pyperf.write_text('{"version": "1.0", "benchmarks": []}', encoding="utf-8")
    pg = _exercise(PostgresStore(pg_url, tmp_path / "pgstate"), pyperf)
    local = _exercise(SqliteStore(tmp_path / "local"), pyperf)
    assert pg == local
    run = pg["run"]
    assert isinstance(run, Run)
    assert [r.name for r in run.results] == ["r[x=2]", "r[x=1]"]
    assert run.results[1].processes == ((5.0,),) and run.results[1].pyperf_file
    assert (tmp_path / "pgstate" / run.results[1].pyperf_file).read_text().startswith('{"version"')
    assert pg["comparison"] == make_comparison()
    for c in (pg["comparison"], local["comparison"]):  # equality is the texts': kinds too
        assert isinstance(c, Comparison)
        assert [w.kind for w in c.warnings] == [WarningKind.BUSY_MACHINE]
    assert pg["listed"] == [
        "20260101T000000-abcdef", "20251231T000000-111111", "20251230T000000-222222"
    ]  # fmt: skip
    assert pg["of"] == pg["listed"]  # comparisons_of: newest first, head side matched too
    assert pg["between"] == pg["listed"][:2]  # the edited worktree's is no exact pair
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT count(*), count(DISTINCT verdict) FROM comparison_regimes "
            "WHERE comparison_id = %s",
            (make_comparison().id,),
        )
        assert rows.fetchone() == (len(make_comparison().regimes), 7)  # saved twice, kept once
        stored = conn.execute("SELECT pyperf FROM results WHERE regime = 'r[x=1]'").fetchone()
        assert stored == (pyperf.read_text(),)


def test_unknown_and_ambiguous_ids_and_an_empty_store(pg_url: str, tmp_path: Path) -> None:
    store = PostgresStore(pg_url, tmp_path)
    with pytest.raises(StoreError, match="no comparison is stored yet"):
        store.last_comparison()
    store.begin_run(_run("20260101T000000-aaaaaa", "2026-01-01T00:00:00"))
    store.begin_run(_run("20260101T000000-bbbbbb", "2026-01-01T00:00:01"))
    with pytest.raises(StoreError, match="run id `2026` is ambiguous"):
        store.load_run("2026")
    with pytest.raises(StoreError, match="unknown run id `nope%`"):
        store.load_run("nope%")
    assert store.comparisons_between("a" * 40, "b" * 40) == []


def test_resume_markers_belong_to_this_machine(pg_url: str, tmp_path: Path) -> None:
    store = PostgresStore(pg_url, tmp_path)
    store.begin_run(_run("20260101T000000-aaaaaa", "2026-01-01T00:00:00"))
    store.mark_pending("k", {"base": "20260101T000000-aaaaaa", "head": "20260101T000000-aaaaaa"})
    pending = store.pending("k")
    assert pending is not None and pending["base"].status == "running"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE pending SET host = 'another-runner'")
    assert store.pending("k") is None  # another runner's half-done runs are never resumed here
    store.clear_pending("k")


def test_schema_is_versioned_and_a_newer_one_is_refused(pg_url: str, tmp_path: Path) -> None:
    PostgresStore(pg_url, tmp_path).list_runs()
    PostgresStore(pg_url, tmp_path).list_runs()  # a second open applies nothing again
    with psycopg.connect(pg_url, autocommit=True) as conn:
        rows = conn.execute("SELECT version FROM schema_version ORDER BY version").fetchall()
        assert [r[0] for r in rows] == [m.version for m in migrations.MIGRATIONS]
        conn.execute("INSERT INTO schema_version (version, description) VALUES (99, 'future')")
    with pytest.raises(StoreError, match="has schema version 99; this perfctl knows up to 1"):
        PostgresStore(pg_url, tmp_path).list_runs()


WRITER = """
import sys
from dataclasses import replace
from pathlib import Path
from perfctl.model import RegimeResult, RefInfo, Run
from perfctl.store.postgres import PostgresStore
from tests.test_report import MACHINE, make_comparison

url, who, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = PostgresStore(url, Path(sys.argv[4]))
run = Run(id=f"run-{who}", project="p", ref=RefInfo("main", "c" * 40), machine=MACHINE,
          started="2026-01-01T00:00:00")
store.begin_run(run)
for i in range(n):
    store.save_result(run.id, RegimeResult(f"r{i}", "f", "ok", processes=((float(i),),)), None)
    c = make_comparison(seed=i)
    store.save_comparison(replace(c, id=f"{who}-{i:03d}", created=f"2026-01-01T00:00:{i:02d}"))
store.finish_run(run.id, "complete")
"""


def test_concurrent_writers_lose_nothing(pg_url: str, tmp_path: Path) -> None:
    # Four processes on a fresh database: they also race to apply the migrations.
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, pg_url, f"w{k}", "15", str(tmp_path / f"s{k}")],
            cwd=REPO,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for k in range(4)
    ]
    errors = [p.communicate(timeout=240)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, errors
    store = PostgresStore(pg_url, tmp_path)
    assert len(store.list_comparisons()) == 60
    runs = store.list_runs()
    assert sorted(r.id for r in runs) == [f"run-w{k}" for k in range(4)]
    assert all(r.status == "complete" and len(r.results) == 15 for r in runs)
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM schema_version").fetchone() == (1,)


KILLED = """
import sys, time
from pathlib import Path
from perfctl.store import postgres
from tests.test_report import make_comparison

real = postgres._index_regimes

def stall(db, c):
    real(db, c)  # the comparison row and its regime rows are written, not committed
    print("inside", flush=True)
    time.sleep(600)

postgres._index_regimes = stall
postgres.PostgresStore(sys.argv[1], Path(sys.argv[2])).save_comparison(make_comparison())
"""


def test_a_writer_killed_mid_transaction_leaves_nothing_half_written(
    pg_url: str, tmp_path: Path
) -> None:
    store = PostgresStore(pg_url, tmp_path)
    before = replace(make_comparison(), id="20250101T000000-000000")
    store.save_comparison(before)
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED, pg_url, str(tmp_path)],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "inside"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    fresh = PostgresStore(pg_url, tmp_path)
    assert [c.id for c in fresh.list_comparisons()] == [before.id]
    with psycopg.connect(pg_url) as conn:
        orphans = conn.execute(
            "SELECT count(*) FROM comparison_regimes WHERE comparison_id <> %s", (before.id,)
        ).fetchone()
        assert orphans == (0,)
    fresh.save_comparison(make_comparison())  # the killed writer holds no lock any more
    assert fresh.last_comparison().id == make_comparison().id


def _project(tmp_path: Path, store: str | None = None) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    extra = f'store = "{store}"\n' if store else ""
    (root / "perfctl.toml").write_text(f'regimes = ["bench.py"]\n{extra}', encoding="utf-8")
    return root


def test_wrong_password_is_a_clear_error_without_the_password(
    pg_server: PgServer, pg_url: str, tmp_path: Path
) -> None:
    root = _project(tmp_path)
    bad = pg_url.replace(PASSWORD, "Wr0ng-pa55word")
    out = run_cli("comparisons", cwd=root, env={"PERFCTL_STORE_URL": bad})
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith(f"Error: cannot log in to the store {redact(bad)}: ")
    assert "Hint: check the user and password" in out.stderr
    assert "Wr0ng-pa55word" not in out.stdout + out.stderr and "Traceback" not in out.stderr
    closed = f"postgresql://perfctl:{PASSWORD}@127.0.0.1:1/db"
    down = run_cli("runs", cwd=root, env={"PERFCTL_STORE_URL": closed})
    assert down.returncode == 3 and down.stderr.startswith("Error: cannot connect to the store")
    assert PASSWORD not in down.stdout + down.stderr


def test_store_url_in_config_env_first_and_never_in_repr(pg_url: str, tmp_path: Path) -> None:
    root = _project(tmp_path, store=pg_url.replace(PASSWORD, "from-config"))
    config = load_config(root)
    assert config.state_dir == root / ".perfctl" and "from-config" in (config.store_url or "")
    assert "from-config" not in repr(config)
    os.environ["PERFCTL_STORE_URL"] = pg_url
    try:
        config = load_config(root)
    finally:
        del os.environ["PERFCTL_STORE_URL"]
    assert config.store_url == pg_url
    store = open_store(config.state_dir, config.store_url)
    assert isinstance(store, PostgresStore) and PASSWORD not in repr(store)


def test_a_store_url_that_is_no_postgresql_url_is_a_config_error(tmp_path: Path) -> None:
    root = _project(tmp_path)
    out = run_cli("runs", cwd=root, env={"PERFCTL_STORE_URL": "host=db password=Pw-in-dsn"})
    assert out.returncode == 2
    assert out.stderr.startswith("Error: PERFCTL_STORE_URL is not a postgresql:// URL (***)")
    assert "Pw-in-dsn" not in out.stderr


def test_a_missing_database_is_a_usage_error(pg_server: PgServer, tmp_path: Path) -> None:
    out = run_cli(
        "runs", cwd=_project(tmp_path), env={"PERFCTL_STORE_URL": pg_server.url("no_such_db")}
    )
    assert out.returncode == 2 and out.stderr.startswith("Error: cannot open the store")
    assert "Hint: create the database and role" in out.stderr and PASSWORD not in out.stderr


def test_redaction_covers_the_authority_the_query_and_encoded_forms() -> None:
    url = "postgresql://bob:p%40ss@db.example:5432/perf?sslmode=require&password=q"
    assert redact(url) == "postgresql://bob:***@db.example:5432/perf?sslmode=require&password=***"
    said = scrub(f"failed for {url} with p@ss and p%40ss", url)
    assert "p@ss" not in said and "p%40ss" not in said and "db.example:5432" in said


def test_every_store_opened_by_perfctl_is_given_the_url() -> None:
    """A job that opened the store without the URL would silently write to SQLite."""
    missing = []
    for path in (REPO / "perfctl").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "open_store"
                and len(node.args) + len(node.keywords) < 2
            ):
                missing.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert missing == []


def test_listings_name_the_shared_store_without_its_password(pg_url: str, tmp_path: Path) -> None:
    PostgresStore(pg_url, tmp_path).save_comparison(make_comparison())
    root = _project(tmp_path)
    out = run_cli("comparisons", cwd=root, env={"PERFCTL_STORE_URL": pg_url})
    assert out.returncode == 0, out.stderr
    assert f"1 comparisons in {redact(pg_url)}" in out.stdout + out.stderr
    assert make_comparison().id in out.stdout and PASSWORD not in out.stdout + out.stderr


def test_clean_keeps_a_shared_store(pg_url: str, tmp_path: Path) -> None:
    root = _project(tmp_path)
    env = {"PERFCTL_STORE_URL": pg_url}
    everything = run_cli("clean", cwd=root, env=env)
    assert everything.returncode == 0, everything.stderr
    assert f"kept the shared store {redact(pg_url)}" in everything.stdout + everything.stderr
    results = run_cli("clean", "--results", cwd=root, env=env)
    assert results.returncode == 2 and "is not removed by `perfctl clean`" in results.stderr
    assert PASSWORD not in everything.stdout + everything.stderr + results.stderr


def _shard_projects(tmp_path: Path) -> list[Path]:
    """test_shard.py's project (c1, then c2 with `slow` five times slower), cloned twice."""
    from tests.conftest import GitRepo
    from tests.test_shard import CODE, PYPROJECT, REGIMES

    origin = GitRepo(tmp_path / "origin")
    origin.path.mkdir()
    origin.git("init", "-q", "-b", "main")
    origin.write("pyproject.toml", PYPROJECT)
    origin.write("bench/regimes.py", REGIMES)
    for tag, n in (("c1", 2000), ("c2", 10000)):
        origin.write("sh/__init__.py", CODE.format(n=n))
        origin.commit(tag)
        origin.tag(tag)
    clones = [tmp_path / f"runner{k}" for k in (1, 2)]
    for clone in clones:
        origin.git("clone", "-q", str(origin.path), str(clone))
    return clones


@pytest.mark.slow
def test_shards_from_two_projects_at_once_merge_from_the_store(pg_url: str, tmp_path: Path) -> None:
    """Two "runners" (separate clones) store their shard in one database at the same time."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.test_shard import FAST

    runners, env = _shard_projects(tmp_path), {"PERFCTL_STORE_URL": pg_url}

    def shard(k: int) -> subprocess.CompletedProcess[str]:
        return run_cli(
            "compare", "c1", "c2", *FAST, "--shard", f"{k}/2", "--shard-run", "pg1",
            "--format", "json", cwd=runners[k - 1], env=env,
        )  # fmt: skip

    with ThreadPoolExecutor(2) as pool:
        outs = list(pool.map(shard, (1, 2)))
    assert [o.returncode for o in outs] == [0, 0], [o.stderr for o in outs]
    ids = [json.loads(o.stdout)["id"] for o in outs]
    merged = run_cli("merge", *ids, "--format", "json", cwd=runners[0], env=env)
    assert merged.returncode == 0, merged.stderr
    result = json.loads(merged.stdout)
    verdicts = {r["name"]: r["verdict"] for r in result["regimes"]}
    assert verdicts["slow"] == verdicts["also_slow"] == "regressed"
    assert [m["comparison"] for m in result["settings"]["merged_from"]] == ids
    # The other runner merges the same shards straight from the shared store.
    again = run_cli("merge", "--shard-run", "pg1", "--format", "json", cwd=runners[1], env=env)
    assert again.returncode == 0, again.stderr
    assert {r["name"]: r["verdict"] for r in json.loads(again.stdout)["regimes"]} == verdicts
    # The other runner's project sees every comparison, the merged one included.
    listed = run_cli("comparisons", "--format", "json", cwd=runners[1], env=env)
    assert {result["id"], *ids} <= {c["id"] for c in json.loads(listed.stdout)}
    assert not (runners[0] / ".perfctl" / "store.sqlite").exists()
