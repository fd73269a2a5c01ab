"""compare's orchestration logic driven by the fake executor (no worker processes).

Sequential sampling, its stopping rule and guards, resume, failed sides and the
verdict plumbing run here in milliseconds with scripted process values; the
end-to-end tests in test_compare.py keep one real pyperf run of each feature.
The unit tier (tests/conftest.py) holds these tests to starting no process but git.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from perfctl.config import Config
from perfctl.jobs.compare import CompareSettings, compare_refs, settings_for
from perfctl.model import Comparison, RegimeComparison
from tests.conftest import GitRepo
from tests.fakes import Dist, FakeExecutor, Interrupted

SLOWER = {("a", "work"): Dist(1e-3), ("b", "work"): Dist(1.5e-3)}


def _project(root: Path) -> Config:
    """A project whose regimes file exists; the fake never reads it."""
    (root / "bench").mkdir(parents=True, exist_ok=True)
    (root / "bench" / "regimes.py").write_text("# scripted by tests/fakes.py\n")
    return Config(root=root, regimes=("bench/regimes.py",), state_dir=root / ".perfctl")


def _settings(**kw: object) -> CompareSettings:
    # The process path's sampling (the auto and same-process tests name their pairing).
    base: dict[str, object] = {
        "rounds": 3, "max_rounds": 60, "time_budget": 1e6, "values": 2, "pairing": "process"
    }  # fmt: skip
    return settings_for(**{**base, **kw})  # type: ignore[arg-type]


def _row(c: Comparison, name: str) -> RegimeComparison:
    return next(r for r in c.regimes if r.name == name)


def _compare(
    tmp_path: Path,
    fake: FakeExecutor,
    settings: CompareSettings,
    base: str = "a",
    head: str = "b",
    progress: Callable[[str], None] | None = None,
) -> Comparison:
    project = _project(tmp_path)
    return compare_refs(project, base, head, settings=settings, executor=fake, progress=progress)


def test_a_clear_regression_stops_early_and_is_regressed(tmp_path: Path) -> None:
    fake = FakeExecutor(SLOWER)
    c = _compare(tmp_path, fake, _settings())
    row = _row(c, "work")
    assert row.verdict == "regressed"
    assert 3 <= fake.rounds() // 2 < 60  # stopped by the rule, not by max_rounds
    assert len(row.base_values) == fake.rounds() // 2  # one value (mean) per process


def test_each_regime_records_the_time_it_took_to_measure(tmp_path: Path) -> None:
    """Every timed process moves the fake clock on by ``fake.seconds`` (calibration not):
    a regime's row and both its stored results say exactly that much, and the text
    output's line lists the regimes longest first."""
    from perfctl.render.notes import time_line
    from perfctl.store.local import open_store

    noisy = {(r, "noisy"): Dist(1e-3, cv=0.3) for r in "ab"}
    fake = FakeExecutor({**SLOWER, **noisy}, seconds=1.5)
    c = _compare(tmp_path, fake, _settings(max_rounds=40))
    for row in c.regimes:
        ran = [k for k, _, name in fake.calls if name == row.name and k != "calibrate"]
        spent = fake.seconds * len(ran)
        assert row.seconds == pytest.approx(spent, abs=0.01) and spent > 0
    store = open_store(tmp_path / ".perfctl")
    for run in (c.base_run, c.head_run):
        got = {r.name: r.seconds for r in store.load_run(run).results}
        assert got == {r.name: r.seconds for r in c.regimes}
    work, noisy_row = _row(c, "work"), _row(c, "noisy")
    assert noisy_row.seconds > work.seconds  # noisy data take more rounds
    line = time_line(c) or ""
    assert line.index("noisy ") < line.index("work ")
    assert line.startswith("Measuring took ") and line.endswith(" s.")
    assert time_line(replace(c, recomputed_from=c.id)) is None  # not measured by this one


@pytest.mark.parametrize(
    ("seconds", "said"), [(0.4, "0 s"), (59.4, "59 s"), (59.6, "1 min 00 s"), (3725, "62 min 05 s")]
)
def test_measuring_time_reads_in_seconds_then_minutes(seconds: float, said: str) -> None:
    from perfctl.render.notes import duration

    assert duration(seconds) == said


