"""The shared result store in PostgreSQL (``store = "postgresql://…"``).

The same :class:`~perfctl.store.local.Store` protocol as the embedded SQLite
store, for teams whose CI runners come and go: many perfctl processes on many
machines write to one database at once. Every write is one transaction (a
comparison with its regime index rows, a result with its pyperf file), so a
writer killed at any moment (SIGKILL included) leaves the old or the new
state and never half a comparison; concurrent writers never lose each other's
rows (each record has its own primary key, upserted). The schema is versioned
by :mod:`perfctl.store.migrations`.

Records are kept as the same versioned JSON text the SQLite store writes to
files; pyperf's own file per regime is kept in the database and copied under
the local state directory too, so ``python -m pyperf stats FILE`` still works on
the machine that measured. The URL's password is never printed: every error
goes through :func:`perfctl.store.url.scrub`.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from perfctl.errors import EXIT_FAILURE, ConfigError, StoreError
from perfctl.files import atomic_write_text
from perfctl.model import (
    Comparison,
    RegimeResult,
    Run,
    comparison_from_dict,
    run_from_dict,
    to_dict,
)
from perfctl.store import migrations
from perfctl.store.protocol import exact_pairs
from perfctl.store.url import redact, scrub

CONNECT_TIMEOUT_S = 15


class StoreUnreachable(StoreError):
    """The database server could not be reached (exit 3: a tool failure, maybe passing)."""

    exit_code = EXIT_FAILURE


def _driver() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise ConfigError(
            "the store is a PostgreSQL URL, but the psycopg driver is not installed",
            "pip install 'perfctl[postgres]'",
        ) from exc
    return psycopg


def _text(record: Any) -> str:
    return json.dumps(to_dict(record), indent=1, sort_keys=True)


class PostgresStore:
    """Runs, results and comparisons in one PostgreSQL database shared by many writers."""

    def __init__(self, url: str, state_dir: Path) -> None:
        self.root = state_dir  # local files only: pyperf copies for `pyperf stats`
        self._url = url
        self._conn: Any = None

    def __repr__(self) -> str:
        return f"PostgresStore({redact(self._url)!r})"

    # -- plumbing -----------------------------------------------------------
    def _connect(self) -> Any:
        if self._conn is None or self._conn.closed:
            psycopg = _driver()
            try:
                conn = psycopg.connect(
                    self._url,
                    autocommit=True,  # transactions are explicit: `with conn.transaction()`
                    connect_timeout=CONNECT_TIMEOUT_S,
                    application_name="perfctl",
                )
            except psycopg.Error as exc:
                raise self._connect_error(exc) from None
            with self._errors("preparing the schema of"):
                try:
                    migrations.migrate(conn)
                except migrations.NewerSchema as exc:
                    conn.close()
                    raise StoreError(
                        f"the store {redact(self._url)} has schema version {exc.version}; "
                        f"this perfctl knows up to {migrations.LATEST}",
                        "upgrade perfctl on this machine (pip install -U 'perfctl[postgres]')",
                    ) from None
            self._conn = conn
        return self._conn

    def _connect_error(self, exc: Exception) -> StoreError:
        """A connection failure as Error/Hint; never the password."""
        detail = scrub(" ".join(str(exc).split()), self._url)[:300]
        where = redact(self._url)
        if "authentication" in detail or "password" in detail:
            return StoreError(
                f"cannot log in to the store {where}: {detail}",
                "check the user and password in PERFCTL_STORE_URL (or PGPASSWORD, ~/.pgpass)",
            )
        if "does not exist" in detail or "invalid" in detail:  # the URL is wrong
            return StoreError(
                f"cannot open the store {where}: {detail}",
                "create the database and role, or fix the URL",
            )
        return StoreUnreachable(
            f"cannot connect to the store {where}: {detail}",
            "check that the server is running and reachable from this machine",
        )

    @contextlib.contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        psycopg = _driver()
        try:
            yield
        except psycopg.Error as exc:
            detail = scrub(" ".join(str(exc).split()), self._url)[:300]
            raise StoreUnreachable(
                f"{doing} the store {redact(self._url)} failed: {detail}",
                "re-run; the store holds the old or the new state, never half",
            ) from None

    @contextlib.contextmanager
    def _tx(self, doing: str = "writing to") -> Iterator[Any]:
        """One transaction: committed whole, or rolled back (also by a killed process)."""
        conn = self._connect()
        with self._errors(doing), conn.transaction():
            yield conn

    def close(self) -> None:
        """Close the connection (also done at exit)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def pyperf_path(self, run_id: str, regime: str) -> Path:
        """Where a regime's pyperf JSON is copied locally for a run."""
        from perfctl.store.ids import slug

        return self.root / "runs" / run_id / "pyperf" / f"{slug(regime)}.json"

    # -- runs ---------------------------------------------------------------
    def _upsert_run(self, db: Any, run: Run) -> None:
        record = _text(replace(run, results=()))
        db.execute(
            "INSERT INTO runs VALUES (%s,%s,%s,%s,%s,%s,%s,%s) ON CONFLICT (id) DO UPDATE SET "
            "started = EXCLUDED.started, status = EXCLUDED.status, record = EXCLUDED.record",
            (run.id, run.started, run.status, run.ref.ref, run.ref.sha, run.ref.dirty,
             run.machine.id, record),
        )  # fmt: skip

    def begin_run(self, run: Run) -> None:
        """Record a new run (status 'running') before anything is measured."""
        with self._tx() as db:
            self._upsert_run(db, run)
            for result in run.results:
                self._put_result(db, run.id, result, None)

    def _put_result(self, db: Any, run_id: str, result: RegimeResult, pyperf: str | None) -> None:
        # Delete then insert: a replaced result moves to the end, as in the SQLite store.
        db.execute("DELETE FROM results WHERE run_id = %s AND regime = %s", (run_id, result.name))
        db.execute(
            "INSERT INTO results (run_id, regime, status, pyperf_file, record, pyperf) "
            "VALUES (%s,%s,%s,%s,%s,%s)",
            (run_id, result.name, result.status, result.pyperf_file, _text(result), pyperf),
        )

    def save_result(
        self, run_id: str, result: RegimeResult, pyperf_json: Path | None
    ) -> RegimeResult:
        """Add (or replace) one regime's result; called after every regime."""
        run_id = self._resolve("runs", run_id)
        pyperf = None
        if pyperf_json is not None and pyperf_json.exists():
            pyperf = pyperf_json.read_text(encoding="utf-8")
            dest = self.pyperf_path(run_id, result.name)
            atomic_write_text(dest, pyperf)
            result = replace(result, pyperf_file=str(dest.relative_to(self.root)))
        with self._tx() as db:
            self._put_result(db, run_id, result, pyperf)
        return result

    def finish_run(self, run_id: str, status: str) -> Run:
        """Mark a run complete/failed/interrupted and stamp its end time."""
        from perfctl.store.ids import utcnow

        run = replace(self.load_run(run_id), status=status, finished=utcnow())
        with self._tx() as db:
            self._upsert_run(db, run)
        return run

    def load_run(self, run_id: str) -> Run:
        """Load one run by id or unique prefix."""
        ident = self._resolve("runs", run_id)
        with self._tx("reading") as db:
            row = db.execute("SELECT record FROM runs WHERE id = %s", (ident,)).fetchone()
            results = db.execute(
                "SELECT record FROM results WHERE run_id = %s ORDER BY seq", (ident,)
            ).fetchall()
        if row is None:
            raise StoreError(f"unknown run id `{run_id}`", "list them with `perfctl runs`")
        return self._run(row[0], [r[0] for r in results])

    def _run(self, record: str, results: list[str]) -> Run:
        data = self._parse(record, "run")
        data["results"] = [self._parse(r, "result") for r in results]
        return run_from_dict(data)

    def list_runs(self) -> list[Run]:
        """Every stored run, newest first (runs killed midway show 'running')."""
        with self._tx("reading") as db:
            runs = db.execute("SELECT id, record FROM runs").fetchall()
            rows = db.execute("SELECT run_id, record FROM results ORDER BY seq").fetchall()
        by_run: dict[str, list[str]] = {}
        for run_id, record in rows:
            by_run.setdefault(run_id, []).append(record)
        out = [self._run(record, by_run.get(ident, [])) for ident, record in runs]
        return sorted(out, key=lambda r: r.started, reverse=True)

    # -- comparisons --------------------------------------------------------
    def save_comparison(self, comparison: Comparison) -> None:
        """Store a comparison and its regime index rows in one transaction."""
        shard = comparison.settings.get("shard")
        shard = shard if isinstance(shard, dict) else {}
        c = comparison
        with self._tx() as db:
            db.execute(
                "INSERT INTO comparisons VALUES (%s,%s,%s,%s,%s,%s,%s,%s) ON CONFLICT (id) "
                "DO UPDATE SET record = EXCLUDED.record, created = EXCLUDED.created",
                (c.id, c.created, c.base.sha, c.head.sha, c.base.dirty or c.head.dirty,
                 shard.get("run"), f"{shard['index']}/{shard['count']}" if shard else None,
                 _text(c)),
            )  # fmt: skip
            db.execute("DELETE FROM comparison_regimes WHERE comparison_id = %s", (c.id,))
            _index_regimes(db, c)

    def load_comparison(self, cid: str) -> Comparison:
        """Load a comparison by id or unique prefix."""
        ident = self._resolve("comparisons", cid)
        with self._tx("reading") as db:
            row = db.execute("SELECT record FROM comparisons WHERE id = %s", (ident,)).fetchone()
        if row is None:
            raise StoreError(
                f"unknown comparison id `{cid}`", "list them with `perfctl comparisons`"
            )
        return comparison_from_dict(self._parse(row[0], "comparison"))

    def list_comparisons(self) -> list[Comparison]:
        """Every stored comparison, newest first."""
        with self._tx("reading") as db:
            rows = db.execute("SELECT record FROM comparisons ORDER BY created DESC, id DESC")
            return [comparison_from_dict(self._parse(r[0], "comparison")) for r in rows]

    def last_comparison(self) -> Comparison:
        """The newest comparison."""
        with self._tx("reading") as db:
            row = db.execute(
                "SELECT record FROM comparisons ORDER BY created DESC, id DESC LIMIT 1"
            ).fetchone()
        if row is None:
            raise StoreError("no comparison is stored yet", "run `perfctl compare BASE HEAD` first")
        return comparison_from_dict(self._parse(row[0], "comparison"))

    def comparisons_between(self, base_sha: str, head_sha: str) -> list[Comparison]:
        """The comparisons of exactly base → head with neither side dirty, newest first."""
        with self._tx("reading") as db:
            rows = db.execute(
                "SELECT record FROM comparisons WHERE base_sha = %s AND head_sha = %s "
                "AND NOT dirty ORDER BY created DESC, id DESC",
                (base_sha, head_sha),
            )
            return exact_pairs(self._readable(rows), base_sha, head_sha)

    def comparisons_of(self, *shas: str) -> list[Comparison]:
        """Every comparison with one of these commits on either side, newest first."""
        with self._tx("reading") as db:
            rows = db.execute(
                "SELECT record FROM comparisons WHERE base_sha = ANY(%s) OR head_sha = ANY(%s) "
                "ORDER BY created DESC, id DESC",
                (list(shas), list(shas)),
            )
            return self._readable(rows)

    def _readable(self, rows: Iterable[tuple[Any, ...]]) -> list[Comparison]:
        out = []
        for (record,) in rows:
            # One record this perfctl cannot read (a newer schema from another runner,
            # say) hides only itself, as a damaged file does in the SQLite store.
            with contextlib.suppress(StoreError, KeyError, TypeError, ValueError):
                out.append(comparison_from_dict(self._parse(record, "comparison")))
        return out

    def shards(self, shard_run: str) -> list[Comparison]:
        """Every stored shard comparison of one sharded run (``--shard-run``)."""
        with self._tx("reading") as db:
            rows = db.execute(
                "SELECT record FROM comparisons WHERE shard_run = %s ORDER BY shard, id",
                (shard_run,),
            )
            return [comparison_from_dict(self._parse(r[0], "comparison")) for r in rows]

    # -- helpers ------------------------------------------------------------
    def _resolve(self, kind: str, ident: str) -> str:
        table = {"runs": "runs", "comparisons": "comparisons"}[kind]
        with self._tx("reading") as db:
            rows = db.execute(
                f"SELECT id FROM {table} WHERE starts_with(id, %s) ORDER BY id LIMIT 2",  # noqa: S608
                (ident,),
            ).fetchall()
        ids = [r[0] for r in rows]
        if ident in ids or len(ids) == 1 and ident:
            return ident if ident in ids else ids[0]
        noun = kind[:-1]
        if len(ids) > 1 and ident:
            raise StoreError(
                f"{noun} id `{ident}` is ambiguous (2 or more match)",
                "give more characters of the id",
            )
        raise StoreError(f"unknown {noun} id `{ident}`", f"list them with `perfctl {kind}`")

    def _parse(self, text: str, what: str) -> Any:
        try:
            return json.loads(text)
        except ValueError as exc:
            raise StoreError(
                f"a stored {what} in {redact(self._url)} is not valid JSON ({exc})",
                "the row was written by something other than perfctl; remove it",
            ) from exc

    # -- interrupted comparisons ---------------------------------------------
    def mark_pending(self, key: str, run_ids: dict[str, str]) -> None:
        """Remember this machine's comparison in progress, so a re-run here can resume it."""
        with self._tx() as db:
            db.execute(
                "INSERT INTO pending (key, host, runs) VALUES (%s,%s,%s) "
                "ON CONFLICT (key, host) DO UPDATE SET runs = EXCLUDED.runs, created = now()",
                (key, socket.gethostname(), json.dumps(run_ids)),
            )

    def pending(self, key: str) -> dict[str, Run] | None:
        """This machine's interrupted comparison with this key, if still resumable."""
        # Keyed by host too: another runner's half-done runs used other worktrees
        # and another machine, so they are never resumed here.
        with self._tx("reading") as db:
            row = db.execute(
                "SELECT runs FROM pending WHERE key = %s AND host = %s", (key, socket.gethostname())
            ).fetchone()
        if row is None:
            return None
        try:
            runs = {side: self.load_run(rid) for side, rid in json.loads(row[0]).items()}
        except (ValueError, AttributeError, StoreError):
            return None
        return runs if all(r.status == "running" for r in runs.values()) else None

    def clear_pending(self, key: str) -> None:
        """Forget this machine's comparison in progress (it finished)."""
        with self._tx() as db:
            db.execute(
                "DELETE FROM pending WHERE key = %s AND host = %s", (key, socket.gethostname())
            )

    def remove_all(self) -> int:
        """A shared store is never emptied by `perfctl clean`: refuse, naming it."""
        raise StoreError(
            f"the shared store {redact(self._url)} is not removed by `perfctl clean`",
            "clean worktrees and environments with --worktrees/--envs; "
            "delete shared history in the database itself",
        )


def _index_regimes(db: Any, c: Comparison) -> None:
    """One row per regime (verdict, change): history queries without parsing records."""
    with db.cursor() as cur:
        cur.executemany(
            "INSERT INTO comparison_regimes VALUES (%s,%s,%s,%s)",
            [(c.id, r.name, str(r.verdict), r.change) for r in c.regimes],
        )
