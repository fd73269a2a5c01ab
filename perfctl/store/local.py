"""The result store: the only module that reads or writes stored results.

Layout under the state directory (``.perfctl/`` by default)::

    store.sqlite                      index of runs, results and comparisons
    runs/<run-id>/run.json            perfctl's versioned Run record
    runs/<run-id>/pyperf/<slug>.json  pyperf's own file per regime
                                      (`python -m pyperf stats FILE` works)
    comparisons/<id>.json             versioned Comparison records

Every file is written atomically (temporary file + ``os.replace``) and the
index is updated after the file, inside one SQLite transaction, so a process
killed at any moment (SIGKILL included) leaves either the old or the new
state. The index can always be rebuilt from the JSON files.

The :class:`Store` protocol is the interface; :class:`SqliteStore` is the
embedded default, and :class:`perfctl.store.postgres.PostgresStore` (a
``postgresql://`` URL) the shared one for CI fleets. :func:`open_store` picks.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from perfctl.errors import StoreError
from perfctl.files import atomic_copy, atomic_write_text
from perfctl.model import (
    Comparison,
    RegimeResult,
    Run,
    comparison_from_dict,
    run_from_dict,
    to_dict,
)
from perfctl.store.ids import new_id, slug, utcnow

__all__ = ["SqliteStore", "Store", "new_id", "open_store", "slug", "utcnow"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, started TEXT, status TEXT, ref TEXT, sha TEXT,
    dirty INTEGER, machine TEXT);
CREATE TABLE IF NOT EXISTS results (
    run_id TEXT, regime TEXT, status TEXT, file TEXT, PRIMARY KEY (run_id, regime));
CREATE TABLE IF NOT EXISTS comparisons (
    id TEXT PRIMARY KEY, created TEXT, base_sha TEXT, head_sha TEXT);
"""


class Store(Protocol):
    """What every store backend provides."""

    root: Path

    def begin_run(self, run: Run) -> None: ...
    def save_result(
        self, run_id: str, result: RegimeResult, pyperf_json: Path | None
    ) -> RegimeResult: ...
    def finish_run(self, run_id: str, status: str) -> Run: ...
    def load_run(self, run_id: str) -> Run: ...
    def list_runs(self) -> list[Run]: ...
    def save_comparison(self, comparison: Comparison) -> None: ...
    def load_comparison(self, cid: str) -> Comparison: ...
    def last_comparison(self) -> Comparison: ...
    def list_comparisons(self) -> list[Comparison]: ...
    def find_comparison(self, base_sha: str, head_sha: str) -> Comparison | None: ...
    def comparisons_of(self, *shas: str) -> list[Comparison]: ...
    def pyperf_path(self, run_id: str, regime: str) -> Path: ...
    def mark_pending(self, key: str, run_ids: dict[str, str]) -> None: ...
    def pending(self, key: str) -> dict[str, Run] | None: ...
    def clear_pending(self, key: str) -> None: ...
    def remove_all(self) -> int: ...


