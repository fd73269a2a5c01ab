"""Bisection records: ``<state_dir>/bisects/<id>.json``, one per GOOD, BAD and regime.

The id is a hash of the two commits and the regime, so a re-run of the same
bisection finds its record and resumes it. Each step's measurements are ordinary
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


def bisection_id(good_sha: str, bad_sha: str, regime: str) -> str:
    """The record id of a bisection: the same for every re-run of it."""
    blob = json.dumps([good_sha, bad_sha, regime])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


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
