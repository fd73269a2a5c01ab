"""`perfctl bisect`: the search, its judgement of steps, its record, and end to end."""

from __future__ import annotations

import json
import math
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from functools import partial
from pathlib import Path

import pytest

from perfctl.config import load_config
from perfctl.errors import BuildError, GitError, StoreError, UsageError
from perfctl.jobs import bisect as job
from perfctl.jobs import bisect_pairs
from perfctl.jobs.compare import COMPARE_FAST
from perfctl.model import (
    Comparison,
    Fact,
    Machine,
    Notice,
    RefInfo,
    RegimeComparison,
    RegimeResult,
    Status,
    Verdict,
)
from perfctl.render import bisect as render_bisect
from perfctl.stats import bisection, verdicts
from perfctl.stats.bisection import Likeness, Outcome, StepKind, classify, halfway
from perfctl.store.bisects import load_bisection
from tests.conftest import GitRepo, default_signals, run_cli, worker_pids

G, B, U, S = Likeness.GOOD, Likeness.BAD, Likeness.UNKNOWN, Likeness.SKIPPED


def _judge_line(culprit: int, odd: dict[int, Likeness] | None = None):
    seen: list[int] = []

    def judge(i: int) -> Likeness:
        seen.append(i)
        if odd and i in odd:
            return odd[i]
        return B if i >= culprit else G

    return judge, seen


@pytest.mark.parametrize("n", range(1, 13))
def test_search_finds_every_culprit_in_log2_steps(n: int) -> None:
    for culprit in range(1, n + 1):
        judge, seen = _judge_line(culprit)
        lo, hi, _ = bisection.search(n, judge)
        assert (lo, hi) == (culprit - 1, culprit)
        assert len(seen) <= max(n - 1, 0).bit_length()


def test_search_steps_over_skipped_and_unknown_commits() -> None:
    judge, seen = _judge_line(6, {3: S, 4: U})
    lo, hi, judged = bisection.search(9, judge)
    assert (lo, hi) == (5, 6)
    assert seen == [4, 3, 5, 7, 6]  # midpoint 4, then its neighbours
    assert judged[3] == S and judged[4] == U


def test_search_leaves_a_range_when_the_commits_between_are_skipped() -> None:
    judge, _ = _judge_line(5, {3: S, 4: S})
    lo, hi, _ = bisection.search(8, judge)
    assert (lo, hi) == (2, 5)  # culprit is 3, 4 or 5


def test_widen_takes_one_judged_step_out_on_each_side() -> None:
    judged = {4: G, 2: G, 6: B, 5: B, 3: S}
    assert bisection.widen(4, 5, judged, 9) == (2, 6)
    assert bisection.widen(0, 1, {1: B}, 9) == (0, 9)


def _row(change: float, low: float, high: float, verdict: str = "regressed") -> RegimeComparison:
    return RegimeComparison(
        name="w", family="f", verdict=Verdict(verdict), change=change, ci_low=low, ci_high=high
    )


WIDE = bisection.Slowdown(1.0, 0.9, 1.1)  # +100%, known to about ±10 points


def test_classify_weighs_a_step_between_the_two_ends() -> None:
    assert halfway(1.0) == pytest.approx(0.41421, abs=1e-4)
    assert classify(_row(0.01, -0.02, 0.04, "no change"), WIDE) == G
    assert classify(_row(0.95, 0.80, 1.10), WIDE) == B
    assert classify(_row(0.40, 0.20, 0.60), WIDE) == U  # as like one end as the other
    assert classify(_row(0.0, 0.0, 0.0, "failed"), WIDE) == S
    assert classify(_row(-0.30, -0.40, -0.20, "improved"), WIDE) == G  # faster than GOOD


def test_a_loose_slowdown_no_longer_holds_the_culprit_unknown() -> None:
    # Benchmark run 3's figures: GOOD -> BAD +9.1% [+4.4%, +13.7%] after 30 rounds, the
    # culprit +6.7% [+4.43%, +8.9%] after 353 rounds. Half the slowdown is +4.46%: the
    # CI-beyond-halfway rule kept the culprit unknown by 0.03 points.
    total = bisection.Slowdown(0.091, 0.044, 0.137, band=0.02)
    culprit = _row(0.067, 0.0443, 0.089)
    assert culprit.ci_low is not None and culprit.ci_low < halfway(total.change)
    assert classify(culprit, total) == B
    # An unchanged commit of run 1 (+1.3% [-1.1%, +3.8%]): its CI straddles halfway of
    # run 1's +6.9%, yet it is far likelier like good.
    unchanged = _row(0.013, -0.011, 0.038, "inconclusive")
    assert classify(unchanged, total) == G
    run1 = bisection.Slowdown(0.069, 0.06, 0.078, band=0.02)
    assert unchanged.ci_high is not None and unchanged.ci_high > halfway(run1.change)
    assert classify(unchanged, run1) == G


def test_a_commit_carrying_half_the_slowdown_stays_unknown() -> None:
    total = bisection.Slowdown(0.20, 0.18, 0.22)
    assert classify(_row(0.095, 0.09, 0.10), total) == U  # halfway on a log scale
    # A loose slowdown: the figure is far likelier like BAD (GOOD is ruled out), but it
    # lies below halfway, so it is not the commit that carries most of the slowdown.
    loose = bisection.Slowdown(0.20, 0.05, 0.37)
    assert bisection.log_odds(0.09, 0.08, 0.101, loose) > math.log(bisection.ODDS)
    assert classify(_row(0.09, 0.08, 0.101), loose) == U
    # Its CI wholly below halfway settles it, as it always did.
    assert classify(_row(0.08, 0.075, 0.085), loose) == G
    # Slower than GOOD for sure, yet far likelier like good: a small unrelated change.
    assert (
        classify(_row(0.01, 0.004, 0.018, "within noise"), bisection.Slowdown(0.084, 0.066, 0.10))
        == G
    )


def test_a_small_change_of_its_own_keeps_a_commit_like_good_however_precise() -> None:
    # Precise figures of a commit that is not exactly GOOD: without the band's slack the
    # odds would find it "not like GOOD" and, below halfway, leave it unknown.
    total = bisection.Slowdown(0.08, 0.065, 0.095, band=0.02)
    for x, half in ((-0.03, 0.004), (0.015, 0.002), (0.02, 0.003)):
        assert classify(_row(x, x - half, x + half, "within noise"), total) == G
    assert classify(_row(0.075, 0.071, 0.079), total) == B
    # Counters: zero-width intervals either side of no change.
    counted = bisection.Slowdown(0.05, 0.049, 0.051, band=0.005)
    assert classify(_row(0.003, 0.003, 0.003, "no change"), counted) == G
    assert classify(_row(-0.003, -0.003, -0.003, "no change"), counted) == G
    assert classify(_row(0.05, 0.05, 0.05), counted) == B


def test_a_change_of_minus_100_percent_or_below_is_judged_not_raised() -> None:
    # Welch's interval for counters is not bounded at -100% (a commit that stops allocating).
    total = bisection.Slowdown(0.5, 0.4, 0.6, band=0.005)
    assert classify(_row(-1.0, -1.124, -0.876, "improved"), total) == G
    assert bisection.log_odds(-1.0, -1.124, -0.876, total) < 0


def test_a_second_look_settles_for_lower_odds() -> None:
    total = bisection.Slowdown(0.08, 0.07, 0.09)
    row = _row(0.05, 0.02, 0.08)
    odds = bisection.log_odds(0.05, 0.02, 0.08, total)
    assert math.log(bisection.SECOND_LOOK_ODDS) < odds < math.log(bisection.ODDS)
    assert classify(row, total) == U
    assert classify(row, total, bisection.SECOND_LOOK_ODDS) == B


def test_a_slowdown_is_precise_when_its_ci_is_narrow_against_its_low_end() -> None:
    assert bisection.Slowdown(0.08, 0.06, 0.10).precise
    assert not bisection.Slowdown(0.12, 0.049, 0.197).precise  # run 4's confirm
    assert not bisection.Slowdown(0.02, -0.01, 0.05).precise
    assert bisection.Slowdown(0.05, 0.05, 0.05).precise  # counters: a zero-width CI


