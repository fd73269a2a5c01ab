"""Records in and out of the SQLite store as files: what a history branch carries.

The branch mirrors the store's own layout (``runs/<id>/run.json``,
``runs/<id>/pyperf/<slug>.json``, ``comparisons/<id>.json``), so a record
keeps its relative paths. Records are immutable once finished, which is what
makes merging many writers simple: a path is only ever added, never changed.
Only finished runs (``complete``/``failed``) and comparisons are exported.

Imported files come from a shared branch that anyone with write access could
have edited, so each is checked like a stored file on load (the versioned
schema, the id matching its path, a size cap) before it is written; a bad one
is refused by name and nothing of it is written. Files are written atomically,
pyperf files before their ``run.json``, and the index is brought in step last,
so an import killed midway leaves a consistent store.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfctl.errors import PerfctlError
from perfctl.files import atomic_write_text
from perfctl.model import Comparison, Run, comparison_from_dict, run_from_dict
from perfctl.store import repair, schema
from perfctl.store.local import SqliteStore

FINISHED = ("complete", "failed")
MAX_FILE = schema.MAX_FILE_BYTES  # the cap on a fork's comparison.json, for the same reason
_ID = r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}"
_SLUG = r"\.?[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}"  # what store.ids.slug makes, never . or ..
RUN_FILE = re.compile(rf"runs/(?P<id>{_ID})/run\.json")
PYPERF_FILE = re.compile(rf"runs/(?P<id>{_ID})/pyperf/{_SLUG}\.json")
COMPARISON_FILE = re.compile(rf"comparisons/(?P<id>{_ID})\.json")


@dataclass(frozen=True)
class Imported:
    """What an import wrote and what it refused (by path, with the reason)."""

    runs: int = 0
    comparisons: int = 0
    refused: tuple[str, ...] = ()


def exportable(store: SqliteStore) -> tuple[dict[str, Path], list[str]]:
    """Every finished run's files and every comparison file (branch path → file); skipped runs."""
    out: dict[str, Path] = {}
    skipped: list[str] = []
    for run in store.list_runs():
        if run.status not in FINISHED:
            continue  # still running, or interrupted and resumable: it may change
        folder = store.root / "runs" / run.id
        files = {f"runs/{run.id}/run.json": folder / "run.json"}
        files.update(
            {
                f"runs/{run.id}/pyperf/{f.name}": f
                for f in sorted((folder / "pyperf").glob("*.json"))
            }
        )
        files = {p: f for p, f in files.items() if _fits(p) and f.is_file()}
        lacking = [
            r.pyperf_file for r in run.results if r.pyperf_file and r.pyperf_file not in files
        ]
        if f"runs/{run.id}/run.json" not in files or lacking:
            # Pushed without its files it would be refused by every importer, for ever.
            skipped.append(
                f"run {run.id}: {lacking[0] if lacking else 'run.json'} cannot be exported"
            )
            continue
        out.update(files)
    for c in store.list_comparisons():
        path = store.root / "comparisons" / f"{c.id}.json"
        if _fits(f"comparisons/{c.id}.json") and path.is_file():
            out[f"comparisons/{c.id}.json"] = path
    return out, skipped


def _fits(path: str) -> bool:
    return any(p.fullmatch(path) for p in (RUN_FILE, PYPERF_FILE, COMPARISON_FILE))


def wanted(store: SqliteStore, paths: Iterable[str]) -> list[str]:
    """The branch's record paths to import: whole runs the store lacks, missing comparisons.

    A run is taken whole (its pyperf files too, replacing leftovers of an import
    killed before its run.json was written); other paths are ignored.
    """
    paths = [p for p in paths if _fits(p)]
    missing_runs = {
        m["id"] for p in paths if (m := RUN_FILE.fullmatch(p)) and not (store.root / p).exists()
    }
    out = []
    for p in sorted(paths):
        if m := COMPARISON_FILE.fullmatch(p):
            if not (store.root / p).exists():
                out.append(p)
        elif (m := RUN_FILE.fullmatch(p) or PYPERF_FILE.fullmatch(p)) and m["id"] in missing_runs:
            out.append(p)
    return out


def import_files(store: SqliteStore, files: Mapping[str, bytes]) -> Imported:
    """Check and write records read from a branch; refuse the bad ones by name."""
    refused: list[str] = []
    runs: list[tuple[Run, dict[str, bytes]]] = []
    comparisons: list[tuple[str, bytes]] = []
    for path, data in sorted(files.items()):
        if m := RUN_FILE.fullmatch(path):
            extra = {p: d for p, d in files.items() if p.startswith(f"runs/{m['id']}/pyperf/")}
            checked = _check_run(m["id"], data, extra)
            if isinstance(checked, str):
                refused.append(f"{path}: {checked}")
            else:
                runs.append((checked, {path: data, **extra}))
        elif (m := COMPARISON_FILE.fullmatch(path)) is not None:
            why = _check_comparison(m["id"], data)
            if why:
                refused.append(f"{path}: {why}")
            else:
                comparisons.append((path, data))
    with repair.writing(store.root):
        for _run, parts in runs:
            # pyperf files first, run.json last: a killed import leaves no run without its files
            for path in sorted(parts, key=lambda p: p.endswith("/run.json")):
                atomic_write_text(store.root / path, parts[path].decode("utf-8"))
        for path, data in comparisons:
            atomic_write_text(store.root / path, data.decode("utf-8"))
    store.reindex()
    return Imported(len(runs), len(comparisons), tuple(refused))


def _parse(data: bytes) -> dict[str, Any]:
    if len(data) > MAX_FILE:
        raise ValueError(f"over {MAX_FILE // 2**20} MiB")
    try:
        found = schema.parse_json(data)
    except RecursionError as exc:
        raise ValueError("nested too deeply") from exc
    if not isinstance(found, dict):
        raise TypeError("not a JSON object")
    return found


def _check_run(ident: str, data: bytes, pyperf: Mapping[str, bytes]) -> Run | str:
    try:
        raw = _parse(data)
        schema.validate_run_dict(raw)  # types too: a bad field must not reach the index
        run = run_from_dict(raw)
        for blob in pyperf.values():
            _parse(blob)
    except (*repair.RECORD_ERRORS, PerfctlError) as exc:
        why = exc.message if isinstance(exc, PerfctlError) else f"{type(exc).__name__}: {exc}"
        return f"not a perfctl run ({why[:100]})"
    if run.id != ident:
        return f"holds run {run.id[:40]!r}, not {ident!r}"
    if run.status not in FINISHED:
        return f"run status {run.status[:20]!r} is not finished"
    for r in run.results:
        if r.pyperf_file and r.pyperf_file not in pyperf:
            return f"its pyperf file {r.pyperf_file[:80]!r} is missing from the branch"
    return run


def _check_comparison(ident: str, data: bytes) -> str | None:
    try:
        raw = _parse(data)
        schema.validate_comparison_dict(raw)
        c: Comparison = comparison_from_dict(raw)
    except (*repair.RECORD_ERRORS, PerfctlError) as exc:
        why = exc.message if isinstance(exc, PerfctlError) else f"{type(exc).__name__}: {exc}"
        return f"not a perfctl comparison ({why[:100]})"
    return None if c.id == ident else f"holds comparison {c.id[:40]!r}, not {ident!r}"