def test_abba_blocks_are_balanced_reproducible_and_drawn_from_the_seed() -> None:
    """Each block of two rounds is ABBA or BAAB; which one, the seed decides, not the index."""
    import random

    from perfctl.measure.interleave import Schedule, round_order

    def blocks(seed: int) -> list[str]:
        sched, rng = Schedule(seed=seed), random.Random(0)
        sides = [s[0] for i in range(40) for s in round_order(i, sched, rng)]
        return ["".join(sides[k : k + 4]) for k in range(0, 80, 4)]

    got = blocks(0)
    assert set(got) == {"bhhb", "hbbh"}  # both ways round: a period cannot keep to one side
    assert got == blocks(0) and got != blocks(1)  # reproducible; another seed, other draws
    # Blocks come in pairs of one of each, in a drawn order: never three alike in a row.
    assert all(sorted(got[k : k + 2]) == ["bhhb", "hbbh"] for k in range(0, 20, 2))
    assert {got[k] for k in range(0, 20, 2)} == {"bhhb", "hbbh"}  # the order is drawn


def test_a_smaller_alpha_needs_more_rounds(tmp_path: Path) -> None:
    # Stopping on a change needs p < alpha / 50: the rank test reaches 0.001 with
    # 7 processes a side, 2e-5 (alpha 0.001) only with 10.
    rounds = {}
    for alpha in (0.05, 0.001):
        fake = FakeExecutor(SLOWER)
        c = _compare(tmp_path / str(alpha), fake, _settings(alpha=alpha))
        assert _row(c, "work").verdict == "regressed"
        rounds[alpha] = fake.rounds() // 2
    assert rounds[0.001] > rounds[0.05]


NOISY_SLOWER = {
    # Apart: process CV 25%. Paired in one process: the values' own 30% spread leaves
    # the per-pair ratios ~13% apart, over max_cv too. Three times slower either way.
    ("a", "slow"): Dist(1e-3, cv=0.25, within=0.3),
    ("b", "slow"): Dist(3e-3, cv=0.25, within=0.3),
}
NINE_SAME = {(ref, f"same{i}"): Dist(1e-3, cv=0.01) for i in range(9) for ref in "ab"}


def _slow_rounds(fake: FakeExecutor) -> int:
    """Rounds of the noisy regime: base's timed processes (a duo process holds both)."""
    timed = [(ref, name) for kind, ref, name in fake.calls if kind in ("process", "duo")]
    return timed.count(("a", "slow"))


@pytest.mark.parametrize(
    ("pairing", "band", "alone", "among_ten"),
    [("process", 0.02, 7, 8), ("auto", 0.02, 11, 12), ("process", 0.01, 8, 8)],
)
def test_a_noisy_regression_among_ten_is_sampled_until_the_correction_keeps_it(
    tmp_path: Path, pairing: str, band: float, alone: int, among_ten: int
) -> None:
    # On ±2%, alone, 7 processes a side wholly apart (p = 0.00058), or 11 pairs all slower
    # (2/2**11), stop it. Among ten regimes that p adjusts to 0.0058 or 0.0098, over a
    # noisy side's alpha / 10, so sampling goes on (p < 0.0005) and the verdict holds.
    # On the ±1% default an early look asks p < 0.0005 alone too: 8 either way.
    settings = _settings(pairing=pairing, threshold=band)
    lone = FakeExecutor(NOISY_SLOWER)
    assert _row(_compare(tmp_path / "alone", lone, settings), "slow").verdict == "regressed"
    suite = FakeExecutor({**NOISY_SLOWER, **NINE_SAME})
    row = _row(_compare(tmp_path / "suite", suite, settings), "slow")
    assert row.verdict == "regressed", row.reason
    assert row.p_adjusted is not None and row.p_adjusted < 0.005
    assert (_slow_rounds(lone), _slow_rounds(suite)) == (alone, among_ten)


def test_a_shard_samples_for_the_correction_of_every_shards_regimes(tmp_path: Path) -> None:
    # Shard 2 of 2 measures five of the ten regimes ("slow" among them); merge decides
    # all ten together, so it samples as the whole suite does (on ±2%, where the family
    # of ten asks one more round than five: 8 against 7).
    from perfctl.jobs.shard import Shard

    fake = FakeExecutor({**NOISY_SLOWER, **NINE_SAME})
    settings = replace(_settings(threshold=0.02), shard=Shard(2, 2, "run"))
    c = _compare(tmp_path, fake, settings)
    assert len(c.regimes) == 5
    assert _slow_rounds(fake) == 8