def test_the_confirm_judges_measure_again_until_clear_and_precise() -> None:
    cj = partial(bisect_pairs.confirm_judge, band=0.02)
    pj = partial(bisect_pairs.precise_judge, band=0.02)
    assert cj(_row(0.05, 0.01, 0.09, "within noise")) == U
    assert cj(_row(0.05, -0.01, 0.11, "inconclusive")) == U
    assert cj(_row(0.0, -0.01, 0.01, "no change")) == G
    # "No change detected, but +21% is not ruled out": for a bisection, measured again.
    assert cj(_row(0.10, 0.0, 0.21, "no change")) == U
    assert cj(_row(0.0, -0.03, 0.03, "no change")) == G  # no slowdown in sight
    # Nothing beyond the band left possible: no more comparisons would find one.
    assert cj(_row(0.01, 0.005, 0.015, "within noise")) == G
    assert cj(_row(-0.05, -0.12, 0.01, "inconclusive")) == G
    assert cj(_row(-0.05, -0.08, -0.03, "improved")) == G
    assert cj(_row(0.12, 0.049, 0.197)) == B and pj(_row(0.12, 0.049, 0.197)) == U
    assert pj(_row(0.08, 0.06, 0.10)) == B
    assert pj(_row(0.0, -0.01, 0.01, "no change")) == G
    # A regime's own band (@regime(threshold=0.3)) is the one its rows are judged on.
    loose = replace(_row(0.10, 0.0, 0.21, "no change"), threshold=0.3)
    assert cj(loose) == G and cj(replace(loose, threshold=None)) == U


def _processes(
    mean: float, salt: int, n: int = 8, spread: float = 0.01
) -> tuple[tuple[float, ...], ...]:
    return tuple((mean * (1 + spread * ((salt + k) % 5 - 2)),) * 2 for k in range(n))


class FakeCompare:
    """compare_refs over a line of commits whose speed (per regime) the test sets."""

    def __init__(
        self,
        shas: list[str],
        speed: Mapping[int, float | str],
        lucky: dict | None = None,
        more: Mapping[str, Mapping[int, float | str]] | None = None,
    ) -> None:
        self.index = {s: i for i, s in enumerate(shas)}
        self.speeds = {"work": speed, **(more or {})}
        self.lucky = lucky or {}
        self.calls: list[tuple[int, int]] = []
        self.measured: list[tuple[str, ...]] = []
        self.spread: dict[int, float] = {}  # call number (from 1) -> a noisier spread
        self.store: Path | None = None  # a state dir to store each comparison in, as compare does
        self.bands: dict[str, float] = {}  # regimes that declare a noise band of their own

    def __call__(self, config, base, head, *, regimes, settings, progress=None) -> Comparison:
        self.calls.append((self.index[base], self.index[head]))
        if progress is not None:  # what every comparison says: the machine's, say
            progress(Fact("--burst-wait: /proc/stat shows no load here"))
            progress(Notice("work: measured into steady load"))  # an event: each time
            progress(f"compared {self.index[base]} and {self.index[head]}")
        import fnmatch

        names = [n for n in self.speeds if any(fnmatch.fnmatchcase(n, g) for g in regimes)]
        self.measured.append(tuple(names))
        rows = []
        for name in names:
            sides = {}
            for side, sha in (("base", base), ("head", head)):
                v = self.speeds[name].get(self.index[sha], 1.0)
                if side == "head" and name == "work":  # a noisy measurement of this pair
                    v = self.lucky.get((self.index[base], self.index[head]), v)
                    if isinstance(v, list):  # one per measurement of the pair, the last repeats
                        k = self.calls.count((self.index[base], self.index[head]))
                        v = v[min(k, len(v)) - 1]
                if v == "build":
                    raise BuildError(f"building the environment of {sha[:10]} failed", "see log")
                if v == "fail":
                    sides[side] = RegimeResult(name, "toy", Status.FAILED, reason="ImportError")
                else:
                    spread = self.spread.get(len(self.calls), 0.01)
                    procs = _processes(float(v) * 1e-3, len(self.calls) + len(side), 8, spread)
                    band = self.bands.get(name)
                    sides[side] = RegimeResult(
                        name, "toy", Status.OK, processes=procs, threshold=band
                    )
            rows += verdicts.decide_all({name: sides}, threshold=0.02, alpha=0.05)
        machine = Machine("m", "cpu", 2, 2**30, "k", "g", "3.11")
        ref = RefInfo
        c = Comparison(
            id=f"c{len(self.calls)}",
            created="now",
            base=ref(base[:10], base),
            head=ref(head[:10], head),
            machine=machine,
            regimes=tuple(rows),
            settings={
                "globs": list(regimes),
                "measure": settings.schedule.measure,
                "pairing": settings.schedule.pairing,  # as compare stores it
                "affinity": list(settings.schedule.affinity),
            },
        )
        if self.store is not None:
            from perfctl.measure.machine import fingerprint
            from perfctl.store.local import open_store

            c = replace(c, id=f"{c.id}-{self.store.parent.name}", machine=fingerprint())
            open_store(self.store).save_comparison(c)
        return c


@pytest.fixture(scope="module")
def _line_made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """Ten real commits, made once for the module (31 git runs: 0.1 s a test otherwise)."""
    repo = GitRepo(tmp_path_factory.mktemp("line") / "proj")
    repo.path.mkdir()
    repo.git("init", "-q", "-b", "main")
    repo.write("pyproject.toml", '[project]\nname = "toy"\nversion = "0"\n')
    shas = [repo.commit("c0")]
    for i in range(1, 10):
        repo.write("notes.txt", f"{i}\n")
        shas.append(repo.commit(f"c{i}"))
    return repo.path, shas


@pytest.fixture
def line(git_repo: GitRepo, _line_made: tuple[Path, list[str]]) -> list[str]:
    """The ten commits in this test's own copy of the repository (``git_repo``)."""
    made, shas = _line_made
    shutil.rmtree(git_repo.path)
    shutil.copytree(made, git_repo.path, symlinks=True)
    return shas


def _run(git_repo: GitRepo, shas: list[str], speed, monkeypatch, lucky=None, **kw) -> tuple:
    records, fake = _run_all(git_repo, shas, speed, monkeypatch, lucky, **kw)
    (record,) = records
    return record, fake


def _run_all(git_repo, shas, speed, monkeypatch, lucky=None, more=None, globs=("work",), **kw):
    fake = FakeCompare(shas, speed, lucky, more)
    monkeypatch.setattr(bisect_pairs, "compare_refs", fake)
    settings = job.BisectSettings(compare=COMPARE_FAST, **kw)
    records = job.bisect(load_config(git_repo.path), shas[0], shas[-1], globs, settings)
    return records, fake


def _store_earlier(git_repo: GitRepo, line: list[str], speed, alter=None) -> None:
    """Store a comparison of GOOD and commit 5, measured here (``alter`` changes it first)."""
    from perfctl.measure.machine import fingerprint
    from perfctl.store.local import open_store

    earlier = FakeCompare(line, speed)(
        None, line[0], line[5], regimes=["work"], settings=COMPARE_FAST
    )
    earlier = replace(earlier, id="earlier", machine=fingerprint())
    open_store(git_repo.path / ".perfctl").save_comparison(alter(earlier) if alter else earlier)


