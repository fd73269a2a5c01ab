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


def _stored_json(store_dir: Path, cid: str) -> Path:
    return store_dir / "comparisons" / f"{cid}.json"


def test_verdicts_and_statuses_load_as_enums(tmp_path: Path) -> None:
    from dataclasses import replace

    from perfctl.model import FAILED, REGRESSED, RegimeComparison, Status, Verdict

    store = open_store(tmp_path / ".perfctl")
    row = RegimeComparison("r", "f", REGRESSED, head_status=Status.OK)
    failed = RegimeComparison("q", "f", FAILED, base_status=Status.FAILED)
    c = replace(comparison("20260101T000000-aaaaaa", "2026-01-01"), regimes=(row, failed))
    store.save_comparison(c)
    loaded = store.load_comparison("20260101")
    assert [type(r.verdict) for r in loaded.regimes] == [Verdict, Verdict]
    assert loaded.regimes[0].verdict is Verdict.REGRESSED
    assert loaded.regimes[1].base_status is Status.FAILED
    assert loaded.counts()["regressed"] == 1  # still plain strings to JSON and templates
    assert '"verdict": "regressed"' in _stored_json(tmp_path / ".perfctl", c.id).read_text()


def test_a_record_from_a_newer_perfctl_is_refused_with_a_hint(tmp_path: Path) -> None:
    import json

    from perfctl.model import SCHEMA_VERSION

    store = open_store(tmp_path / ".perfctl")
    c = comparison("20260101T000000-aaaaaa", "2026-01-01")
    store.save_comparison(c)
    path = _stored_json(tmp_path / ".perfctl", c.id)
    data = json.loads(path.read_text())
    data["schema"] = SCHEMA_VERSION + 1
    path.write_text(json.dumps(data))
    with pytest.raises(StoreError, match="newer than this perfctl reads") as err:
        store.load_comparison(c.id)
    assert "upgrade perfctl" in err.value.hint
    data["schema"] = "one"
    path.write_text(json.dumps(data))
    with pytest.raises(StoreError, match="not a version perfctl wrote"):
        store.load_comparison(c.id)


def test_an_unknown_stored_verdict_is_a_store_error_not_a_crash(tmp_path: Path, cli) -> None:
    import json
    from dataclasses import replace

    from perfctl.model import IMPROVED, RegimeComparison

    state = tmp_path / ".perfctl"
    store = open_store(state)
    c = comparison("20260101T000000-aaaaaa", "2026-01-01")
    store.save_comparison(replace(c, regimes=(RegimeComparison("r", "f", IMPROVED),)))
    path = _stored_json(state, c.id)
    path.write_text(path.read_text().replace('"improved"', '"improved\\u001b[2J"'))
    assert json.loads(path.read_text())["regimes"][0]["verdict"].startswith("improved")
    with pytest.raises(StoreError, match="unknown verdict"):
        store.load_comparison(c.id)
    (tmp_path / "perfctl.toml").write_text('store = ".perfctl"\n')
    done = cli("report", c.id, "-o", str(tmp_path / "r.html"), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Error: unknown verdict" in done.stderr and "Traceback" not in done.stderr
    assert "\x1b" not in done.stderr
