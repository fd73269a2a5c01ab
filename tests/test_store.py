"""The store: atomic records, a self-repairing SQLite index, id prefixes, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfctl.errors import StoreError
from perfctl.model import Comparison, Machine, RefInfo, RegimeResult, Run
from perfctl.store.local import open_store

MACHINE = Machine("m1", "cpu", 2, 2**34, "6.1", "performance", "3.11.7")


def comparison(cid: str, created: str, base: str = "a" * 40, head: str = "b" * 40) -> Comparison:
    """A minimal comparison record (pure data: no measuring needed here)."""
    return Comparison(
        id=cid,
        created=created,
        base=RefInfo("main", base),
        head=RefInfo("HEAD", head),
        machine=MACHINE,
        regimes=(),
    )


def test_index_is_rebuilt_when_deleted_or_damaged(tmp_path: Path) -> None:
    store = open_store(tmp_path / ".perfctl")
    store.save_comparison(comparison("20260101T000000-aaaaaa", "2026-01-01T00:00:00"))
    store.save_comparison(comparison("20260102T000000-bbbbbb", "2026-01-02T00:00:00"))
    (tmp_path / ".perfctl" / "store.sqlite").unlink()
    found = store.find_comparison("a" * 40, "b" * 40)
    assert found is not None and found.id == "20260102T000000-bbbbbb"
    (tmp_path / ".perfctl" / "store.sqlite").write_bytes(b"this is not a database" * 100)
    assert [c.id for c in store.list_comparisons()][0] == "20260102T000000-bbbbbb"
    assert list((tmp_path / ".perfctl").glob("store.damaged-*"))
    assert store.find_comparison("a" * 40, "b" * 40) is not None


def test_runs_results_and_prefixes(tmp_path: Path) -> None:
    store = open_store(tmp_path / ".perfctl")
    run = Run(
        id="20260101T000000-abcdef",
        project="p",
        ref=RefInfo("main", "c" * 40),
        machine=MACHINE,
        started="2026-01-01T00:00:00",
    )
    store.begin_run(run)
    store.save_result(run.id, RegimeResult("r[x=1]", "f", "ok", processes=((1.0, 2.0),)), None)
    done = store.finish_run(run.id, "complete")
    assert done.status == "complete" and done.finished
    loaded = store.load_run("20260101")
    assert loaded.results[0].values == (1.0, 2.0)
    with pytest.raises(StoreError, match="unknown run id `nope`"):
        store.load_run("nope")
    with pytest.raises(StoreError, match="no comparison is stored yet"):
        store.last_comparison()
    assert not list((tmp_path / ".perfctl").rglob("*.tmp"))
