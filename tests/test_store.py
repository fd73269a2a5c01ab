"""The store: atomic records, a self-repairing SQLite index, id prefixes, errors."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from perfctl.errors import RegimeFailed, StoreError
from perfctl.model import (
    Comparison,
    Machine,
    RefInfo,
    RegimeComparison,
    RegimeResult,
    Run,
    Status,
    Verdict,
)
from perfctl.store.local import open_store
from tests.conftest import GitRepo, run_cli

MACHINE = Machine("m1", "cpu", 2, 2**34, "6.1", "performance", "3.11.7")


def comparison(cid: str, created: str, base: str = "a" * 40, head: str = "b" * 40) -> Comparison:
    """A minimal comparison record (pure data: no measuring needed here)."""
    return Comparison(
        id=cid,
        created=created,
        base=RefInfo("main", base),
        head=RefInfo("HEAD", head),
        machine=MACHINE,
        regimes=(RegimeComparison("r", "f", Verdict.NO_CHANGE),),
    )


def test_index_is_rebuilt_when_deleted_or_damaged(tmp_path: Path) -> None:
    store = open_store(tmp_path / ".perfctl")
    store.save_comparison(comparison("20260101T000000-aaaaaa", "2026-01-01T00:00:00"))
    store.save_comparison(comparison("20260102T000000-bbbbbb", "2026-01-02T00:00:00"))
    (tmp_path / ".perfctl" / "store.sqlite").unlink()
    found = store.comparisons_between("a" * 40, "b" * 40)
    assert [c.id for c in found] == ["20260102T000000-bbbbbb", "20260101T000000-aaaaaa"]
    assert store.comparisons_between("b" * 40, "a" * 40) == []  # the other way round
    edited = comparison("20251231T000000-cccccc", "2025-12-31T00:00:00")
    store.save_comparison(
        dataclasses.replace(edited, head=dataclasses.replace(edited.head, dirty=True))
    )
    assert [c.id for c in store.comparisons_between("a" * 40, "b" * 40)] == [
        "20260102T000000-bbbbbb", "20260101T000000-aaaaaa"
    ]  # fmt: skip  # a worktree with edits is no exact pair
    (tmp_path / ".perfctl" / "store.sqlite").write_bytes(b"this is not a database" * 100)
    assert [c.id for c in store.list_comparisons()][0] == "20260102T000000-bbbbbb"
    assert (tmp_path / ".perfctl" / "damaged" / "store.sqlite").is_file()
    assert store.comparisons_between("a" * 40, "b" * 40) != []


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
    store.save_result(run.id, RegimeResult("r[x=1]", "f", Status.OK, processes=((1.0, 2.0),)), None)
    done = store.finish_run(run.id, "complete")
    assert done.status == "complete" and done.finished
    loaded = store.load_run("20260101")
    assert loaded.results[0].values == (1.0, 2.0)
    with pytest.raises(StoreError, match="unknown run id `nope`"):
        store.load_run("nope")
    with pytest.raises(StoreError, match="no comparison is stored yet"):
        store.last_comparison()
    assert not list((tmp_path / ".perfctl").rglob("*.tmp"))


def a_run(rid: str, started: str) -> Run:
    """A minimal run record."""
    return Run(id=rid, project="p", ref=RefInfo("main", "c" * 40), machine=MACHINE, started=started)


def test_damaged_records_are_named_set_aside_and_the_rest_works(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / ".perfctl"
    store = open_store(root)
    for i in (1, 2):
        store.begin_run(a_run(f"2026010{i}T000000-aaaaaa", f"2026-01-0{i}T00:00:00"))
        store.save_comparison(comparison(f"2026010{i}T000000-cccccc", f"2026-01-0{i}T00:00:00"))
    run_json = root / "runs" / "20260102T000000-aaaaaa" / "run.json"
    run_json.write_text(run_json.read_text()[:40])  # truncated
    cmp_json = root / "comparisons" / "20260102T000000-cccccc.json"
    cmp_json.write_text('{"id": "x"}')  # valid JSON, not a comparison
    assert [r.id for r in store.list_runs()] == ["20260101T000000-aaaaaa"]
    assert store.last_comparison().id == "20260101T000000-cccccc"
    err = capsys.readouterr().err
    assert f"Warning: set aside the damaged store file {run_json}" in err
    assert f"Warning: set aside the damaged store file {cmp_json}" in err
    assert (root / "damaged" / "runs" / "20260102T000000-aaaaaa" / "run.json").is_file()
    assert (root / "damaged" / "comparisons" / cmp_json.name).is_file()
    assert store.comparisons_between("a" * 40, "b" * 40) != []
    # Once set aside, they are not reported again.
    store.list_runs()
    store.list_comparisons()
    assert capsys.readouterr().err == ""


def test_damaged_record_asked_for_by_id_is_a_store_error(tmp_path: Path) -> None:
    root = tmp_path / ".perfctl"
    store = open_store(root)
    store.begin_run(a_run("20260101T000000-aaaaaa", "2026-01-01T00:00:00"))
    (root / "runs" / "20260101T000000-aaaaaa" / "run.json").write_text("{")
    with pytest.raises(StoreError, match="is damaged") as info:
        store.load_run("20260101")
    assert "set aside" in info.value.hint


def _scramble(db: Path) -> None:
    data = bytearray(db.read_bytes())
    for offset in range(4096, len(data), 4096):
        data[offset + 100 : offset + 3000] = b"\x5a" * 2900
    db.write_bytes(bytes(data))


def test_scrambled_index_pages_are_rebuilt_from_the_files(tmp_path: Path) -> None:
    root = tmp_path / ".perfctl"
    store = open_store(root)
    for i in range(300):
        store.save_comparison(comparison(f"20260101T{i:06d}-aaaaaa", "2026-01-01T00:00:00"))
    _scramble(root / "store.sqlite")
    assert len(store.list_comparisons()) == 300
    assert store.comparisons_between("a" * 40, "b" * 40) != []
    assert (root / "damaged" / "store.sqlite").is_file()


def test_index_that_is_a_directory_is_set_aside(tmp_path: Path) -> None:
    root = tmp_path / ".perfctl"
    store = open_store(root)
    store.save_comparison(comparison("20260101T000000-aaaaaa", "2026-01-01T00:00:00"))
    (root / "store.sqlite").unlink()
    (root / "store.sqlite").mkdir()
    assert [c.id for c in store.list_comparisons()] == ["20260101T000000-aaaaaa"]
    assert (root / "store.sqlite").is_file()


def test_an_empty_comparison_is_never_stored(tmp_path: Path) -> None:
    store = open_store(tmp_path / ".perfctl")
    empty = dataclasses.replace(comparison("20260101T000000-aaaaaa", "2026-01-01"), regimes=())
    with pytest.raises(RegimeFailed, match="no regime was measured on both sides") as info:
        store.save_comparison(empty)
    assert info.value.exit_code == 3 and "perfctl compare" in info.value.hint
    assert not (tmp_path / ".perfctl" / "comparisons").exists()


def test_a_store_that_cannot_be_written_is_a_store_error(tmp_path: Path) -> None:
    # A regular file where the store's folder should be: no user, root included, can write.
    (tmp_path / "blocked").write_text("")
    store = open_store(tmp_path / "blocked" / ".perfctl")
    with pytest.raises(StoreError, match="cannot write to the store") as info:
        store.begin_run(a_run("20260101T000000-aaaaaa", "2026-01-01"))
    assert "writable" in info.value.hint


def test_cli_keeps_working_around_a_damaged_comparison(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.perfctl]\nregimes = ["b.py"]\n')
    store = open_store(tmp_path / ".perfctl")
    store.save_comparison(comparison("20260101T000000-aaaaaa", "2026-01-01T00:00:00"))
    store.save_comparison(comparison("20260102T000000-bbbbbb", "2026-01-02T00:00:00"))
    damaged = tmp_path / ".perfctl" / "comparisons" / "20260102T000000-bbbbbb.json"
    damaged.write_text(damaged.read_text()[:100])
    listed = run_cli("comparisons", "--format", "json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert [c["id"] for c in json.loads(listed.stdout)] == ["20260101T000000-aaaaaa"]
    assert f"Warning: set aside the damaged store file {damaged}" in listed.stderr
    report = run_cli("report", "--last", "-o", str(tmp_path / "r.html"), cwd=tmp_path)
    assert report.returncode == 0, report.stderr


def test_a_narrow_terminal_never_cuts_the_ids_of_a_listing(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.perfctl]\nregimes = ["b.py"]\n')
    store = open_store(tmp_path / ".perfctl")
    store.save_comparison(comparison("20260101T000000-aaaaaa", "2026-01-01T00:00:00"))
    listed = run_cli("comparisons", cwd=tmp_path, env={"COLUMNS": "40"})
    assert listed.returncode == 0, listed.stderr
    assert "20260101T000000-aaaaaa" in listed.stdout, listed.stdout


def test_from_store_with_no_common_regime_stores_nothing(git_repo: GitRepo) -> None:
    git_repo.write("pyproject.toml", '[tool.perfctl]\nregimes = ["b.py"]\ninstall = false\n')
    shas = [git_repo.commit("c1"), git_repo.commit("c2")]
    store = open_store(git_repo.path / ".perfctl")
    for i, (sha, name) in enumerate(zip(shas, ("only_old", "only_new"), strict=True)):
        run = dataclasses.replace(a_run(f"2026010{i}T000000-aaaaaa", f"2026-01-0{i}T00:00"))
        store.begin_run(dataclasses.replace(run, ref=RefInfo("x", sha)))
        store.save_result(run.id, RegimeResult(name, "f", Status.OK, processes=((1.0, 2.0),)), None)
        store.finish_run(run.id, "complete")
    proc = run_cli("compare", "HEAD~1", "HEAD", "--from-store", "--mix-runs", cwd=git_repo.path)
    assert proc.returncode == 3, proc.stderr
    assert "Error: nothing to compare" in proc.stderr and "Hint:" in proc.stderr
    assert not (git_repo.path / ".perfctl" / "comparisons").exists()


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


def test_warnings_keep_their_kinds_and_stay_plain_text(tmp_path: Path) -> None:
    import copy
    import pickle

    from perfctl.caveats import Caveat, WarningKind
    from perfctl.model import comparison_from_dict, to_dict
    from perfctl.store.schema import validate_comparison_dict

    busy = Caveat("the machine was busy", WarningKind.BUSY_MACHINE)
    apart = Caveat("runs measured apart", WarningKind.MEASURED_APART)
    c = dataclasses.replace(
        comparison("20260101T000000-bbbbbb", "2026-01-01"), warnings=(busy, apart)
    )
    store = open_store(tmp_path / ".perfctl")
    store.save_comparison(c)
    stored = json.loads(_stored_json(tmp_path / ".perfctl", c.id).read_text())
    # The texts as they always were (readers of them keep working), the kinds beside them.
    assert stored["warnings"] == ["the machine was busy", "runs measured apart"]
    assert stored["warning_kinds"] == ["busy-machine", "measured-apart"]
    validate_comparison_dict(stored)
    loaded = store.load_comparison(c.id)
    assert [(str(w), w.kind) for w in loaded.warnings] == [
        ("the machine was busy", WarningKind.BUSY_MACHINE),
        ("runs measured apart", WarningKind.MEASURED_APART),
    ]
    assert loaded == c and "busy" in loaded.warnings[0]  # still a str to every renderer
    # A record written before kinds were, or with a kind from a newer perfctl: "other".
    old = {k: v for k, v in stored.items() if k != "warning_kinds"}
    assert [w.kind for w in comparison_from_dict(old).warnings] == [WarningKind.OTHER] * 2
    newer = {**stored, "warning_kinds": ["busy-machine", "cosmic-rays"]}
    assert [w.kind for w in comparison_from_dict(newer).warnings] == [
        WarningKind.BUSY_MACHINE,
        WarningKind.OTHER,
    ]
    # Copied, pickled (process pools) or turned into a dict, a warning keeps its kind.
    for again in (copy.deepcopy(busy), pickle.loads(pickle.dumps(busy))):
        assert (again, again.kind) == (busy, WarningKind.BUSY_MACHINE)
    assert to_dict(c)["warning_kinds"] == ["busy-machine", "measured-apart"]
    with pytest.raises(AttributeError):
        busy.kind = WarningKind.OTHER


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