class SqliteStore:
    """JSON files plus a SQLite index, under one state directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._db_path = root / "store.sqlite"

    # -- plumbing -----------------------------------------------------------
    @contextlib.contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        conn = self._connect()
        try:
            with conn:  # one transaction: committed whole or not at all
                yield conn
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                f"the store index {self._db_path} failed: {exc}",
                "re-run; if it persists, delete it (it is rebuilt from the JSON files)",
            ) from exc
        finally:
            conn.close()

    def _connect(self) -> sqlite3.Connection:
        """Open the index; a damaged one is set aside and rebuilt from the JSON files."""
        self.root.mkdir(parents=True, exist_ok=True)
        for attempt in (1, 2):
            conn = sqlite3.connect(self._db_path, timeout=30)
            try:
                conn.executescript(SCHEMA)
                return conn
            except sqlite3.DatabaseError as exc:
                conn.close()
                if attempt == 2 or "locked" in str(exc):
                    raise StoreError(
                        f"cannot open the store index {self._db_path}: {exc}",
                        "check permissions and free disk space",
                    ) from exc
                # The index holds nothing the JSON files do not: keep the damaged
                # file for inspection and start a fresh one (filled by _ids).
                os.replace(self._db_path, self._db_path.with_suffix(f".damaged-{new_id()}"))
        raise AssertionError("unreachable")

    def _run_dir(self, run_id: str) -> Path:
        return self.root / "runs" / run_id

    def pyperf_path(self, run_id: str, regime: str) -> Path:
        """Where a regime's pyperf JSON lives for a run."""
        return self._run_dir(run_id) / "pyperf" / f"{slug(regime)}.json"

    def _write_run(self, run: Run) -> None:
        atomic_write_text(
            self._run_dir(run.id) / "run.json", json.dumps(to_dict(run), indent=1, sort_keys=True)
        )
        with self._db() as db:
            db.execute(
                "INSERT OR REPLACE INTO runs VALUES (?,?,?,?,?,?,?)",
                (
                    run.id,
                    run.started,
                    run.status,
                    run.ref.ref,
                    run.ref.sha,
                    int(run.ref.dirty),
                    run.machine.id,
                ),
            )

    # -- runs ---------------------------------------------------------------
    def begin_run(self, run: Run) -> None:
        """Record a new run (status 'running') before anything is measured."""
        self._write_run(run)

    def save_result(
        self, run_id: str, result: RegimeResult, pyperf_json: Path | None
    ) -> RegimeResult:
        """Add (or replace) one regime's result; called after every regime."""
        run = self.load_run(run_id)
        if pyperf_json is not None and pyperf_json.exists():
            dest = self.pyperf_path(run_id, result.name)
            atomic_copy(pyperf_json, dest)
            result = replace(result, pyperf_file=str(dest.relative_to(self.root)))
        others = tuple(r for r in run.results if r.name != result.name)
        self._write_run(replace(run, results=(*others, result)))
        with self._db() as db:
            db.execute(
                "INSERT OR REPLACE INTO results VALUES (?,?,?,?)",
                (run_id, result.name, result.status, result.pyperf_file),
            )
        return result

    def finish_run(self, run_id: str, status: str) -> Run:
        """Mark a run complete/failed/interrupted and stamp its end time."""
        run = replace(self.load_run(run_id), status=status, finished=utcnow())
        self._write_run(run)
        return run

    def load_run(self, run_id: str) -> Run:
        """Load one run by id or unique prefix."""
        path = self._run_dir(self._resolve("runs", run_id)) / "run.json"
        return run_from_dict(self._read_json(path))

    def list_runs(self) -> list[Run]:
        """Every stored run, newest first (runs killed midway show 'running')."""
        runs = []
        for d in self._ids("runs"):
            with contextlib.suppress(StoreError):
                runs.append(self.load_run(d))
        return sorted(runs, key=lambda r: r.started, reverse=True)

    # -- comparisons --------------------------------------------------------
    def save_comparison(self, comparison: Comparison) -> None:
        """Store a comparison (atomic), then index it."""
        path = self.root / "comparisons" / f"{comparison.id}.json"
        atomic_write_text(path, json.dumps(to_dict(comparison), indent=1, sort_keys=True))
        with self._db() as db:
            db.execute(
                "INSERT OR REPLACE INTO comparisons VALUES (?,?,?,?)",
                (comparison.id, comparison.created, comparison.base.sha, comparison.head.sha),
            )

    def load_comparison(self, cid: str) -> Comparison:
        """Load a comparison by id or unique prefix."""
        path = self.root / "comparisons" / f"{self._resolve('comparisons', cid)}.json"
        return comparison_from_dict(self._read_json(path))

    def list_comparisons(self) -> list[Comparison]:
        """Every stored comparison, newest first."""
        out = [self.load_comparison(i) for i in self._ids("comparisons")]
        return sorted(out, key=lambda c: (c.created, c.id), reverse=True)

    def last_comparison(self) -> Comparison:
        """The newest comparison."""
        ids = self._ids("comparisons")
        if not ids:
            raise StoreError("no comparison is stored yet", "run `perfctl compare BASE HEAD` first")
        return self.list_comparisons()[0]

    def find_comparison(self, base_sha: str, head_sha: str) -> Comparison | None:
        """The newest comparison of exactly these two commits, if any (via the index)."""
        self._ids("comparisons")  # repair the index first
        with self._db() as db:
            rows = db.execute(
                "SELECT id FROM comparisons WHERE base_sha = ? AND head_sha = ? "
                "ORDER BY created DESC, id DESC",
                (base_sha, head_sha),
            ).fetchall()
        for (cid,) in rows:
            c = self.load_comparison(cid)
            if not (c.base.dirty or c.head.dirty):
                return c
        return None

    def comparisons_of(self, *shas: str) -> list[Comparison]:
        """Every comparison with one of these commits on either side, newest first."""
        self._ids("comparisons")  # repair the index first
        marks = ",".join("?" * len(shas))
        with self._db() as db:
            rows = db.execute(
                f"SELECT id FROM comparisons WHERE base_sha IN ({marks}) "  # noqa: S608
                f"OR head_sha IN ({marks}) ORDER BY created DESC, id DESC",
                (*shas, *shas),
            ).fetchall()
        out = []
        for (cid,) in rows:
            with contextlib.suppress(StoreError):  # a damaged file hides only itself
                out.append(self.load_comparison(cid))
        return out

    # -- helpers ------------------------------------------------------------
    def _files(self, kind: str) -> list[str]:
        folder = self.root / kind
        if not folder.is_dir():
            return []
        if kind == "runs":
            return sorted(p.name for p in folder.iterdir() if (p / "run.json").is_file())
        return sorted(p.stem for p in folder.glob("*.json"))

    def _ids(self, kind: str) -> list[str]:
        """Ids from the index, repaired from the files if they disagree.

        A process killed between writing a file and indexing it (or a deleted
        index) leaves them out of step; the JSON files are the truth.
        """
        files = self._files(kind)
        with self._db() as db:
            indexed = {row[0] for row in db.execute(f"SELECT id FROM {kind}")}  # noqa: S608
            if indexed != set(files):
                self._reindex(db, kind, files, indexed)
        return files

    def _reindex(
        self, db: sqlite3.Connection, kind: str, files: list[str], indexed: set[str]
    ) -> None:
        for gone in indexed - set(files):
            db.execute(f"DELETE FROM {kind} WHERE id = ?", (gone,))  # noqa: S608
        for ident in set(files) - indexed:
            with contextlib.suppress(StoreError):
                if kind == "runs":
                    run = run_from_dict(self._read_json(self._run_dir(ident) / "run.json"))
                    db.execute(
                        "INSERT OR REPLACE INTO runs VALUES (?,?,?,?,?,?,?)",
                        (
                            run.id,
                            run.started,
                            run.status,
                            run.ref.ref,
                            run.ref.sha,
                            int(run.ref.dirty),
                            run.machine.id,
                        ),
                    )
                else:
                    c = comparison_from_dict(
                        self._read_json(self.root / "comparisons" / f"{ident}.json")
                    )
                    db.execute(
                        "INSERT OR REPLACE INTO comparisons VALUES (?,?,?,?)",
                        (c.id, c.created, c.base.sha, c.head.sha),
                    )

    def _resolve(self, kind: str, ident: str) -> str:
        ids = self._ids(kind)
        if ident in ids:
            return ident
        matches = [i for i in ids if i.startswith(ident)] if ident else []
        if len(matches) == 1:
            return matches[0]
        noun = kind[:-1]
        if matches:
            raise StoreError(
                f"{noun} id `{ident}` is ambiguous ({len(matches)} match)",
                "give more characters of the id",
            )
        raise StoreError(
            f"unknown {noun} id `{ident}`",
            f"list them with `perfctl {kind}`",
        )

    @staticmethod
    def _read_json(path: Path) -> Any:
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise StoreError(
                f"cannot read {path}: {exc}", "the file is damaged; remove it"
            ) from exc

    # -- interrupted comparisons ---------------------------------------------
    def mark_pending(self, key: str, run_ids: dict[str, str]) -> None:
        """Remember the runs of a comparison in progress, so a re-run can resume it."""
        atomic_write_text(self.root / "pending" / f"{key}.json", json.dumps(run_ids))

    def pending(self, key: str) -> dict[str, Run] | None:
        """The runs of an interrupted comparison with this key, if still resumable."""
        path = self.root / "pending" / f"{key}.json"
        if not path.is_file():
            return None
        try:
            ids = json.loads(path.read_text(encoding="utf-8"))
            runs = {side: self.load_run(rid) for side, rid in ids.items()}
        except (ValueError, StoreError):
            return None
        return runs if all(r.status == "running" for r in runs.values()) else None

    def clear_pending(self, key: str) -> None:
        """Forget a comparison in progress (it finished)."""
        with contextlib.suppress(OSError):
            (self.root / "pending" / f"{key}.json").unlink()

    def remove_all(self) -> int:
        """Delete the runs and comparisons perfctl stored, nothing else; how many.

        Only what perfctl's records list goes: a run folder whose run.json is a
        run of that id, a comparison file holding that comparison, pending
        markers, the index. Anything else in the folders stays, and so do they.
        """
        runs = [i for i in self._ids("runs") if self._owned("runs", i)]
        comps = [i for i in self._ids("comparisons") if self._owned("comparisons", i)]
        for ident in runs:
            shutil.rmtree(self._run_dir(ident), ignore_errors=True)
        for ident in comps:
            (self.root / "comparisons" / f"{ident}.json").unlink(missing_ok=True)
        for path in (self.root / "pending").glob("*.json"):
            if self._pending_ids(path) is not None:
                path.unlink()
        for kind in ("runs", "comparisons", "pending"):
            with contextlib.suppress(OSError):
                (self.root / kind).rmdir()  # only when nothing else is left in it
        with contextlib.suppress(OSError):
            self._db_path.unlink()
        return len(runs) + len(comps)

    def _owned(self, kind: str, ident: str) -> bool:
        try:
            if kind == "runs":
                return run_from_dict(self._read_json(self._run_dir(ident) / "run.json")).id == ident
            path = self.root / kind / f"{ident}.json"
            return comparison_from_dict(self._read_json(path)).id == ident
        except (StoreError, ValueError, KeyError, TypeError):
            return False

    @staticmethod
    def _pending_ids(path: Path) -> dict[str, str] | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        ok = isinstance(data, dict) and all(isinstance(v, str) for v in data.values())
        return data if ok else None


def open_store(state_dir: Path, url: str | None = None) -> Store:
    """The project's store: PostgreSQL when ``url`` is given (config or env), else SQLite."""
    if url:
        from perfctl.store.postgres import PostgresStore

        return PostgresStore(url, state_dir)
    return SqliteStore(state_dir)