def test_the_same_code_stops_inside_the_noise_band(tmp_path: Path) -> None:
    same = {("a", "work"): Dist(1e-3, cv=0.002), ("b", "work"): Dist(1e-3, cv=0.002)}
    fake = FakeExecutor(same)
    c = _compare(tmp_path, fake, _settings())
    assert _row(c, "work").verdict in ("no change", "within noise")
    assert fake.rounds() // 2 < 60


def test_a_regime_that_declares_a_wide_band_stops_on_it(tmp_path: Path) -> None:
    same = {(ref, n): Dist(1e-3, cv=0.05) for ref in ("a", "b") for n in ("work", "loose")}
    fake = FakeExecutor(same, bands={"loose": 0.3})
    c = _compare(tmp_path, fake, _settings(rounds=10))
    loose, work = _row(c, "loose"), _row(c, "work")
    assert len(loose.base_values) == 10 < len(work.base_values)  # inside ±30% at once
    assert (loose.verdict, loose.threshold, work.threshold) == ("no change", 0.3, None)
    assert "inside the 30% noise band" in loose.reason


def test_the_time_budget_ends_sampling(tmp_path: Path) -> None:
    noisy = {("a", "work"): Dist(1e-3, cv=0.3), ("b", "work"): Dist(1e-3, cv=0.3)}
    fake = FakeExecutor(noisy, seconds=1.0)  # a round takes 2 s of the fake clock
    _compare(tmp_path, fake, _settings(time_budget=10.0, max_rounds=400))
    assert fake.rounds() // 2 == 6  # past 10 s after round 6: no further round


def test_sampling_stops_short_of_the_regime_timeout(tmp_path: Path) -> None:
    # The budget (120 s, up to 400 rounds) is far past the regime's own 10 s timeout,
    # and no number of rounds makes the answer clear: only the timeout guard stops
    # sampling, before a round could run into the timeout and fail the regime.
    noisy = {("a", "work"): Dist(1e-3, cv=0.3), ("b", "work"): Dist(1e-3, cv=0.3)}
    fake = FakeExecutor(noisy, seconds=0.5, timeout=10.0)
    c = _compare(tmp_path, fake, _settings(time_budget=120.0, max_rounds=400))
    row = _row(c, "work")
    assert row.verdict != "failed", row.reason
    assert 3 <= fake.rounds() // 2 < 30  # fewer than the futility stop's 30
    assert fake.clock < 10.0


def test_a_regime_failing_on_one_side_keeps_the_rest(tmp_path: Path) -> None:
    dists = {**SLOWER, ("a", "new"): Dist(1e-3), ("b", "new"): Dist(1e-3)}
    fake = FakeExecutor(dists, fail={("a", "new"): "RuntimeError: old implementation"})
    c = _compare(tmp_path, fake, _settings())
    assert _row(c, "new").verdict == "failed"
    assert "old implementation" in (_row(c, "new").reason or "")
    assert _row(c, "work").verdict == "regressed"


def test_a_ref_whose_regimes_do_not_load_fails_only_there(tmp_path: Path) -> None:
    fake = FakeExecutor(SLOWER, broken={"a": "bench/regimes.py:1: ImportError: toy"})
    c = _compare(tmp_path, fake, _settings())
    row = _row(c, "work")
    assert row.verdict == "failed" and "ImportError: toy" in (row.reason or "")
    assert fake.rounds() == 0


def test_same_process_pairing_cancels_the_process_noise(tmp_path: Path) -> None:
    # Process noise (CV 20%) that hides a 5% slowdown from independent processes
    # cancels within each duo process.
    dists = {("a", "work"): Dist(1e-3, cv=0.2), ("b", "work"): Dist(1.05e-3, cv=0.2)}
    fake = FakeExecutor(dists)
    c = _compare(tmp_path, fake, _settings(pairing="same-process"))
    assert _row(c, "work").verdict == "regressed"
    assert fake.rounds("duo") >= 3 and fake.rounds("process") == 0