def test_fake_culprit_with_a_build_failure_and_a_failing_regime(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    speed = {i: 3.0 for i in range(6, 10)} | {3: "build", 4: "fail"}
    record, fake = _run(git_repo, line, speed, monkeypatch)
    assert record.outcome == Outcome.CULPRIT and record.culprit is not None
    assert record.culprit.sha == line[6] and record.culprit.subject == "c6"
    skipped = {s.commit.sha: s.reason for s in record.steps if s.likeness == S}
    assert set(skipped) == {line[3], line[4]}
    assert skipped[line[3]].startswith("does not build") and "ImportError" in skipped[line[4]]
    assert record.of_kind(StepKind.VERIFY)[0].base.sha == line[5]
    # Saved; a re-run reuses every step and measures nothing.
    assert load_bisection(git_repo.path / ".perfctl", record.id) == record
    again, fake2 = _run(git_repo, line, speed, monkeypatch)
    assert fake2.calls == [] and again.culprit == record.culprit


def test_fake_a_notice_every_comparison_repeats_is_said_once(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeCompare(line, {i: 3.0 for i in range(6, 10)})
    monkeypatch.setattr(bisect_pairs, "compare_refs", fake)
    said: list[str] = []
    settings = job.BisectSettings(compare=COMPARE_FAST)
    job.bisect(load_config(git_repo.path), line[0], line[-1], "work", settings, said.append)
    assert len(fake.calls) > 3
    assert said.count("--burst-wait: /proc/stat shows no load here") == 1
    assert said.count("work: measured into steady load") == len(fake.calls)
    assert sum(m.startswith("compared ") for m in said) == len(fake.calls)  # passing lines all


def test_fake_a_pinned_bisection_says_where_its_workers_ran(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from perfctl.render.bisect import headline

    monkeypatch.setattr(bisect_pairs, "compare_refs", FakeCompare(line, {9: 3.0}))
    pinned = replace(COMPARE_FAST, schedule=replace(COMPARE_FAST.schedule, affinity=(0, 1)))
    settings = job.BisectSettings(compare=pinned)
    (record,) = job.bisect(load_config(git_repo.path), line[0], line[-1], "work", settings)
    assert record.settings["affinity"] == [0, 1]
    assert "every worker pinned to CPU 0-1 (--affinity)" in headline(record)
    monkeypatch.setattr(bisect_pairs, "compare_refs", FakeCompare(line, {9: 3.0}))
    (plain,) = job.bisect(load_config(git_repo.path), line[0], line[-1], "work",
                          job.BisectSettings(compare=COMPARE_FAST, fresh=True))  # fmt: skip
    assert not any("pinned" in ln for ln in headline(plain))
    # Resumed pinned, it reuses the unpinned steps: it names no placement at all.
    monkeypatch.setattr(bisect_pairs, "compare_refs", FakeCompare(line, {9: 3.0}))
    (mixed,) = job.bisect(load_config(git_repo.path), line[0], line[-1], "work", settings)
    assert mixed.settings["affinity"] == [] and not any("pinned" in ln for ln in headline(mixed))


def test_the_cli_keeps_every_notice_and_step_on_screen() -> None:
    from perfctl.cli.bisect import _progress

    class Record:
        def __init__(self) -> None:
            self.lines: list[str] = []

        def print(self, text: str) -> None:
            self.lines.append(text)

        def update(self, text: str) -> None:
            pass

    err = Record()
    for msg in (Fact("no load shown"), Notice("c1: building environment"), "step: c3 vs c0",
                "c1: round 2"):  # fmt: skip
        _progress(err, Record(), msg)
    assert err.lines == ["no load shown", "c1: building environment", "step: c3 vs c0"]


def test_fake_interrupted_bisection_resumes_its_finished_steps(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    speed = {i: 3.0 for i in range(6, 10)}
    fake = FakeCompare(line, speed)

    def ctrl_c_on_the_third(*args, **kw):
        if len(fake.calls) == 2:
            raise KeyboardInterrupt
        return fake(*args, **kw)

    monkeypatch.setattr(bisect_pairs, "compare_refs", ctrl_c_on_the_third)
    config = load_config(git_repo.path)
    with pytest.raises(KeyboardInterrupt):
        job.bisect(config, line[0], line[-1], "work", job.BisectSettings(compare=COMPARE_FAST))
    done = fake.calls[:]
    record, again = _run(git_repo, line, speed, monkeypatch)
    assert record.culprit is not None and record.culprit.sha == line[6]
    assert not set(done) & set(again.calls)  # the two finished steps were not re-measured
    assert len(record.steps) == len(done) + len(again.calls)


def test_fake_step_reuses_a_stored_comparison_of_the_same_commits(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    speed = {i: 3.0 for i in range(6, 10)}
    _store_earlier(git_repo, line, speed)
    # Newer comparisons of the same pair that may not be pooled (recomputed; of another
    # regime only) do not hide the one that may.
    from perfctl.store.local import open_store

    store = open_store(git_repo.path / ".perfctl")
    earlier = store.load_comparison("earlier")
    recomputed = replace(earlier, id="newer-1", settings={**earlier.settings, "from_store": True})
    other = tuple(replace(r, name="other") for r in earlier.regimes)
    for c in (recomputed, replace(earlier, id="newer-2", regimes=other)):
        store.save_comparison(replace(c, created=earlier.created + "+1"))  # sorts after it
    record, fake = _run(git_repo, line, speed, monkeypatch)
    assert record.culprit is not None and record.culprit.sha == line[6]
    assert (0, 5) not in fake.calls
    step = next(s for s in record.steps if s.commit.sha == line[5] and s.kind == StepKind.STEP)
    assert step.comparisons == ("earlier",) and step.likeness == G


def test_fake_a_stored_shard_of_the_ends_never_narrows_the_selection(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `compare --shard 1/2` of GOOD and BAD records the whole selection but holds one
    shard's regimes: taken as the confirm, it would drop the others without a word."""
    from perfctl.measure.machine import fingerprint
    from perfctl.store.local import open_store

    speed = {i: 3.0 for i in range(6, 10)}
    more = {"zz": {i: 3.0 for i in range(3, 10)}}
    shard = FakeCompare(line, speed, more=more)(
        None, line[0], line[-1], regimes=["work"], settings=COMPARE_FAST
    )
    settings = {**shard.settings, "globs": ["*"], "family": None, "shard": {"index": 1, "count": 2}}
    shard = replace(shard, id="shard-1", settings=settings, machine=fingerprint())
    open_store(git_repo.path / ".perfctl").save_comparison(shard)
    records, _ = _run_all(git_repo, line, speed, monkeypatch, more=more, globs=("*",))
    assert sorted(r.regime for r in records) == ["work", "zz"]
    assert all("shard-1" not in s.comparisons for r in records for s in r.steps)


def test_fake_a_record_judged_by_the_halfway_rule_is_judged_anew(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    speed = {i: 3.0 for i in range(6, 10)} | {4: "build"}
    first = FakeCompare(line, speed)
    first.store = git_repo.path / ".perfctl"  # stored, as real comparisons are
    monkeypatch.setattr(bisect_pairs, "compare_refs", first)
    settings = job.BisectSettings(compare=COMPARE_FAST)
    config = load_config(git_repo.path)
    (record,) = job.bisect(config, line[0], line[-1], "work", settings)
    assert record.settings["judge"] == "odds"
    assert "99:1 likelier near that end" in render_bisect.legend(record)
    # Made before the odds rule: no "judge", and a step that rule would not have taken.
    path = git_repo.path / ".perfctl" / "bisects" / f"{record.id}.json"
    old = json.loads(path.read_text())
    del old["settings"]["judge"]
    old["steps"][2]["likeness"] = "unknown"
    path.write_text(json.dumps(old))
    halfway_record = load_bisection(path.parent.parent, record.id)
    assert halfway_record is not None
    said_then = render_bisect.legend(halfway_record)
    assert "its CI below / above half the slowdown)" in said_then and "99:1" not in said_then
    said: list[object] = []
    fake = FakeCompare(line, speed)
    monkeypatch.setattr(bisect_pairs, "compare_refs", fake)
    (again,) = job.bisect(config, line[0], line[-1], "work", settings, said.append)
    assert (
        "work: the stored bisection judged its steps by an earlier rule: judging them anew "
        "from their stored comparisons"
    ) in said
    assert S in [s.likeness for s in record.steps]  # the commit that does not build
    assert fake.calls == []  # every step judged anew from what was stored: nothing measured
    assert again.settings["judge"] == "odds"
    assert [s.likeness for s in again.steps] == [s.likeness for s in record.steps]
    assert [s.comparisons for s in again.steps] == [s.comparisons for s in record.steps]
    assert again.culprit == record.culprit and again.seconds == record.seconds


def test_fake_a_search_weighs_steps_with_the_band_the_regime_declares(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[float] = []

    class Spy(bisection.Slowdown):
        @classmethod
        def of(cls, step: bisection.Step, band: float = 0.0) -> bisection.Slowdown:
            seen.append(band)
            return bisection.Slowdown.of(step, band)

    monkeypatch.setattr(job, "Slowdown", Spy)
    speed = {i: 3.0 for i in range(6, 10)}
    fake = FakeCompare(line, speed, more={"plain": speed})
    fake.store, fake.bands = git_repo.path / ".perfctl", {"work": 0.3}
    monkeypatch.setattr(bisect_pairs, "compare_refs", fake)
    settings = job.BisectSettings(compare=COMPARE_FAST)
    records = job.bisect(load_config(git_repo.path), line[0], line[-1], ("*",), settings)
    assert {r.regime: r.culprit.sha for r in records if r.culprit} == {
        "work": line[6],
        "plain": line[6],
    }
    searched = [b for b in seen if b]  # 0: a slowdown asked only whether it is precise
    assert sorted(searched) == [0.01, 0.3]  # plain: the comparison's band; work: its own
    seen.clear()  # resumed from the record: the band is read from the stored comparisons
    job.bisect(load_config(git_repo.path), line[0], line[-1], ("*",), settings)
    assert sorted(b for b in seen if b) == [0.01, 0.3]


def test_fake_no_regression_measures_only_the_ends(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from perfctl.render.bisect import headline

    record, fake = _run(git_repo, line, {}, monkeypatch)
    assert record.outcome == Outcome.NO_REGRESSION and record.culprit is None
    assert fake.calls == [(0, 9)]
    assert headline(record)[0].startswith("no regression between GOOD and BAD to bisect (")
    # Ends that stayed inconclusive are not a finding of "no regression".
    (ends,) = record.steps
    noisy = replace(record, steps=(replace(ends, verdict=Verdict.INCONCLUSIVE),))
    assert headline(noisy)[0] == (
        "not bisected: cannot tell whether BAD is slower than GOOD (inconclusive)"
    )
    # Still unclear after all its comparisons: "no change", but a slowdown not ruled out.
    unclear = replace(record, steps=(replace(ends, likeness=U, change=0.1, ci_high=0.21),))
    assert headline(unclear)[0] == (
        "not bisected: cannot tell whether BAD is slower than GOOD (no change)"
    )


def test_fake_partial_slowdowns_give_a_range_not_a_culprit(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Three commits each add a step: 3 and 4 sit at halfway and stay unknown.
    speed = {i: 1.0 + (i >= 3) + (i >= 5) + (i >= 7) for i in range(10)}
    record, fake = _run(git_repo, line, speed, monkeypatch, attempts=2)
    assert record.outcome == Outcome.RANGE and record.culprit is None
    assert [c.sha for c in record.candidates] == line[3:6]
    unknown = [s for s in record.steps if s.likeness == U]
    assert {s.commit.sha for s in unknown} == {line[3], line[4]}
    # The attempts, then moved on; then a second look at each before the range.
    assert sorted(len(s.comparisons) for s in unknown) == [2, 2, 4, 4]


def test_fake_a_loose_slowdown_is_measured_again_before_the_search(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeCompare(line, {i: 1.1 for i in range(6, 10)})
    fake.spread = {1: 0.03}  # the first comparison of the ends is noisy: +10% [+3.8%, +16.6%]
    monkeypatch.setattr(bisect_pairs, "compare_refs", fake)
    said: list[object] = []
    settings = job.BisectSettings(compare=COMPARE_FAST)
    (record,) = job.bisect(
        load_config(git_repo.path), line[0], line[-1], "work", settings, said.append
    )
    assert fake.calls[:3] == [(0, 9), (0, 9), (0, 4)]  # the ends twice, then the search
    assert "confirm: work slowdown +10.0% [+3.8%, +16.6%] is loose" in "\n".join(map(str, said))
    confirm = record.of_kind(StepKind.CONFIRM)[0]
    assert confirm.comparisons == ("c1", "c2") and confirm.ci_low is not None
    assert bisection.Slowdown.of(confirm).precise and confirm.ci_low > 0.038
    assert record.outcome == Outcome.CULPRIT and record.culprit is not None
    assert record.culprit.sha == line[6]


def test_fake_a_slowdown_that_does_not_hold_when_measured_again_is_not_bisected(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeCompare(line, {9: 1.1}, lucky={(0, 9): [1.1, 1.0]})  # then no change
    fake.spread = {1: 0.03}  # a loose first reading: +10% [+3.8%, +16.6%]
    monkeypatch.setattr(bisect_pairs, "compare_refs", fake)
    settings = job.BisectSettings(compare=COMPARE_FAST)
    (record,) = job.bisect(load_config(git_repo.path), line[0], line[-1], "work", settings)
    assert record.outcome == Outcome.NO_REGRESSION and record.culprit is None
    assert set(fake.calls) == {(0, 9)} and len(fake.calls) > 1  # only the ends, pooled
    assert record.note.startswith("BAD vs GOOD read regressed at first (+10.0% [+3.8%, +16.6%])")
    (confirm,) = record.of_kind(StepKind.CONFIRM)
    assert confirm.verdict != "regressed" and len(confirm.comparisons) == len(fake.calls)
    assert record.note in render_bisect.headline(record)
    again = FakeCompare(line, {9: 1.1})
    monkeypatch.setattr(bisect_pairs, "compare_refs", again)
    (rerun,) = job.bisect(load_config(git_repo.path), line[0], line[-1], "work", settings)
    assert again.calls == [] and rerun.note == record.note  # resumed, and still says why


def test_fake_a_loose_slowdown_cut_short_is_measured_again_on_a_re_run(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeCompare(line, {i: 1.1 for i in range(6, 10)})
    fake.spread = {1: 0.03}

    def ctrl_c_on_the_second(*args, **kw):
        if len(fake.calls) == 1:
            raise KeyboardInterrupt  # while the ends are measured again
        return fake(*args, **kw)

    monkeypatch.setattr(bisect_pairs, "compare_refs", ctrl_c_on_the_second)
    config, settings = load_config(git_repo.path), job.BisectSettings(compare=COMPARE_FAST)
    with pytest.raises(KeyboardInterrupt):
        job.bisect(config, line[0], line[-1], "w*", settings)
    fake2 = FakeCompare(line, {i: 1.1 for i in range(6, 10)})
    monkeypatch.setattr(bisect_pairs, "compare_refs", fake2)
    said: list[object] = []
    (record,) = job.bisect(config, line[0], line[-1], "w*", settings, said.append)
    text = "\n".join(map(str, said))
    assert "confirm: work reused (like bad)" in text  # the selection and first reading kept
    assert "is loose: measuring GOOD and BAD again" in text
    assert fake2.calls[0] == (0, 9) and record.culprit is not None
    assert record.culprit.sha == line[6]


def test_fake_unclear_ends_are_measured_again_until_the_regression_shows(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeCompare(line, {i: 1.1 for i in range(6, 10)})
    fake.spread = {1: 0.1, 2: 0.1, 3: 0.1}  # a busy spell over the first three comparisons
    monkeypatch.setattr(bisect_pairs, "compare_refs", fake)
    said: list[object] = []
    settings = job.BisectSettings(compare=COMPARE_FAST)
    (record,) = job.bisect(
        load_config(git_repo.path), line[0], line[-1], "work", settings, said.append
    )
    text = "\n".join(map(str, said))
    assert (
        "confirm: work BAD vs GOOD +10.0% [+0.0%, +21.0%] is unclear (inconclusive): measuring"
        in text
    )
    (confirm,) = record.of_kind(StepKind.CONFIRM)
    assert confirm.verdict == "regressed" and 3 < len(confirm.comparisons) <= 6
    assert record.outcome == Outcome.CULPRIT and record.culprit is not None
    assert record.culprit.sha == line[6]


def _first_bisection(git_repo: GitRepo, line: list[str], speed, monkeypatch) -> tuple:
    """A finished bisection of ``line`` at ``speed``: config, settings, record, its file."""
    monkeypatch.setattr(bisect_pairs, "compare_refs", FakeCompare(line, speed))
    config, settings = load_config(git_repo.path), job.BisectSettings(compare=COMPARE_FAST)
    (record,) = job.bisect(config, line[0], line[-1], "work", settings)
    path = git_repo.path / ".perfctl" / "bisects" / f"{record.id}.json"
    return config, settings, record, path


def test_fake_steps_of_another_machine_are_reused_and_said(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record whose ends another machine measured (a copied or shared .perfctl) is
    reused, since each step was measured interleaved on one machine; the call says so
    (a Notice: it stays on screen) and the answer names every machine behind its steps."""
    from perfctl.measure.machine import fingerprint
    from perfctl.store.local import open_store

    speed = {i: 1.3 for i in range(6, 10)}
    monkeypatch.setattr(bisect_pairs, "compare_refs", StoringCompare(line, speed))
    config, settings = load_config(git_repo.path), job.BisectSettings(compare=COMPARE_FAST)
    (record,) = job.bisect(config, line[0], line[-1], "work", settings)
    here = fingerprint()
    assert record.settings["machines"] == {here.id: here.hostname}
    assert not any("machines" in x for x in render_bisect.headline(record))
    store, ends = open_store(config.state_dir), set(record.steps[0].comparisons)
    for c in store.list_comparisons():
        if c.id in ends:
            store.save_comparison(replace(c, machine=replace(c.machine, id="elsewhere", hostname="runner-7")))  # fmt: skip
    said: list[str] = []
    (again,) = job.bisect(config, line[0], line[-1], "work", settings, said.append)
    assert [s.likeness for s in again.steps] == [s.likeness for s in record.steps]
    told = [m for m in said if "another machine fingerprint: runner-7 (id elsewhere)" in m]
    assert len(told) == 1 and isinstance(told[0], Notice), said
    assert again.settings["machines"] == {"elsewhere": "runner-7", here.id: here.hostname}
    line_ = next(x for x in render_bisect.headline(again) if "machines" in x)
    assert line_.startswith("steps measured on 2 machines: ") and "runner-7 (id elsewhere)" in line_
    # Measured here alone again (--fresh): only this machine is named.
    (fresh,) = job.bisect(config, line[0], line[-1], "work", replace(settings, fresh=True))
    assert fresh.settings["machines"] == {here.id: here.hostname}


def test_fake_an_old_record_is_kept_whole_when_re_measuring_its_ends_is_cut_short(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    speed = {i: 1.1 for i in range(6, 10)}
    config, settings, record, path = _first_bisection(git_repo, line, speed, monkeypatch)
    # As the halfway rule left it: no "judge", and a loose slowdown never measured again.
    old = json.loads(path.read_text())
    del old["settings"]["judge"]
    old["steps"][0].update(change=0.10, ci_low=0.038, ci_high=0.166)
    path.write_text(json.dumps(old))
    before = path.read_text()

    def ctrl_c(*args, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(bisect_pairs, "compare_refs", ctrl_c)
    said: list[object] = []
    with pytest.raises(KeyboardInterrupt):
        job.bisect(config, line[0], line[-1], "work", settings, said.append)
    assert any("is loose: measuring GOOD and BAD again" in str(m) for m in said)
    assert path.read_text() == before  # its steps are still there to judge anew


def test_fake_another_call_cut_short_keeps_the_stored_steps_and_resumes_them(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    speed = {i: 1.1 for i in range(6, 10)}
    config, settings, record, path = _first_bisection(git_repo, line, speed, monkeypatch)
    # Another call (another selection) on the same ends: its first reading is loose, and
    # it is stopped while the ends are measured again.
    fake = FakeCompare(line, speed)
    fake.spread = {1: 0.03}

    def ctrl_c_on_the_second(*args, **kw):
        if len(fake.calls) == 1:
            raise KeyboardInterrupt
        return fake(*args, **kw)

    monkeypatch.setattr(bisect_pairs, "compare_refs", ctrl_c_on_the_second)
    with pytest.raises(KeyboardInterrupt):
        job.bisect(config, line[0], line[-1], "w*", settings)
    kept = load_bisection(path.parent.parent, record.id)
    assert kept is not None and kept.group != record.group  # now that call's record
    assert kept.steps[1:] == record.steps[1:]  # with every step of the earlier one
    again = FakeCompare(line, speed)
    monkeypatch.setattr(bisect_pairs, "compare_refs", again)
    said: list[object] = []
    (resumed,) = job.bisect(config, line[0], line[-1], "w*", settings, said.append)
    assert "confirm: work reused (like bad)" in said  # that call's selection, resumed
    assert resumed.culprit == record.culprit


def test_fake_unknown_culprit_gets_a_second_look_before_a_range(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The culprit (6) reads at halfway twice (a busy spell), so it is stepped over;
    # 7 is like bad and 5 like good, which would leave the range 6..7. A second look
    # with the verification's attempts, pooled with the first two, names 6.
    speed = {i: 2.0 for i in range(6, 10)}
    unlucky = {(0, 6): [1.414, 1.414, 2.0, 2.0, 2.0, 2.0]}
    record, fake = _run(git_repo, line, speed, monkeypatch, lucky=unlucky, attempts=2)
    assert record.outcome == Outcome.CULPRIT and record.culprit is not None, record.note
    assert record.culprit.sha == line[6]
    looks = [s for s in record.steps if s.kind == StepKind.STEP and s.commit.sha == line[6]]
    assert [s.likeness for s in looks] == [U, B]
    assert len(looks[0].comparisons) == 2 and 2 < len(looks[1].comparisons) <= 4
    assert fake.calls.count((0, 6)) == len(looks[1].comparisons)  # pooled, not re-measured
    # Printed: both looks in the table, the commit's point and lines from its last.
    from perfctl.render import bisect as text

    numbers = [r[0] for r in text.rows(record) if r[1] == looks[0].commit.short]
    assert numbers == ["2", "2 again", "verify"]
    assert not any(line[6][:10] in x for x in text.skipped_lines(record))
    assert "N again: a second look" in text.format_bisect_markdown(record)
    # Resumed, the record's last look stands for the commit: nothing is measured.
    again, fake2 = _run(git_repo, line, speed, monkeypatch, lucky=unlucky, attempts=2)
    assert fake2.calls == [] and again.culprit == record.culprit


class StoringCompare(FakeCompare):
    """FakeCompare whose comparisons are stored, as the real compare's are."""

    def __call__(self, config, base, head, **kw) -> Comparison:
        from perfctl.measure.machine import fingerprint
        from perfctl.store.local import open_store

        c = replace(super().__call__(config, base, head, **kw), machine=fingerprint())
        c = replace(c, id=f"{c.id}-{len(self.calls)}")
        open_store(config.state_dir).save_comparison(c)
        return c


@pytest.mark.parametrize("later", ["alike", "pinned", "moved", "merged"])
def test_fake_a_second_look_resumed_pools_with_the_first_look(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch, later: str
) -> None:
    """Resumed, the second look pools the first look's comparisons, unless the resumed
    call measures otherwise (here pinned with --affinity) or on another machine (a shared
    store, another runner): unlike processes never pool."""
    speed = {i: 2.0 for i in range(6, 10)}
    unlucky = {(0, 6): [1.414, 1.414, 2.0, 2.0, 2.0, 2.0]}
    config = load_config(git_repo.path)
    settings = job.BisectSettings(compare=COMPARE_FAST, attempts=2)
    whole = StoringCompare(line, speed, unlucky)
    monkeypatch.setattr(bisect_pairs, "compare_refs", whole)
    (uncut,) = job.bisect(config, line[0], line[-1], ("work",), settings)
    looks = [s for s in uncut.steps if s.kind == StepKind.STEP and s.commit.sha == line[6]]
    assert len(looks) == 2 and looks[1].likeness == B
    # Again from scratch, Ctrl-C at the second look's first new comparison.
    import shutil

    shutil.rmtree(config.state_dir)
    second = [i for i, c in enumerate(whole.calls) if c == (0, 6)][2]
    cut = StoringCompare(line, speed, unlucky)

    def ctrl_c(*args, **kw):
        if len(cut.calls) == second:
            raise KeyboardInterrupt
        return cut(*args, **kw)

    monkeypatch.setattr(bisect_pairs, "compare_refs", ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        job.bisect(config, line[0], line[-1], ("work",), settings)
    rest = StoringCompare(line, speed, unlucky)
    rest.calls = cut.calls[:]  # the comparisons' ids and the lucky draws go on from there
    monkeypatch.setattr(bisect_pairs, "compare_refs", rest)
    if later == "pinned":
        pinned = replace(COMPARE_FAST, schedule=replace(COMPARE_FAST.schedule, affinity=(0,)))
        settings = replace(settings, compare=pinned)
    if later in ("moved", "merged"):  # every comparison so far: another machine's, or merged
        from perfctl.store.local import open_store

        store = open_store(config.state_dir)
        for c in store.list_comparisons():
            if later == "moved":
                c = replace(c, machine=replace(c.machine, id="elsewhere"))
            else:
                c = replace(c, settings={**c.settings, "merged_from": ["a", "b"]})
            store.save_comparison(c)
    said: list[str] = []
    (resumed,) = job.bisect(config, line[0], line[-1], ("work",), settings, said.append)
    again = [s for s in resumed.steps if s.kind == StepKind.STEP and s.commit.sha == line[6]]
    assert again[0].likeness == U
    if later != "alike":  # the first look stays out of the second one, and it is said
        assert not set(again[0].comparisons) & set(again[1].comparisons)
        why = {"moved": "on another machine", "merged": "merged", "pinned": "otherwise"}[later]
        left_out = [m for m in said if m.startswith("not pooling stored comparison")]
        assert left_out and all(why in m and isinstance(m, Notice) for m in left_out), said
        assert len(left_out) == len(set(left_out))  # each said once
        return
    assert again[1].likeness == B
    # The first look's comparisons are pooled into the second, as without the cut.
    assert set(again[0].comparisons) < set(again[1].comparisons)
    assert len(again[1].comparisons) == len(looks[1].comparisons)
    assert resumed.culprit == uncut.culprit


def test_fake_a_commit_that_stays_unknown_is_looked_at_once_more_then_a_range(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    speed = {i: 2.0 for i in range(6, 10)}
    record, fake = _run(git_repo, line, speed, monkeypatch, lucky={(0, 6): 1.414}, attempts=2)
    assert record.outcome == Outcome.RANGE and record.culprit is None
    assert [c.sha for c in record.candidates] == line[6:8]
    assert fake.calls.count((0, 6)) == 4  # two attempts, then two more: no third look


def test_fake_unverified_culprit_widens_to_a_range(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The real culprit is 6; one unlucky step makes 4 look slow against GOOD.
    speed = {i: 2.0 for i in range(6, 10)}
    record, _ = _run(git_repo, line, speed, monkeypatch, lucky={(0, 4): 2.0})
    assert record.outcome == Outcome.RANGE and "not verified" in record.note
    verify = record.of_kind(StepKind.VERIFY)[0]
    assert (verify.base.sha, verify.commit.sha) == (line[3], line[4])
    assert line[6] in [c.sha for c in record.candidates]


def test_fake_build_failure_of_an_end_is_an_error(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(BuildError):
        _run(git_repo, line, {9: "build"}, monkeypatch)


def test_ends_must_be_in_order(git_repo: GitRepo, line: list[str]) -> None:
    with pytest.raises(GitError, match="not an ancestor"):
        job.bisect(load_config(git_repo.path), line[5], line[2], "work")
    with pytest.raises(GitError, match="are the same commit"):
        job.bisect(load_config(git_repo.path), line[5], line[5], "work")


def test_a_damaged_record_is_a_store_error(git_repo: GitRepo, line: list[str]) -> None:
    from perfctl.store.bisects import bisection_id

    bid = bisection_id(line[0], line[-1], "work")
    path = git_repo.path / ".perfctl" / "bisects" / f"{bid}.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"schema": 1, "good": 3}')
    with pytest.raises(StoreError, match="damaged"):
        job.bisect(load_config(git_repo.path), line[0], line[-1], "work")


# -- end to end: a real repository, real builds, real pyperf workers -------------------

PYPROJECT = """\
[project]
name = "toy"
version = "0.1"

[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[tool.setuptools]
packages = ["toy"]

[tool.perfctl]
regimes = ["bench/regimes.py"]
"""

TOY = """\
def work(n={n}):
    return sum(i * i for i in range(n))

def also(n={m}):
    return sum(i * i for i in range(n))
"""

REGIMES = """\
from perfctl import regime
import toy

@regime(family="toy", ops=1)
def work():
    \"\"\"Call toy.work once.\"\"\"
    return toy.work

@regime(family="toy", ops=1)
def also():
    \"\"\"Call toy.also once.\"\"\"
    return toy.also
"""

# Short comparisons: the culprit triples the work, so 6 rounds decide every step.
QUICK = ["--fast", "--min-time", "0.01", "--attempts", "2"]


def make_history(path: Path) -> tuple[GitRepo, list[str]]:
    """10 commits: docs, a build break, an import break, `work`'s culprit (x3) at 6, docs,
    `also`'s culprit (x3) at 8, docs."""
    path.mkdir()
    r = GitRepo(path)
    r.git("init", "-q", "-b", "main")
    r.write("pyproject.toml", PYPROJECT)
    r.write("toy/__init__.py", TOY.format(n=3000, m=3000))
    r.write("bench/regimes.py", REGIMES)
    r.write(".gitignore", ".perfctl/\n")
    shas = [r.commit("c0: baseline")]
    r.write("README.md", "# toy\n")
    shas.append(r.commit("c1: docs"))
    r.write("CHANGES.md", "- nothing yet\n")
    shas.append(r.commit("c2: docs"))
    r.write("pyproject.toml", PYPROJECT.replace('packages = ["toy"]', "packages = ["))
    shas.append(r.commit("c3: break the build"))
    r.write("pyproject.toml", PYPROJECT)
    r.write("toy/__init__.py", TOY.format(n=3000, m=3000) + "def broken(:\n")
    shas.append(r.commit("c4: fix the build, break the import"))
    r.write("toy/__init__.py", TOY.format(n=3000, m=3000))
    shas.append(r.commit("c5: fix the import"))
    r.write("toy/__init__.py", TOY.format(n=9000, m=3000))
    shas.append(r.commit("c6: three times the work"))
    r.write("README.md", "# toy\n\nrevision 7\n")
    shas.append(r.commit("c7: docs"))
    r.write("toy/__init__.py", TOY.format(n=9000, m=9000))
    shas.append(r.commit("c8: also three times the work"))
    r.write("README.md", "# toy\n\nrevision 9\n")
    shas.append(r.commit("c9: docs"))
    r.tag("good", shas[0])
    r.tag("bad", shas[-1])
    return r, shas


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[GitRepo, list[str]]:
    """The history above, shared by the end-to-end tests."""
    return make_history(tmp_path_factory.mktemp("bisect") / "proj")


@pytest.mark.slow
def test_bisect_finds_each_culprit_and_names_what_it_skipped(
    history: tuple[GitRepo, list[str]],
) -> None:
    repo, shas = history
    proc = run_cli(
        "bisect", "good", "bad", "-r", "work", "-r", "also", "--profile", *QUICK,
        "--profile-duration", "2", "--format", "json", cwd=repo.path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    found = {b["regime"]: b for b in data["bisections"]}
    assert [b["regime"] for b in data["bisections"]] == ["also", "work"]
    assert data["seconds"] == pytest.approx(sum(b["seconds"] for b in found.values()), abs=0.1)
    work, also = found["work"], found["also"]
    assert work["outcome"] == "culprit" and also["outcome"] == "culprit", proc.stdout
    reuses = [ln for ln in proc.stderr.splitlines() if "reusing environment" in ln]
    assert reuses and len(reuses) == len(set(reuses)), reuses  # each said once, not per step
    assert work["culprit"]["sha"] == shas[6]
    assert work["culprit"]["subject"] == "c6: three times the work"
    authored = repo.git("log", "-1", "--format=%aI", shas[6]).strip()
    assert datetime.fromisoformat(work["culprit"]["date"]) == datetime.fromisoformat(authored)
    assert also["culprit"]["sha"] == shas[8]
    steps = [s for s in work["steps"] if s["kind"] == "step"]
    skipped = {s["commit"]["sha"]: s["reason"] for s in steps if s["likeness"] == "skipped"}
    assert set(skipped) == {shas[3], shas[4]}
    assert skipped[shas[3]].startswith("does not build")
    assert "SyntaxError" in skipped[shas[4]]
    verify = [s for s in work["steps"] if s["kind"] == "verify"]
    assert verify[0]["base"]["sha"] == shas[5] and verify[0]["verdict"] == "regressed"
    # --profile: py-spy's differential of each culprit's parent and the culprit.
    for b, before in ((work, 5), (also, 7)):
        p = b["profile"]
        assert p["error"] == "" and p["before"]["sha"] == shas[before], p
        assert Path(p["files"]["diff_svg"]).is_file()
        assert any("toy/__init__.py" in m for m in p["movers"]), p["movers"]
        assert p["seconds"] == 2  # --profile-duration, kept in the record
        diff = json.loads(Path(p["files"]["diff_json"]).read_text())
        for side in ("before", "after"):
            summary = json.loads(Path(diff[side]["summary"]).read_text())
            assert summary["settings"]["duration_s"] == 2, summary["settings"]
    # The re-run resumes: every step is reused, nothing is measured, same answer.
    again = run_cli(
        "bisect", "good", "bad", "-r", "work", "-r", "also", *QUICK, cwd=repo.path
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "reused" in again.stderr and "building" not in again.stderr
    assert f"culprit: {shas[6]} c6: three times the work" in again.stdout
    assert f"culprit: {shas[8]} c8: also three times the work" in again.stdout
    assert "skipped" in again.stdout and "2 regimes, total time:" in again.stdout
    # --family: the same two regimes, another selection: its ends are confirmed again,
    # every stored step is reused, and the same culprits come back.
    family = run_cli(
        "bisect", "good", "bad", "--family", "toy", *QUICK, "--format", "json", cwd=repo.path
    )  # fmt: skip
    assert family.returncode == 0, family.stderr
    by_family = {b["regime"]: b for b in json.loads(family.stdout)["bisections"]}
    assert {n: b["culprit"]["sha"] for n, b in by_family.items()} == {
        "work": shas[6],
        "also": shas[8],
    }
    measured = [ln for ln in family.stderr.splitlines() if ln.startswith("step: ") and " vs " in ln]
    assert not measured and "reused" in family.stderr, family.stderr
    # `report --bisect`: the stored steps drawn on the commit axis.
    page = repo.path / "bisect.html"
    drawn = run_cli("report", "--bisect", work["id"][:6], "-o", str(page), cwd=repo.path)
    assert drawn.returncode == 0, drawn.stderr
    html = page.read_text()
    assert "Bisect work" in html and "c6: three times the work" in html
    assert all(sha[:10] in html for sha in shas)  # every commit holds its place on the axis


ALLOC = """\
KEPT = []

def make():
    # ~20 us of arithmetic a call: the calibrated loop count (and with it the number of
    # kept lists that every tracemalloc reading walks) stays in the hundreds.
    sum(range(2000))
    KEPT.extend([] for _ in range({k}))
"""

ALLOC_REGIMES = """\
from perfctl import regime
import toy

@regime(family="toy", ops=1)
def alloc():
    \"\"\"Keep a few new lists per call.\"\"\"
    return toy.make
"""


@pytest.mark.slow
def test_bisect_measure_memory_finds_the_commit_that_allocates_more(git_repo: GitRepo) -> None:
    """--measure memory: blocks per op are near-exact, so one more list is found."""
    r = git_repo
    r.write("pyproject.toml", PYPROJECT)
    r.write("bench/regimes.py", ALLOC_REGIMES)
    r.write(".gitignore", ".perfctl/\n")
    shas = []
    for i, (k, what) in enumerate([(4, "base"), (5, "one more list"), (5, "docs")]):
        r.write("toy/__init__.py", ALLOC.format(k=k))
        r.write("README.md", f"revision {i}\n")
        shas.append(r.commit(f"m{i}: {what}"))
    proc = run_cli(
        "bisect", shas[0], shas[-1], "-r", "alloc", "--measure", "memory", cwd=r.path
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f"culprit: {shas[1]} m1: one more list" in proc.stdout
    assert "in blocks/op from GOOD to BAD" in proc.stdout


@pytest.mark.slow
def test_bisect_without_a_regression_says_so(history: tuple[GitRepo, list[str]]) -> None:
    repo, shas = history
    proc = run_cli(
        "bisect", shas[7], "bad", "-r", "work", *QUICK, "--format", "markdown", cwd=repo.path
    )
    assert proc.returncode == 0, proc.stderr
    # Unchanged ends: "no change", or too noisy to tell at these few rounds (inconclusive,
    # or a `no change` whose interval leaves the slowdown open); never a search.
    first = proc.stdout.splitlines()[0]
    unclear = "not bisected: cannot tell whether BAD is slower than GOOD "
    assert first.startswith("no regression between GOOD and BAD to bisect (") or first.strip() in (
        unclear + "(inconclusive)",
        unclear + "(no change)",
    ), proc.stdout
    assert "| ends |" in proc.stdout  # the figures of the one comparison made
    assert "| 1 |" not in proc.stdout  # no step was measured


@pytest.mark.slow
def test_ctrl_c_during_a_bisection_stops_cleanly_and_leaves_the_store_whole(
    history: tuple[GitRepo, list[str]],
) -> None:
    repo, shas = history
    # Another selection than the tests above (`work` alone, from c5): its ends are
    # measured anew, so workers are running when the signal comes.
    argv = [sys.executable, "-m", "perfctl", "bisect", shas[5], "bad", "-r", "work", *QUICK]
    proc = subprocess.Popen(
        argv, cwd=repo.path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=default_signals,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not worker_pids(repo.path):
        assert proc.poll() is None, proc.communicate()[1]
        time.sleep(0.05)
    time.sleep(0.5)  # inside the measurement loop
    proc.send_signal(signal.SIGINT)  # Ctrl-C from a terminal
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Error: interrupted" in err and "Hint:" in err and "Traceback" not in err
    assert worker_pids(repo.path) == []
    state = repo.path / ".perfctl"
    for record in state.rglob("*.json"):
        json.loads(record.read_text())  # every stored record is whole
    listed = repo.git("worktree", "list", "--porcelain")
    assert "prunable" not in listed and "locked" not in listed, listed
    for line in listed.splitlines():
        if line.startswith("worktree "):
            assert Path(line.split(" ", 1)[1]).is_dir(), listed
    # The store still lists: the tests after this one read it.
    for listing in ("runs", "comparisons"):
        shown = run_cli(listing, "--format", "json", cwd=repo.path)
        assert shown.returncode == 0 and isinstance(json.loads(shown.stdout), list), shown.stderr


def test_bisect_usage_errors(history: tuple[GitRepo, list[str]]) -> None:
    repo, _ = history
    proc = run_cli("bisect", "bad", "good", "--regime", "work", cwd=repo.path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("Error: `bad` is not an ancestor of `good`")
    assert "Hint:" in proc.stderr and "Traceback" not in proc.stderr
    missing = run_cli("bisect", "good", "bad", cwd=repo.path)
    assert missing.returncode == 2 and "--regime" in missing.stderr
    unknown = run_cli("report", "--bisect", "ffff", cwd=repo.path)
    assert unknown.returncode == 2 and unknown.stderr.startswith("Error: ")


def test_pooling_keeps_the_counter_test_of_counter_rows() -> None:
    """Blocks/op pooled over two comparisons are judged as counts (Welch), not as time."""
    from perfctl.stats.bisection import pooled

    sides = {
        side: RegimeResult(
            "alloc", "toy", Status.OK, processes=((v,), (v,), (v,)), unit="blocks/op"
        )
        for side, v in (("base", 4.0), ("head", 5.0))
    }
    (row,) = verdicts.decide_all({"alloc": sides}, threshold=0.005, alpha=0.05)
    both = pooled([row, row], threshold=0.005, alpha=0.05)
    assert both.unit == "blocks/op" and both.verdict == "regressed"
    assert both.change == pytest.approx(0.25) and len(both.base_values) == 6


def test_pooling_pairs_only_rows_that_were_all_paired() -> None:
    """A row measured in one process per pair pooled with one measured apart is judged
    unpaired (Mann–Whitney on process means): no process is paired with a stranger."""
    import random

    from perfctl.stats.bisection import pooled

    rng = random.Random(1)
    procs = tuple((1e-3 * rng.lognormvariate(0.0, 0.2),) for _ in range(8))
    heads = tuple((p[0] * 1.05,) for p in procs)  # +5% in every pair, process noise 20%
    sides = {
        "base": RegimeResult("work", "toy", Status.OK, processes=procs, pairing="same-process"),
        "head": RegimeResult("work", "toy", Status.OK, processes=heads, pairing="same-process"),
    }
    (paired,) = verdicts.decide_all({"work": sides}, threshold=0.02, alpha=0.05)
    assert paired.pairing == "same-process" and paired.verdict == "regressed"
    both = pooled([paired, paired], threshold=0.02, alpha=0.05)
    assert both.pairing == "same-process" and both.verdict == "regressed"
    mixed = pooled([paired, replace(paired, pairing="process")], threshold=0.02, alpha=0.05)
    assert mixed.pairing == "process" and mixed.verdict != "regressed"


def test_selection_counts_named_regimes_not_dragged_baselines() -> None:
    rows = [_row(0.0, 0.0, 0.0, "no change") for _ in range(3)]
    rows = [
        replace(r, name=n, family=f)
        for r, n, f in zip(rows, ("work", "work_big", "base"), "ffg", strict=True)
    ]
    assert job.select_names(rows, ["work"], None) == ["work"]  # exact wins over the glob
    assert job.select_names(rows, ["f.work_big"], None) == ["work_big"]
    assert job.select_names(rows, ["work*"], None) == ["work", "work_big"]
    assert job.select_names(rows, [], "f") == ["work", "work_big"]  # --family alone
    assert job.select_names(rows, ["w*", "base"], None) == ["base", "work", "work_big"]
    with pytest.raises(UsageError, match="selects no measured regime"):
        job.select_names(rows, ["work"], "g")


def test_fake_two_regimes_share_the_commits_both_searches_visit(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    work = {i: 3.0 for i in range(6, 10)}
    also = {i: 3.0 for i in range(8, 10)}
    records, fake = _run_all(
        git_repo, line, work, monkeypatch, more={"also": also}, globs=("work", "also")
    )
    assert [r.regime for r in records] == ["also", "work"]  # sorted by name
    culprits = {r.regime: r.culprit.sha if r.culprit else None for r in records}
    assert culprits == {"work": line[6], "also": line[8]}
    assert len(set(fake.calls)) == len(fake.calls)  # no pair measured twice
    assert fake.measured[0] == ("work", "also")  # the ends: both regimes at once
    # `also` is searched first; `work`'s search then reuses the commits it shares.
    also_steps = {s.commit.sha: s for s in records[0].steps if s.kind == StepKind.STEP}
    shared = [s for s in records[1].steps if s.kind == StepKind.STEP and s.commit.sha in also_steps]
    assert shared and all(s.seconds == 0 for s in shared)  # measured (and billed) once
    assert all(s.comparisons == also_steps[s.commit.sha].comparisons for s in shared)
    assert len({r.group for r in records}) == 1 and records[0].id != records[1].id
    # A re-run of the same call finds both records and measures nothing.
    again, fake2 = _run_all(
        git_repo, line, work, monkeypatch, more={"also": also}, globs=("work", "also")
    )
    assert fake2.calls == [] and [r.culprit for r in again] == [r.culprit for r in records]


def test_fake_a_call_with_another_selection_never_shrinks_this_one(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`-r work -r also`, then `-r work` (which takes over work's record), then the first
    again: both regimes are answered; every finished step is reused; the ends re-confirmed."""
    work = {i: 3.0 for i in range(6, 10)}
    more = {"also": {i: 3.0 for i in range(8, 10)}}
    first, _ = _run_all(git_repo, line, work, monkeypatch, more=more, globs=("work", "also"))
    _run_all(git_repo, line, work, monkeypatch, more=more, globs=("work",))
    again, fake = _run_all(git_repo, line, work, monkeypatch, more=more, globs=("work", "also"))
    assert [r.regime for r in again] == ["also", "work"]
    assert [r.culprit for r in again] == [r.culprit for r in first]
    assert fake.calls == [(0, 9)]


def test_fake_verification_measures_anew_when_the_culprit_follows_good(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    speed = {i: 3.0 for i in range(1, 10)}
    record, fake = _run(git_repo, line, speed, monkeypatch, fresh=True)
    assert record.culprit is not None and record.culprit.sha == line[1]
    verify = record.of_kind(StepKind.VERIFY)[0]
    step = next(s for s in record.of_kind(StepKind.STEP) if s.commit.sha == line[1])
    assert (verify.base.sha, verify.commit.sha) == (line[0], line[1])
    assert fake.calls.count((0, 1)) == 2 and not set(verify.comparisons) & set(step.comparisons)


@pytest.mark.parametrize(
    "settings",
    [
        {"clock": "cpu", "pairing": "same-process"},
        {"pairing": "same-process"},
        {"pairing": "process"},  # a bisection with pairing auto (the default) pools auto's
        {"affinity": [0]},  # pinned workers (as stored: a JSON list)
        None,
    ],
)
def test_fake_a_stored_comparison_is_reused_only_if_measured_alike(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch, settings: dict | None
) -> None:
    """CPU time, same-process or pinned pairs are not pooled into a wall-time bisection
    of unpinned processes, and a
    stored row without values (a regime that timed out there) is measured anew."""
    speed = {i: 3.0 for i in range(6, 10)}

    def alter(c: Comparison) -> Comparison:
        if settings is None:  # alike, but the regime's row holds no values
            return replace(c, regimes=tuple(replace(r, base_values=()) for r in c.regimes))
        return replace(c, settings={**c.settings, **settings})

    _store_earlier(git_repo, line, speed, alter)
    record, fake = _run(git_repo, line, speed, monkeypatch)
    assert (0, 5) in fake.calls and record.culprit is not None and record.culprit.sha == line[6]
    step = next(s for s in record.of_kind(StepKind.STEP) if s.commit.sha == line[5])
    assert "earlier" not in step.comparisons


def test_fake_unchanged_and_failing_regimes_get_their_own_outcome(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    work = {i: 3.0 for i in range(6, 10)}
    more: dict[str, dict[int, float | str]] = {"steady": {}, "broken": {9: "fail"}}
    records, fake = _run_all(git_repo, line, work, monkeypatch, more=more, globs=("*",))
    outcomes = {r.regime: r.outcome for r in records}
    assert outcomes == {
        "broken": Outcome.FAILED,
        "steady": Outcome.NO_REGRESSION,
        "work": Outcome.CULPRIT,
    }
    assert "ImportError" in next(r.note for r in records if r.regime == "broken")
    # Only the regressed regime is measured after the ends.
    assert set(fake.measured[0]) == {"work", "steady", "broken"}
    assert all(m == ("work",) for m in fake.measured[1:])


def test_fake_every_regime_failing_at_the_ends_is_an_error(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from perfctl.errors import RegimeFailed

    with pytest.raises(RegimeFailed, match="cannot be measured on GOOD or BAD"):
        _run(git_repo, line, {9: "fail"}, monkeypatch)


def test_fake_a_stored_comparison_of_another_measure_is_not_reused(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    speed = {i: 3.0 for i in range(6, 10)}
    _store_earlier(git_repo, line, speed)
    memory = replace(COMPARE_FAST, schedule=replace(COMPARE_FAST.schedule, measure="memory"))
    fake = FakeCompare(line, speed)
    monkeypatch.setattr(bisect_pairs, "compare_refs", fake)
    (record,) = job.bisect(
        load_config(git_repo.path), line[0], line[-1], "work", job.BisectSettings(compare=memory)
    )
    assert (0, 5) in fake.calls and record.settings["measure"] == "memory"
    assert record.culprit is not None and record.culprit.sha == line[6]
    time_record, _ = _run(git_repo, line, speed, monkeypatch)
    assert time_record.id != record.id  # one record per measure


def test_markdown_and_json_of_a_record_escape_commit_subjects(
    git_repo: GitRepo, line: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from perfctl.render import bisect as render

    speed = {i: 3.0 for i in range(6, 10)} | {4: "fail"}
    record, _ = _run(git_repo, line, speed, monkeypatch)
    hostile = replace(record.candidates[0], subject="<img src=x> | @owner [x](y)")
    record = replace(record, culprit=hostile, candidates=(hostile,))
    md = render.format_bisect_markdown(record)
    assert "<img" not in md and "&lt;img" in md and "@\u200bowner" in md
    assert "\\| @" in md and "\\[x\\](y)" in md
    assert "| verify |" in md and "verified" in md and "_Total time:" in md
    data = json.loads(render.format_bisect_json(record))
    assert data["outcome"] == "culprit" and data["culprit"]["subject"].startswith("<img")
    assert data["seconds"] == pytest.approx(record.seconds, abs=0.01)


def test_a_skipped_commit_is_one_line_whatever_its_log_excerpt() -> None:
    from perfctl.render.bisect import skipped_lines
    from perfctl.stats.bisection import Bisection, Step

    good, c1, bad = (RefInfo(x, x * 40, subject=f"{x}: s") for x in "abc")
    reason = "head: toy/__init__.py:6:\nSyntaxError:  invalid syntax\n"
    b = Bisection("b", "now", "work", good, bad, 2, Outcome.RANGE,
                  (Step(StepKind.STEP, good, c1, S, reason=reason),))  # fmt: skip
    assert skipped_lines(b) == [
        "skipped: bbbbbbbbbb b: s: head: toy/__init__.py:6: SyntaxError: invalid syntax"
    ]
