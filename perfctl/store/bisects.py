"""Bisection records: ``<state_dir>/bisects/<id>.json``, one per GOOD, BAD, regime, measure.

The id is a hash of the two commits, the regime and the measure, so a re-run of the
same bisection finds its record and resumes it; the records of one call (several
regimes) share a ``group`` id. Each step's measurements are ordinary
stored comparisons (``comparisons/<id>.json``); the record lists their ids.
Written atomically after every step, like every other stored file.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from perfctl.errors import StoreError
from perfctl.files import atomic_write_text
from perfctl.model import to_dict
from perfctl.stats.bisection import Bisection, bisection_from_dict


def bisection_id(good_sha: str, bad_sha: str, regime: str, measure: str = "time") -> str:
    """The record id of one regime's bisection: the same for every re-run of it."""
    key = [good_sha, bad_sha, regime] + ([] if measure == "time" else [measure])
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]


def group_id(good_sha: str, bad_sha: str, selection: object, measure: str) -> str:
    """The id shared by the records of one call (its ends, regime selection and measure)."""
    blob = json.dumps(["group", good_sha, bad_sha, selection, measure], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def load_group(state_dir: Path, group: str) -> list[Bisection]:
    """Every stored record of one call, by regime name (a damaged one is a StoreError)."""
    folder = state_dir / "bisects"
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        b = load_bisection(state_dir, path.stem)
        if b is not None and b.group == group:
            found.append(b)
    return sorted(found, key=lambda b: b.regime)


def _path(state_dir: Path, bid: str) -> Path:
    return state_dir / "bisects" / f"{bid}.json"


def save_bisection(state_dir: Path, record: Bisection) -> Path:
    """Write the record (atomic); returns its path."""
    path = _path(state_dir, record.id)
    atomic_write_text(path, json.dumps(to_dict(record), indent=1, sort_keys=True))
    return path


def load_bisection(state_dir: Path, bid: str) -> Bisection | None:
    """The stored record with this id, or None; a damaged one is a StoreError naming it."""
    path = _path(state_dir, bid)
    if not path.is_file():
        return None
    try:
        return bisection_from_dict(json.loads(path.read_text(encoding="utf-8")))
    except StoreError:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StoreError(
            f"bisection record {path} is damaged ({type(exc).__name__})",
            "delete it (or re-run with --fresh) to start this bisection again",
        ) from exc


def find_bisection(state_dir: Path, key: str) -> Bisection:
    """The record whose id starts with ``key``, or the newest one for ``last``."""
    folder = state_dir / "bisects"
    ids = sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []
    if not ids:
        raise StoreError("no bisection is stored yet", "run `perfctl bisect GOOD BAD -r R` first")
    if key == "last":
        records = [b for b in (load_bisection(state_dir, i) for i in ids) if b is not None]
        return max(records, key=lambda b: (b.created, b.id))
    hits = [i for i in ids if i.startswith(key)]
    if len(hits) != 1:
        shown = ", ".join(hits[:5] or ids[:5])
        raise StoreError(
            f"bisection `{key}` matches {len(hits)} stored records",
            f"give a unique id prefix or `last` (stored: {shown})",
        )
    found = load_bisection(state_dir, hits[0])
    assert found is not None  # listed a moment ago; a damaged one raised StoreError
    return found