def test_auto_pairing_shares_a_worker_only_where_a_regime_can(tmp_path: Path) -> None:
    """--pairing auto (the default): same-process for an in-process regime; separate
    processes for one whose calibration ran a child process and one a duo worker refused;
    each row says how it was measured and its verdict's test follows."""
    names = ("calc", "pipe", "plain")
    dists = {("a", n): Dist(1e-3, cv=0.2) for n in names}
    dists |= {("b", n): Dist(1.05e-3, cv=0.2) for n in names}
    fake = FakeExecutor(dists, spawning={"pipe"}, unshared={"plain": "RuntimeError: no code"})
    c = _compare(tmp_path, fake, _settings(pairing="auto", max_rounds=12))
    assert c.settings["pairing"] == "auto"
    rows = {n: _row(c, n) for n in names}
    assert {n: r.pairing for n, r in rows.items()} == {
        "calc": "same-process", "pipe": "process", "plain": "process"
    }  # fmt: skip
    # Process noise (CV 20%) cancels in the pairs only: +5% is found where they were shared.
    assert rows["calc"].verdict == "regressed"
    assert rows["pipe"].verdict == rows["plain"].verdict == "inconclusive"
    # One calibration per regime chose; the refused regime's first duo worker was its last.
    assert [k for k, _, n in fake.calls if n == "pipe" and k != "process"] == ["calibrate"]
    assert [k for k, _, n in fake.calls if n == "plain" and k != "process"] == [
        "calibrate", "duo"
    ]  # fmt: skip
    assert fake.rounds("process") >= 2 * 2 * 3
    from perfctl.render.notes import comparison_notes
    from perfctl.render.tables import verdict_test

    assert "Mann–Whitney U on per-process means elsewhere" in verdict_test(c)
    (note,) = [n for n in comparison_notes(c) if "same-process pairing" in n]
    assert "(same-process pairing): calc;" in note and note.endswith(": pipe, plain.")


@pytest.mark.parametrize(("first", "clock"), [(0, "wall"), (4, "wall"), (4, "busy")])
def test_auto_measures_apart_a_regime_whose_head_starts_processes(
    tmp_path: Path, first: int, clock: str
) -> None:
    """Calibration watched base only; the duo worker watches both, and the first sign of
    another process (in its first round or a later one) sends the regime to separate
    processes, its duo values dropped: base would have shared head's processes. Measured
    apart, it is on the wall clock whatever --clock said (only duo workers take it)."""
    dists = {("a", "calc"): Dist(1e-3, cv=0.2), ("b", "calc"): Dist(1.05e-3, cv=0.2)}
    fake = FakeExecutor(dists, head_spawns={"calc": first})
    c = _compare(tmp_path, fake, _settings(pairing="auto", max_rounds=12, clock=clock))
    row = _row(c, "calc")
    assert row.clock == "wall"
    assert row.pairing == "process" and row.verdict == "inconclusive"  # CV 20%, apart
    assert fake.rounds("duo") == first + 1  # the duo stopped at the first sign
    assert len(row.base_values) == fake.rounds("process") // 2  # only the apart values
    assert not set(row.base_order) & set(row.head_order)


def test_a_duo_that_saw_a_process_with_no_time_left_fails_saying_so(tmp_path: Path) -> None:
    # Each duo process takes 10 s on the fake clock, the regime's timeout is 25 s: the
    # third round sees the process after the timeout, so there is no time to go apart.
    dists = {(r, "calc"): Dist(1e-3) for r in ("a", "b")}
    fake = FakeExecutor(dists, head_spawns={"calc": 2}, seconds=10.0, timeout=25.0)
    row = _row(_compare(tmp_path, fake, _settings(pairing="auto", max_rounds=12)), "calc")
    assert row.verdict == "failed" and fake.rounds("process") == 0
    assert "another process ran beside the timed calls" in row.reason
    assert "no time was left to measure it apart" in row.reason


def test_an_explicit_same_process_pairing_is_not_watched(tmp_path: Path) -> None:
    dists = {("a", "calc"): Dist(1e-3, cv=0.2), ("b", "calc"): Dist(1.05e-3, cv=0.2)}
    fake = FakeExecutor(dists, head_spawns={"calc": 0})
    c = _compare(tmp_path, fake, _settings(pairing="same-process", clock="cpu"))
    row = _row(c, "calc")
    assert row.pairing == "same-process" and row.verdict == "regressed"  # as asked
    assert row.clock == "cpu"  # each row records the clock that timed it


