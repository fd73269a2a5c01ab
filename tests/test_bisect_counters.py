"""`perfctl bisect --measure instructions --profile`: callgrind's differential of the
answer's ends beside py-spy's. The end-to-end test (real callgrind processes) is in
``test_counters.py``, beside the comparison whose processes it reuses; here, what a
scripted comparison drives: ends no step measured, failures, and stops."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import GitRepo


# -- ends that no step measured together (a range widened after its verification) -----
def _diff_file(folder: Path) -> Path:
    from perfctl.profile.instruction_records import FunctionMove, InstructionsDiff, to_dict

    move = FunctionMove("lookdict", "libpython", 100.0, 250.0, 100.0, 250.0)
    d = InstructionsDiff("work", "r1", "r2", 1000.0, 1150.0, (move,))
    folder.mkdir(parents=True)
    (folder / "functions.json").write_text(json.dumps(to_dict(d)))
    return folder / "functions.json"


def test_ends_no_step_measured_together_are_compared_for_the_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from perfctl.config import Config
    from perfctl.errors import BuildError
    from perfctl.jobs import compare
    from perfctl.jobs.bisect_profile import callgrind_ends
    from perfctl.model import OK, REGRESSED, Comparison, RefInfo, RegimeComparison
    from perfctl.stats.bisection import Bisection

    config = Config(root=tmp_path, install=False)
    ends = (RefInfo("a", "a" * 40), RefInfo("b", "b" * 40))
    record = Bisection("b1", "now", "work", *ends, commits=2)
    table = _diff_file(tmp_path / "diff")
    asked: list[tuple[str, str, list[str], str]] = []

    def fake(config, base, head, *, regimes, settings, progress=None) -> Comparison:
        asked.append((base, head, regimes, settings.schedule.measure))
        if base == "fail":
            raise BuildError("building the environment of a failed", "see log")
        artifacts = {"instructions_functions": str(table)} if head == "b" * 40 else {}
        row = RegimeComparison("work", "toy", REGRESSED, artifacts=artifacts, base_status=OK)
        return Comparison("c9", "now", *ends, machine=None, regimes=(row,))  # type: ignore[arg-type]

    monkeypatch.setattr(compare, "compare_refs", fake)
    said: list[str] = []
    cs = compare.settings_for(config=config, measure="instructions")
    link = callgrind_ends(config, record, ends, cs, said.append)
    assert asked == [("a" * 40, "b" * 40, ["work"], "instructions")]
    assert said == [
        f"profile: work {ends[0].short} → {ends[1].short} (callgrind, measured together)"
    ]
    assert link.error == "" and link.source.startswith("comparison c9 (measured for this profile")
    assert link.movers == ("in all: 1,000 → 1,150", "+150  lookdict (libpython)  (100 → 250)")
    assert link.files == {"functions_json": str(table)}
    # No diff in what was measured (the regime was skipped under callgrind), or no build:
    # a line saying why, never a lost bisection.
    other = (ends[0], RefInfo("c", "c" * 40))
    missing = callgrind_ends(config, record, other, cs, said.append).error
    assert missing == (
        "no instructions diff in comparison c9: its call graphs could not be written or read"
    )
    broken = (RefInfo("fail", "fail"), ends[1])
    assert (
        "building the environment" in callgrind_ends(config, record, broken, cs, said.append).error
    )


def _slow_from(
    git_repo: GitRepo, monkeypatch: pytest.MonkeyPatch, *, commits: int, slow: int
) -> list[str]:
    """A line of ``commits`` commits whose scripted comparisons read 3x slower from
    commit ``slow`` on; its shas."""
    from perfctl.jobs import bisect_pairs
    from tests.test_bisect import FakeCompare

    git_repo.write("pyproject.toml", '[project]\nname = "toy"\nversion = "0"\n')
    line = [git_repo.commit("c0")]
    for i in range(1, commits):
        git_repo.write("notes.txt", f"{i}\n")
        line.append(git_repo.commit(f"c{i}"))
    slower = dict.fromkeys(range(slow, commits), 3.0)
    monkeypatch.setattr(bisect_pairs, "compare_refs", FakeCompare(line, slower))
    return line


def test_fake_a_stop_while_callgrind_measures_keeps_the_py_spy_differential(
    git_repo: GitRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each differential is saved as soon as it is taken, and a resumed run saves the
    kept ones before it measures anything: two stops in a row lose neither."""
    from dataclasses import replace

    from perfctl.config import load_config
    from perfctl.jobs import bisect as job
    from perfctl.jobs import bisect_profile
    from perfctl.jobs.compare import COMPARE_FAST
    from perfctl.stats.bisection import ProfileLink
    from perfctl.store.bisects import load_bisection

    line = _slow_from(git_repo, monkeypatch, commits=6, slow=4)
    profiled: list[str] = []

    def py_spy(config, regime, before, after, regimes, *, duration=5.0) -> ProfileLink:
        profiled.append(after.sha)
        return ProfileLink(before, after, {"diff_svg": "x.svg"}, ("moved",))

    def stop(*args, **kw) -> ProfileLink:
        raise KeyboardInterrupt

    monkeypatch.setattr(bisect_profile, "profile_ends", py_spy)
    monkeypatch.setattr(bisect_profile, "callgrind_ends", stop)
    counted = replace(COMPARE_FAST, schedule=replace(COMPARE_FAST.schedule, measure="instructions"))
    settings = job.BisectSettings(compare=counted, profile=True)
    config = load_config(git_repo.path)
    for _ in range(2):
        with pytest.raises(KeyboardInterrupt):
            job.bisect(config, line[0], line[-1], "work", settings)
    assert profiled == [line[4]]  # taken once, kept by the second run
    (path,) = (git_repo.path / ".perfctl" / "bisects").glob("*.json")
    stored = load_bisection(git_repo.path / ".perfctl", path.stem)
    assert stored is not None and stored.profile is not None and stored.callgrind is None
    assert stored.profile.files == {"diff_svg": "x.svg"}
    done = ProfileLink(*(stored.profile.before, stored.profile.after), source="comparison c9")
    monkeypatch.setattr(bisect_profile, "callgrind_ends", lambda *a, **kw: done)
    (record,) = job.bisect(config, line[0], line[-1], "work", settings)
    assert record.culprit is not None and record.culprit.sha == line[4]
    assert record.profile == stored.profile and record.callgrind == done
    assert profiled == [line[4]]


