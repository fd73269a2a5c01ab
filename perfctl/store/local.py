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
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from perfctl.errors import RegimeFailed, StoreError
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
from perfctl.store.protocol import Store as Store
from perfctl.store.protocol import exact_pairs

__all__ = ["SqliteStore", "Store", "new_id", "open_store", "slug", "utcnow"]

from perfctl.store import repair

T = TypeVar("T")
R = TypeVar("R", Run, Comparison)


class DamagedRecord(StoreError):
    """A stored record that cannot be read; it has been set aside (see store.repair)."""


SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, started TEXT, status TEXT, ref TEXT, sha TEXT,
    dirty INTEGER, machine TEXT);
CREATE TABLE IF NOT EXISTS results (
    run_id TEXT, regime TEXT, status TEXT, file TEXT, PRIMARY KEY (run_id, regime));
CREATE TABLE IF NOT EXISTS comparisons (
    id TEXT PRIMARY KEY, created TEXT, base_sha TEXT, head_sha TEXT);
"""


class SqliteStore:
    """JSON files plus a SQLite index, under one state directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._db_path = root / "store.sqlite"

    # -- plumbing -----------------------------------------------------------
    @contextlib.contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        with repair.writing(self.root):
            self.root.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self._db_path, timeout=30)
        try:
            with conn:  # one transaction: committed whole or not at all
                conn.executescript(SCHEMA)
                yield conn
        finally:
            conn.close()

    def _index(self, fn: Callable[[sqlite3.Connection], T], *, rebuild: bool = True) -> T:
        """Run ``fn`` in one index transaction; a corrupt index is rebuilt, ``fn`` retried."""
        try:
            with self._db() as db:
                return fn(db)
        except sqlite3.DatabaseError as exc:
            if not (rebuild and repair.is_corrupt(exc, self._db_path)):
                raise StoreError(
                    f"the store index {self._db_path} failed: {exc}",
                    "check its permissions and free disk space, then re-run",
                ) from exc
            # The index holds nothing the JSON files do not: set the damaged one
            # aside (kept for inspection) and fill a fresh one from the files.
            repair.set_index_aside(self._db_path, exc)
        for kind in ("runs", "comparisons"):
            self._ids(kind, rebuild=False)
        return self._index(fn, rebuild=False)

    def _run_dir(self, run_id: str) -> Path:
        return self.root / "runs" / run_id

    def pyperf_path(self, run_id: str, regime: str) -> Path:
        """Where a regime's pyperf JSON lives for a run."""
        return self._run_dir(run_id) / "pyperf" / f"{slug(regime)}.json"

    def _write_run(self, run: Run) -> None:
        with repair.writing(self.root):
            text = json.dumps(to_dict(run), indent=1, sort_keys=True)
            atomic_write_text(self._run_dir(run.id) / "run.json", text)
        self._index(lambda db: _index_run(db, run))

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
            with repair.writing(self.root):
                atomic_copy(pyperf_json, dest)
            result = replace(result, pyperf_file=str(dest.relative_to(self.root)))
        others = tuple(r for r in run.results if r.name != result.name)
        self._write_run(replace(run, results=(*others, result)))
        row = (run_id, result.name, result.status, result.pyperf_file)
        self._index(lambda db: db.execute("INSERT OR REPLACE INTO results VALUES (?,?,?,?)", row))
        return result

    def finish_run(self, run_id: str, status: str) -> Run:
        """Mark a run complete/failed/interrupted and stamp its end time."""
        run = replace(self.load_run(run_id), status=status, finished=utcnow())
        self._write_run(run)
        return run

    def load_run(self, run_id: str) -> Run:
        """Load one run by id or unique prefix."""
        return self.load_run_file(self._resolve("runs", run_id))

    def list_runs(self) -> list[Run]:
        """Every stored run, newest first (runs killed midway show 'running')."""
        runs = []
        for d in self._ids("runs"):  # exact ids: resolving each would list the store again
            with contextlib.suppress(DamagedRecord):
                runs.append(self.load_run_file(d))
        return sorted(runs, key=lambda r: r.started, reverse=True)

    # -- comparisons --------------------------------------------------------
    def save_comparison(self, comparison: Comparison) -> None:
        """Store a comparison (atomic), then index it."""
        if not comparison.regimes:
            # An empty comparison would stand in for a real one in report, plan and comment.
            raise RegimeFailed(
                f"nothing to compare between {comparison.base.ref} and {comparison.head.ref}: "
                "no regime was measured on both sides; nothing was stored",
                "measure both refs with the same regimes (`perfctl compare BASE HEAD`), "
                "or widen --regime/--family",
            )
        path = self.root / "comparisons" / f"{comparison.id}.json"
        with repair.writing(self.root):
            atomic_write_text(path, json.dumps(to_dict(comparison), indent=1, sort_keys=True))
        self._index(lambda db: _index_comparison(db, comparison))

    def load_comparison(self, cid: str) -> Comparison:
        """Load a comparison by id or unique prefix."""
        return self._load_comparison_file(self._resolve("comparisons", cid))

    def list_comparisons(self) -> list[Comparison]:
        """Every stored comparison, newest first."""
        out = []
        for cid in self._ids("comparisons"):  # exact ids: no per-id listing (was quadratic)
            with contextlib.suppress(DamagedRecord):
                out.append(self._load_comparison_file(cid))
        return sorted(out, key=lambda c: (c.created, c.id), reverse=True)

    def last_comparison(self) -> Comparison:
        """The newest comparison."""
        found = self.list_comparisons()
        if not found:
            raise StoreError("no comparison is stored yet", "run `perfctl compare BASE HEAD` first")
        return found[0]

    def comparisons_between(self, base_sha: str, head_sha: str) -> list[Comparison]:
        """The comparisons of exactly base → head with neither side dirty, newest first."""
        found = self._comparisons_where("base_sha = ? AND head_sha = ?", (base_sha, head_sha))
        return exact_pairs(found, base_sha, head_sha)

    def comparisons_of(self, *shas: str) -> list[Comparison]:
        """Every comparison with one of these commits on either side, newest first."""
        marks = ",".join("?" * len(shas))
        return self._comparisons_where(f"base_sha IN ({marks}) OR head_sha IN ({marks})", shas * 2)

    def _comparisons_where(self, where: str, params: tuple[str, ...]) -> list[Comparison]:
        """The comparisons whose index rows match ``where``, newest first, loaded by exact
        id (no per-id listing: that was quadratic); a damaged file hides only itself."""
        self._ids("comparisons")  # repair the index first
        rows = self._index(
            lambda db: db.execute(
                f"SELECT id FROM comparisons WHERE {where} "  # noqa: S608 - ours, not user input
                "ORDER BY created DESC, id DESC",
                params,
            ).fetchall()
        )
        out = []
        for (cid,) in rows:
            with contextlib.suppress(StoreError, OSError):
                out.append(self._load_comparison_file(cid))
        return out

    def reindex(self) -> None:
        """Bring the index in step with the files (after files were added from elsewhere)."""
        for kind in ("runs", "comparisons"):
            self._ids(kind)

    # -- helpers ------------------------------------------------------------
    def _files(self, kind: str) -> list[str]:
        folder = self.root / kind
        if not folder.is_dir():
            return []
        if kind == "runs":
            return sorted(p.name for p in folder.iterdir() if (p / "run.json").is_file())
        return sorted(p.stem for p in folder.glob("*.json"))

    def _ids(self, kind: str, *, rebuild: bool = True) -> list[str]:
        """Ids from the index, repaired from the files if they disagree.

        A process killed between writing a file and indexing it (or a deleted
        index) leaves them out of step; the JSON files are the truth.
        """
        files = self._files(kind)
        indexed = self._index(
            lambda db: {row[0] for row in db.execute(f"SELECT id FROM {kind}")},  # noqa: S608
            rebuild=rebuild,
        )
        if indexed != set(files):
            self._reindex(kind, files, indexed)
        return self._files(kind)  # without what reindexing set aside

    def _reindex(self, kind: str, files: list[str], indexed: set[str]) -> None:
        records: list[Run | Comparison] = []
        load = self.load_run_file if kind == "runs" else self._load_comparison_file
        for ident in set(files) - indexed:
            with contextlib.suppress(DamagedRecord):
                records.append(load(ident))

        def write(db: sqlite3.Connection) -> None:
            for gone in indexed - set(files):
                db.execute(f"DELETE FROM {kind} WHERE id = ?", (gone,))  # noqa: S608
            for record in records:
                if isinstance(record, Run):
                    _index_run(db, record)
                else:
                    _index_comparison(db, record)

        self._index(write, rebuild=False)

    def load_run_file(self, run_id: str) -> Run:
        """One run by its exact id, without consulting the index."""
        folder = self._run_dir(run_id)
        return self._load(folder / "run.json", run_from_dict, folder)

    def _load_comparison_file(self, cid: str) -> Comparison:
        path = self.root / "comparisons" / f"{cid}.json"
        return self._load(path, comparison_from_dict, path)

    def _load(self, path: Path, build: Callable[[Any], R], item: Path) -> R:
        """Read and build a record; a damaged one is set aside (``item``) and reported."""
        try:
            return build(json.loads(path.read_text(encoding="utf-8")))
        except repair.RECORD_ERRORS as exc:
            if isinstance(exc, FileNotFoundError):
                raise StoreError(f"cannot read {path}: it is gone", "re-run the command") from exc
            why = f"{type(exc).__name__}: {exc}"
            moved = repair.set_aside(self.root, item, why)
            raise DamagedRecord(
                f"the store file {path} is damaged ({repair.first_line(why)})",
                f"it was set aside as {moved}" if moved else "remove or restore it",
            ) from exc

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
                data = json.loads((self._run_dir(ident) / "run.json").read_text(encoding="utf-8"))
                return run_from_dict(data).id == ident
            path = self.root / kind / f"{ident}.json"
            return comparison_from_dict(json.loads(path.read_text(encoding="utf-8"))).id == ident
        except (OSError, StoreError, ValueError, KeyError, TypeError):
            return False

    @staticmethod
    def _pending_ids(path: Path) -> dict[str, str] | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        ok = isinstance(data, dict) and all(isinstance(v, str) for v in data.values())
        return data if ok else None


def _index_run(db: sqlite3.Connection, run: Run) -> None:
    row = (run.id, run.started, run.status, run.ref.ref, run.ref.sha, int(run.ref.dirty))
    db.execute("INSERT OR REPLACE INTO runs VALUES (?,?,?,?,?,?,?)", (*row, run.machine.id))


def _index_comparison(db: sqlite3.Connection, c: Comparison) -> None:
    row = (c.id, c.created, c.base.sha, c.head.sha)
    db.execute("INSERT OR REPLACE INTO comparisons VALUES (?,?,?,?)", row)


def open_store(state_dir: Path, url: str | None = None) -> Store:
    """The project's store: PostgreSQL when ``url`` is given (config or env), else SQLite."""
    if url:
        from perfctl.store.postgres import PostgresStore

        return PostgresStore(url, state_dir)
    return SqliteStore(state_dir)