def test_the_busy_clock_takes_wall_time_between_two_equal_wait_readings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A preemption between the two schedstat reads around the wall reading (the wait
    grew) is read again, so no slice is added or dropped; the wait is subtracted."""
    from perfctl.measure.workers import duo as worker

    waits = iter([100, 5_000_100, 5_000_100, 5_000_100])  # ns: preempted once, then not
    clock = iter([2_000_000_000, 2_010_000_000])  # ns
    monkeypatch.setattr(worker, "_waited_ns", lambda: next(waits))
    monkeypatch.setattr(worker.time, "perf_counter_ns", lambda: next(clock))
    assert worker._busy() == pytest.approx((2_010_000_000 - 5_000_100) / 1e9)


def test_the_notes_name_the_rows_an_on_cpu_clock_timed(tmp_path: Path) -> None:
    from perfctl.render.notes import timer_notes

    names = ("calc", "pipe")
    dists = {(r, n): Dist(1e-3) for r in "ab" for n in names}
    fake = FakeExecutor(dists, spawning={"pipe"})
    c = _compare(tmp_path, fake, _settings(pairing="auto", max_rounds=12, clock="busy"))
    assert {r.name: r.clock for r in c.regimes} == {"calc": "busy", "pipe": "wall"}
    (note,) = timer_notes(c)
    assert note.startswith("Values of calc are wall time less the time the timing thread")
    assert note.endswith("; the others' are timed as usual.")
    # Every row on it: said once for all; no row on it (a record from before rows had
    # their clock, measured same-process): the comparison's setting says.
    every = replace(c, regimes=tuple(replace(r, clock="busy") for r in c.regimes))
    assert timer_notes(every)[0].startswith("Values are wall time less")
    older = replace(
        c,
        regimes=tuple(replace(r, clock="wall") for r in c.regimes),
        settings={**c.settings, "clock": "cpu", "pairing": "same-process"},
    )
    (said,) = timer_notes(older)
    assert said.startswith("Values are the timing thread's CPU time")
    plain = replace(older, settings={**older.settings, "clock": "wall"})
    assert timer_notes(plain) == []


def test_auto_pairing_keeps_a_side_that_cannot_calibrate_failed(tmp_path: Path) -> None:
    dists = {(r, "calc"): Dist(1e-3) for r in ("a", "b")}
    fake = FakeExecutor(dists, fail={("a", "calc"): "ImportError: no module named calc"})
    row = _row(_compare(tmp_path, fake, _settings(pairing="auto")), "calc")
    assert row.verdict == "failed" and "ImportError" in row.reason
    assert fake.rounds("duo") == fake.rounds("process") == 0
    assert fake.rounds("calibrate") == 1  # base decides: head is not calibrated for nothing


def test_auto_pairing_falls_back_only_while_the_regime_has_time(tmp_path: Path) -> None:
    """A duo worker that fails fast is followed by separate processes; one that used the
    regime's whole timeout is the regime's failure, not a 1 s timeout of the next."""
    dists = {(r, "calc"): Dist(1e-3) for r in ("a", "b")}
    fake = FakeExecutor(dists, unshared={"calc": "RuntimeError: no code"}, timeout=60)
    row = _row(_compare(tmp_path / "fast", fake, _settings(pairing="auto")), "calc")
    assert row.pairing == "process" and row.verdict != "failed"
    hung = FakeExecutor(dists, unshared={"calc": "timed out after 60 s"}, timeout=60)
    hung.seconds = 60.0  # the duo worker takes the regime's whole timeout
    row = _row(_compare(tmp_path / "hung", hung, _settings(pairing="auto")), "calc")
    assert row.verdict == "failed" and "timed out after 60 s" in row.reason
    assert hung.rounds("process") == 0


def test_confirm_remeasures_a_regression(tmp_path: Path) -> None:
    fake = FakeExecutor(SLOWER)
    settings = replace(_settings(), confirm=True)
    c = _compare(tmp_path, fake, settings)
    assert _row(c, "work").verdict == "regressed"
    assert any("re-measured 1 flagged" in w for w in c.warnings)
    assert fake.rounds("calibrate") == 2  # the measurement and its re-measure
    # Its row took both measurements' time: every timed process of the regime.
    assert _row(c, "work").seconds == pytest.approx(fake.seconds * fake.rounds(), abs=0.02)


def _two_commits(repo: GitRepo) -> None:
    repo.write("README.md", "one\n")
    repo.commit("c1")
    repo.tag("c1")
    repo.write("README.md", "two\n")
    repo.commit("c2")
    repo.tag("c2")


@pytest.mark.cli  # git for the commits that resume is keyed on
def test_an_interrupted_comparison_resumes_where_it_stopped(git_repo: GitRepo) -> None:
    _two_commits(git_repo)
    dists = {(r, n): Dist(1e-3) for r in ("c1", "c2") for n in ("first", "second")}
    settings = _settings(max_rounds=3)
    fake = FakeExecutor(dists, interrupt_at=8)  # "first": calibrate + 3 rounds; "second": calibrate
    with pytest.raises(Interrupted):
        _compare(git_repo.path, fake, settings, "c1", "c2")
    said: list[str] = []
    again = FakeExecutor(dists)
    c = compare_refs(
        _project(git_repo.path), "c1", "c2", settings=settings, executor=again,
        progress=said.append,
    )  # fmt: skip
    assert "resuming an interrupted comparison: 1 regime(s) already measured" in said
    assert {name for _, _, name in again.calls} == {"second"}
    assert {r.name for r in c.regimes} == {"first", "second"}
    assert all(r.verdict != "failed" for r in c.regimes)


@pytest.mark.parametrize(("head", "code"), [(1.5e-3, 1), (1e-3, 0)])
def test_ci_gates_on_the_measured_verdict(tmp_path: Path, head: float, code: int) -> None:
    from perfctl.jobs import ci

    fake = FakeExecutor({("a", "work"): Dist(1e-3, cv=0.002), ("b", "work"): Dist(head, cv=0.002)})
    out = tmp_path / "out"
    opts = ci.CiOptions(
        base="a", head="b", artifacts=out, fail_on_regression=True, settings=_settings()
    )
    outcome = ci.run_ci(_project(tmp_path), opts, {}, executor=fake)
    assert outcome.exit_code == code
    assert (out / "comparison.json").is_file() and "work" in (out / "comparison.md").read_text()


def test_min_time_sizes_the_calibrated_values(tmp_path: Path) -> None:
    # pyperf ignores --min-time once a worker is given its loop count: the
    # calibration process is the only place the flag can act.
    asked: list[float] = []

    class Recording(FakeExecutor):
        def calibrate(self, job, *, min_time, timeout):
            asked.append(min_time)
            return super().calibrate(job, min_time=min_time, timeout=timeout)

    _compare(tmp_path, Recording(SLOWER), _settings(min_time=0.01))
    _compare(tmp_path / "again", Recording(SLOWER), _settings())
    assert asked == [0.01, 0.05]


def test_the_load_is_the_executors_reading_not_the_test_machines(tmp_path: Path) -> None:
    # A scripted quiet machine never warns, however busy the machine running the
    # suite is; a scripted busy spell between two regimes does.
    two = {**SLOWER, ("a", "more"): Dist(1e-3), ("b", "more"): Dist(1e-3)}
    quiet = _compare(tmp_path / "quiet", FakeExecutor(two, loads=(0.4,)), _settings())
    assert not any("busy" in w for w in quiet.warnings)
    assert quiet.settings["load_average"] == [0.4, 0.4]
    busy = FakeExecutor(two, loads=(0.5, 3.5, 0.5), cpus=2)
    c = _compare(tmp_path / "busy", busy, _settings())
    assert busy.load_reads == 3  # before the first regime and after each
    assert c.settings["load_average"] == [0.5, 3.5]
    assert any("load average up to 3.5 on 2 CPUs" in w for w in c.warnings)


def test_a_burst_of_other_work_holds_the_round_until_it_passes(tmp_path: Path) -> None:
    # Other work fills both CPUs for the first three samples (0.25 s each, a 1 s sleep
    # after each), then leaves: the first round waits, the rest do not.
    fake = FakeExecutor(SLOWER, busy_cpus=(1.9, 1.9, 1.9, 0.2))
    said: list[str] = []
    c = compare_refs(
        _project(tmp_path), "a", "b", settings=_settings(burst_wait=10.0), executor=fake,
        progress=said.append,
    )  # fmt: skip
    assert _row(c, "work").verdict == "regressed"
    assert fake.slept == pytest.approx(3.0)
    assert said.count("work: waiting for a quiet moment (1.9 of 2 CPUs busy)") == 3
    assert c.settings["burst_held"] == pytest.approx(4.0)  # 3 s slept, 4 samples
    (warning,) = [w for w in c.warnings if "waited" in w]
    assert (
        warning == "waited 4 s in 1 round(s) for bursts of other work to pass (up to 1.9 CPUs busy)"
    )
    assert c.settings["burst_wait"] == 10.0


def test_steady_load_is_waited_for_once_per_regime_then_measured(tmp_path: Path) -> None:
    two = {**SLOWER, ("a", "more"): Dist(1e-3), ("b", "more"): Dist(1e-3)}
    fake = FakeExecutor(two, busy_cpus=(1.9,))  # never passes
    said: list[str] = []
    budget = _settings(burst_wait=3.0, time_budget=1e6)
    c = compare_refs(
        _project(tmp_path), "a", "b", settings=budget, executor=fake, progress=said.append
    )
    assert _row(c, "work").verdict == "regressed"
    for name in ("work", "more"):
        (line,) = [x for x in said if x.startswith(f"{name}: other work kept")]
        assert re.fullmatch(
            rf"{name}: other work kept 1\.9 of 2 CPUs busy for \d s: measuring into it", line
        )
    assert 6.0 <= c.settings["burst_held"] < 8.0  # 3 s (and a sample) per regime, once
    (warning,) = [w for w in c.warnings if "waited" in w]
    assert "outlasted --burst-wait 3 s for work, more" in warning


def test_without_burst_wait_the_cpus_are_never_sampled(tmp_path: Path) -> None:
    fake = FakeExecutor(SLOWER, busy_cpus=(1.9,))
    c = _compare(tmp_path, fake, _settings())
    assert fake.busy_reads == 0 and fake.slept == 0
    assert c.settings["burst_held"] == 0 and not any("waited" in w for w in c.warnings)


def test_time_held_is_given_back_to_the_time_budget(tmp_path: Path) -> None:
    # A budget of 4 s of the fake clock: 2 rounds of 2 s. Holding 3 s first must not
    # cost a round of measuring.
    noisy = {("a", "work"): Dist(1e-3, cv=0.3), ("b", "work"): Dist(1e-3, cv=0.3)}
    held = FakeExecutor(noisy, seconds=1.0, busy_cpus=(1.9, 1.9, 0.1))
    plain = FakeExecutor(noisy, seconds=1.0)
    s = {"rounds": 1, "time_budget": 4.0, "max_rounds": 400}
    _compare(tmp_path / "held", held, _settings(burst_wait=10.0, **s))
    _compare(tmp_path / "plain", plain, _settings(**s))
    assert held.slept > 0
    assert held.rounds() == plain.rounds()


@pytest.mark.parametrize(
    ("busy", "cpus", "holds"),
    [(0.2, 2, False), (0.3, 2, True), (1.1, 2, True), (0.1, 1, False), (0.3, 1, True),
     (14.0, 16, False), (14.5, 16, True)],
)  # fmt: skip
def test_a_round_waits_while_fewer_than_two_cpus_are_free(
    busy: float, cpus: int, holds: bool
) -> None:
    from perfctl.measure.quiet import Quiet

    fake = FakeExecutor({}, busy_cpus=(busy, 0.0), cpus=cpus)
    Quiet(5.0).hold(fake, "work", lambda _m: None, left=60.0)
    assert (fake.slept > 0) == holds


def test_affinity_pins_every_worker_and_the_burst_sample_reads_those_cpus(tmp_path: Path) -> None:
    from perfctl.render.notes import placement_notes

    # Four CPUs, 0.9 of one busy: 3.1 free, so an unpinned round never waits; pinned to
    # CPU 0, the sample is of that CPU alone, and 0.1 of it free holds the round.
    fake = FakeExecutor(SLOWER, busy_cpus=(0.9, 0.1), cpus=4)
    c = _compare(tmp_path, fake, _settings(affinity="0", burst_wait=10.0))
    assert _row(c, "work").verdict == "regressed"
    assert fake.pinned == {(0,)}  # calibration and every worker process
    assert fake.busy_asked and set(fake.busy_asked) == {(0,)}
    assert fake.slept > 0
    unpinned = FakeExecutor(SLOWER, busy_cpus=(0.9, 0.1), cpus=4)
    _compare(tmp_path / "unpinned", unpinned, _settings(burst_wait=10.0))
    assert unpinned.slept == 0 and set(unpinned.busy_asked) == {()}
    assert c.settings["affinity"] == (0,)
    assert placement_notes(c) == [
        "Placement: every worker of both refs was pinned to CPU 0 (--affinity)."
    ]
    # Each side's run says it too: the history trend and --mix-runs read runs alone.
    from perfctl.render.history import _run_hover
    from perfctl.store.local import open_store

    store = open_store(tmp_path / ".perfctl")
    runs = [store.load_run(c.base_run), store.load_run(c.head_run)]
    assert [r.settings.get("affinity") for r in runs] == [[0], [0]]
    assert all("workers pinned to CPU 0 (--affinity)" in _run_hover(r) for r in runs)
    # ... and the history report's table of runs, in a column of its own.
    from perfctl.render.html_report import render_history

    page = render_history(runs, out=tmp_path / "h.html", plotly_js="cdn").read_text()
    assert page.count("<td>CPU 0 (--affinity)</td>") == 2 and ">pinned to</th>" in page


def test_same_process_workers_are_pinned_too(tmp_path: Path) -> None:
    fake = FakeExecutor(SLOWER)
    _compare(tmp_path, fake, _settings(affinity="0", pairing="same-process"))
    assert fake.rounds("duo") > 0 and fake.pinned == {(0,)}


def test_without_affinity_nothing_is_pinned_and_no_placement_is_noted(tmp_path: Path) -> None:
    from perfctl.render.history import _run_hover
    from perfctl.render.notes import placement_notes
    from perfctl.store.local import open_store

    fake = FakeExecutor(SLOWER)
    c = _compare(tmp_path, fake, _settings())
    assert fake.pinned == {()} and placement_notes(c) == []
    run = open_store(tmp_path / ".perfctl").load_run(c.base_run)
    assert "affinity" not in run.settings and "pinned" not in _run_hover(run)


def test_isolated_cpus_are_named_once_and_nothing_is_pinned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from perfctl.measure import machine
    from perfctl.render.notes import placement_notes

    isolated = tmp_path / "isolated"
    cpu = min(os.sched_getaffinity(0))
    isolated.write_text(f"{cpu}\n")
    monkeypatch.setattr(machine, "ISOLATED", isolated)
    fake, said = FakeExecutor(SLOWER), list[str]()
    c = _compare(tmp_path, fake, _settings(), progress=said.append)
    assert fake.pinned == {()} and placement_notes(c) == []
    notices = [m for m in said if "isolates" in m]
    assert notices == [
        f"the kernel isolates CPU {cpu} (isolcpus); the workers are not pinned there "
        f"(pyperf's own pinning is off too): --affinity {cpu} measures on them"
    ]
    pinned, said = FakeExecutor(SLOWER), []
    _compare(tmp_path / "pinned", pinned, _settings(affinity=str(cpu)), progress=said.append)
    assert pinned.pinned == {(cpu,)} and not [m for m in said if "isolates" in m]


def test_a_platform_without_cpu_load_never_holds_and_says_so_once(tmp_path: Path) -> None:
    from perfctl.measure.quiet import BLIND

    two = {**SLOWER, ("a", "more"): Dist(1e-3), ("b", "more"): Dist(1e-3)}
    fake = FakeExecutor(two, busy_cpus=(None,))
    said: list[str] = []
    c = compare_refs(
        _project(tmp_path), "a", "b", settings=_settings(burst_wait=10.0), executor=fake,
        progress=said.append,
    )  # fmt: skip
    assert fake.busy_reads == 1 and fake.slept == 0  # not sampled again once blind
    assert said.count(BLIND) == 1
    assert c.settings["burst_held"] == 0