def test_a_rerun_keeps_a_stored_py_spy_differential_unless_another_length_is_asked(
    git_repo: GitRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resumed bisection keeps the stored profile of the same ends (a plain re-run, or
    the length it was taken at); ``--profile-duration`` with another length takes it again,
    and the record says how long each end was sampled. A retake that fails or is stopped
    keeps the stored one; a record from before the length was kept counts as 5 s."""
    from dataclasses import replace

    from perfctl.config import load_config
    from perfctl.jobs import bisect as job
    from perfctl.jobs import bisect_profile
    from perfctl.jobs.compare import COMPARE_FAST
    from perfctl.render.bisect import profile_lines
    from perfctl.stats.bisection import ProfileLink

    line = _slow_from(git_repo, monkeypatch, commits=4, slow=2)
    taken: list[float] = []
    outcome: list[str] = ["ok"]

    def py_spy(config, regime, before, after, regimes, *, duration) -> ProfileLink:
        taken.append(duration)
        if outcome[0] == "stop":
            raise KeyboardInterrupt
        error = "py-spy could not attach" if outcome[0] == "fail" else ""
        return ProfileLink(
            before, after, {"diff_svg": "x.svg"}, ("moved",), error, seconds=duration
        )

    monkeypatch.setattr(bisect_profile, "profile_ends", py_spy)
    config = load_config(git_repo.path)
    plain = job.BisectSettings(compare=COMPARE_FAST, profile=True)

    def run(seconds: float | None = None, *, profile: bool = True) -> tuple[float, list[str]]:
        said: list[str] = []
        settings = replace(plain, profile=profile, profile_duration=seconds)
        (record,) = job.bisect(config, line[0], line[-1], "work", settings, progress=said.append)
        assert record.culprit is not None and record.culprit.sha == line[2]
        assert record.profile is not None and record.profile.error == "", record.profile
        sampled = record.profile.seconds
        shown = f", {sampled:g} s a ref" if sampled else ""  # an older record: not said
        assert profile_lines(record)[0].endswith(f"not a measurement{shown}):")
        return record.profile.seconds, [s for s in said if s.startswith("profile:")]

    where = f"work {line[1][:10]} → {line[2][:10]}"
    assert run() == (5.0, [f"profile: {where} (py-spy, 5 s a ref)"])
    assert run() == (5.0, [])  # kept
    assert run(2.0) == (2.0, [f"profile: {where} (py-spy, 2 s a ref)"])  # another length
    assert run() == (2.0, []) and run(2.0) == (2.0, []) and run(profile=False) == (2.0, [])
    assert taken == [5.0, 2.0]
    outcome[0] = "fail"  # a retake that fails keeps the stored differential
    assert run(3.0) == (2.0, [
        f"profile: {where} (py-spy, 3 s a ref)",
        f"profile: {where} not taken again (py-spy could not attach); kept the 2 s one",
    ])  # fmt: skip
    outcome[0] = "stop"  # so does one that is stopped
    with pytest.raises(KeyboardInterrupt):
        run(4.0)
    outcome[0] = "ok"
    assert run(profile=False) == (2.0, [])
    # A record written before the length was kept (no "seconds") sampled 5 s.
    (path,) = (git_repo.path / ".perfctl" / "bisects").glob("*.json")
    data = json.loads(path.read_text())
    del data["profile"]["seconds"]
    path.write_text(json.dumps(data))
    assert run(5.0) == (0.0, [])
    assert taken == [5.0, 2.0, 3.0, 4.0]
    assert run(2.0) == (2.0, [f"profile: {where} (py-spy, 2 s a ref)"])
