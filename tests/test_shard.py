"""Sharded comparisons (`compare --shard K/N`) and `perfctl merge`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from perfctl.caveats import Caveat, WarningKind, kind_of
from perfctl.config import load_config
from perfctl.errors import UsageError
from perfctl.jobs import shard
from perfctl.jobs.compare import compare_refs, settings_for
from perfctl.jobs.shard import Shard
from perfctl.model import Comparison
from tests.conftest import GitRepo, run_cli
from tests.fakes import Dist, FakeExecutor
from tests.test_locking import start_holder, stop

PYPROJECT = """\
[project]
name = "sh"
version = "0.1"

[tool.perfctl]
regimes = ["bench/regimes.py"]
install = false
"""

CODE = """\
def slow(n={n}):
    return sum(i * i for i in range(n))

def steady():
    return sum(range(3000))
"""

REGIMES = """\
from perfctl import regime
import sh

@regime(family="sh", ops=1)
def slow():
    \"\"\"Five times the work at c2.\"\"\"
    return sh.slow

@regime(family="sh", ops=1, baseline="slow")
def steady():
    \"\"\"Unchanged; its baseline is `slow`, so the two share a shard.\"\"\"
    return sh.steady

@regime(family="sh", ops=1)
def also_slow():
    \"\"\"The same slowdown, in the other shard.\"\"\"
    return sh.slow
"""

FAST = ["--fast", "--rounds", "8", "--max-rounds", "8", "--min-time", "0.01"]


@dataclass(frozen=True)
class _R:
    name: str
    baseline: str | None = None


def test_split_is_deterministic_complete_and_keeps_baselines_together() -> None:
    regimes = [_R("a"), _R("b", "a"), _R("c"), _R("d"), _R("e", "d"), _R("f")]
    parts = [shard.split(regimes, shard.Shard(k, 3, "r")) for k in (1, 2, 3)]
    names = [r.name for p in parts for r in p]
    assert sorted(names) == sorted(r.name for r in regimes) and len(names) == len(set(names))
    for p in parts:
        got = {r.name for r in p}
        assert ("a" in got) == ("b" in got) and ("d" in got) == ("e" in got)
    assert parts == [shard.split(regimes, shard.Shard(k, 3, "r")) for k in (1, 2, 3)]


@pytest.mark.parametrize("text", ["0/2", "3/2", "2", "a/b", "1/0"])
def test_bad_shard_specs_are_usage_errors(text: str) -> None:
    with pytest.raises(UsageError, match="--shard takes K/N"):
        shard.parse_shard(text)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> GitRepo:
    """c1, then c2 with five times the work in `slow`."""
    path = tmp_path_factory.mktemp("shard") / "proj"
    path.mkdir()
    r = GitRepo(path)
    r.git("init", "-q", "-b", "main")
    r.write("pyproject.toml", PYPROJECT)
    r.write("bench/regimes.py", REGIMES)
    r.write("sh/__init__.py", CODE.format(n=2000))
    r.commit("c1")
    r.tag("c1")
    r.write("sh/__init__.py", CODE.format(n=10000))
    r.commit("c2")
    r.tag("c2")
    return r


def _shard(repo: GitRepo, k: int, n: int, run: str = "t1", base: str = "c1") -> dict:
    out = run_cli(
        "compare", base, "c2", *FAST, "--shard", f"{k}/{n}", "--shard-run", run,
        "--format", "json", cwd=repo.path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.slow
def test_shards_merge_into_one_comparison(repo: GitRepo, tmp_path: Path) -> None:
    one, two = _shard(repo, 1, 2), _shard(repo, 2, 2)
    names = [{r["name"] for r in c["regimes"]} for c in (one, two)]
    assert names[0] | names[1] == {"slow", "steady", "also_slow"} and not names[0] & names[1]
    assert one["settings"]["shard"] == {"index": 1, "count": 2, "run": "t1"}
    # From artefact directories, as a fan-in CI job would get them.
    for i, c in enumerate((one, two), 1):
        (tmp_path / f"shard-{i}").mkdir()
        (tmp_path / f"shard-{i}" / "comparison.json").write_text(json.dumps(c))
    out = run_cli("merge", str(tmp_path), "--format", "json", cwd=repo.path)
    assert out.returncode == 0, out.stderr
    merged = json.loads(out.stdout)
    verdicts = {r["name"]: r["verdict"] for r in merged["regimes"]}
    assert verdicts["slow"] == verdicts["also_slow"] == "regressed"
    assert len(merged["settings"]["merged_from"]) == 2
    # Benjamini-Hochberg ran across all three regimes, not per shard.
    p = [r["p_value"] for r in merged["regimes"] if r["p_value"] is not None]
    assert len(p) == 3
    gate = run_cli("merge", one["id"], two["id"], "--fail-on-regression", cwd=repo.path)
    assert gate.returncode == 1, gate.stderr
    listed = run_cli("comparisons", "--format", "json", cwd=repo.path)
    assert merged["id"] in listed.stdout
    # A shard decided under another band is refused, not re-decided under the first's.
    (tmp_path / "shard-2" / "comparison.json").write_text(json.dumps({**two, "threshold": 0.05}))
    mixed = run_cli("merge", str(tmp_path), cwd=repo.path)
    assert mixed.returncode == 2 and "Traceback" not in mixed.stderr
    assert (
        "Error: the shards were measured or decided differently (--threshold 0.01 and 0.05)"
        in mixed.stderr
    )
    assert "Hint: merge the shards of one" in mixed.stderr


def _fake_shard(repo: GitRepo, k: int, base: str = "c1") -> Comparison:
    """Shard k/2 of run t2, measured by the fake executor (c2: `slow` five times slower)."""
    names = ("slow", "steady", "also_slow")
    dists = {(ref, n): Dist(1e-3) for ref in ("c1", "c2") for n in names}
    dists |= {("c2", n): Dist(5e-3) for n in ("slow", "also_slow")}
    fake = FakeExecutor(dists, family="sh", baselines={"steady": "slow"})
    config = load_config(repo.path)
    fast = settings_for(config=config, fast=True, shard=Shard(k, 2, "t2"))
    return compare_refs(config, base, "c2", settings=fast, executor=fake)


@pytest.mark.fresh_process  # a subprocess, so that run_cli's timeout holds
def test_merge_does_not_queue_behind_a_running_compare(repo: GitRepo) -> None:
    one, two = _fake_shard(repo, 1), _fake_shard(repo, 2)
    holder = start_holder(repo.path / ".perfctl", 120)  # another perfctl, as a compare
    try:
        # Waiting for the lock would last the holder's 120 s, past this timeout (an error).
        out = run_cli("merge", one.id, two.id, "--format", "json", cwd=repo.path, timeout=90)
        still_held = holder.poll() is None
    finally:
        stop(holder)
    assert out.returncode == 0, out.stderr
    assert still_held and "waiting" not in out.stderr
    assert len(json.loads(out.stdout)["settings"]["merged_from"]) == 2


def test_missing_duplicate_and_foreign_shards_are_refused(repo: GitRepo) -> None:
    one = _fake_shard(repo, 1)
    with pytest.raises(UsageError, match="shard 2/2 missing"):
        shard.merge([one], "m1", "now")
    with pytest.raises(UsageError, match="shard 1/2 given more than once"):
        shard.merge([one, one], "m2", "now")
    other = _fake_shard(repo, 2, base="c2")
    with pytest.raises(UsageError, match="the shards come from different base commits"):
        shard.merge([one, other], "m3", "now")


@pytest.mark.parametrize(
    ("fields", "settings", "said"),
    [
        ({"threshold": 0.05}, {}, "--threshold 0.01 and 0.05"),
        ({"alpha": 0.01}, {}, "--alpha 0.01 and 0.05"),
        ({}, {"clock": "cpu"}, "--clock cpu and wall"),
        ({}, {"pairing": "same-process"}, "--pairing process and same-process"),
        ({}, {"measure": "instructions"}, "--measure instructions and time"),
    ],
)
def test_shards_measured_or_decided_differently_are_refused(
    repo: GitRepo, fields: dict[str, float], settings: dict[str, str], said: str
) -> None:
    """A merge never re-decides a shard under another band, nor mixes clocks or counters."""
    from dataclasses import replace

    one, two = _fake_shard(repo, 1), _fake_shard(repo, 2)
    other = replace(two, settings={**two.settings, **settings}, **fields)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="measured or decided differently") as err:
        shard.merge([one, other], "m", "now")
    assert f"({said})" in str(err.value)
    if "--measure" in said:  # two signals under one run id: each wants its own
        assert "a --shard-run id of their own" in (err.value.hint or "")
    assert shard.merge([one, two], "m2", "now").regimes  # alike: merged


def test_merged_shards_add_up_their_burst_holds(repo: GitRepo) -> None:
    from dataclasses import replace

    def held(c: Comparison, seconds: float) -> Comparison:
        return replace(c, settings={**c.settings, "burst_held": seconds})

    parts = [held(_fake_shard(repo, 1), 3.5), held(_fake_shard(repo, 2), 4.0)]
    assert shard.merge(parts, "m", "now").settings["burst_held"] == 7.5


def test_merged_shards_pinned_differently_say_so(repo: GitRepo) -> None:
    from dataclasses import replace

    one, two = _fake_shard(repo, 1), _fake_shard(repo, 2)
    pinned = replace(two, settings={**two.settings, "affinity": [1]})
    busy = Caveat("the machine was busy", WarningKind.BUSY_MACHINE)
    merged = shard.merge([one, replace(pinned, warnings=(busy,))], "m", "now")
    (said,) = [w for w in merged.warnings if "pinned" in w]
    assert said == (
        "the shards pinned their workers differently (--affinity: not pinned, 1): "
        "the merged comparison names no placement"
    )
    assert said.kind == WarningKind.PLACEMENT_DIFFERS
    # A shard's own warning is prefixed with its shard and keeps its kind.
    (inherited,) = [w for w in merged.warnings if "busy" in w]
    assert (inherited, kind_of(inherited)) == ("shard 2/2: the machine was busy", "busy-machine")
    first_pinned = replace(one, settings={**one.settings, "affinity": [0]})
    mixed = shard.merge([first_pinned, two], "m1", "now")
    assert not mixed.settings["affinity"]  # not the first shard's placement
    assert not any("pinned" in w for w in shard.merge([one, two], "m2", "now").warnings)
    alike = shard.merge([pinned, replace(one, settings={**one.settings, "affinity": [1]})],
                        "m3", "now")  # fmt: skip
    assert alike.settings["affinity"] == [1]


def test_merged_counter_shards_keep_their_test_and_limits(repo: GitRepo) -> None:
    """Counter rows merge as counts (Welch: 3 a side decide) with head's max_peak kept."""
    from dataclasses import replace

    def as_counts(c: Comparison) -> Comparison:
        rows = tuple(
            replace(r, unit="blocks/op", base_values=((4.0,),) * 3, head_values=((5.0,),) * 3,
                    metrics_head={"peak_traced_bytes": 2e6}, max_peak=10**6)
            for r in c.regimes
        )  # fmt: skip
        return replace(c, regimes=rows)

    merged = shard.merge([as_counts(_fake_shard(repo, k)) for k in (1, 2)], "m", "now")
    assert {r.unit for r in merged.regimes} == {"blocks/op"}
    assert {r.verdict for r in merged.regimes} == {"regressed"}  # the time rule: inconclusive
    assert all(r.over_limit.endswith("over max_peak 1 MB") for r in merged.regimes)


def test_merged_shards_judge_each_regime_on_its_own_band(repo: GitRepo) -> None:
    """A band a regime declared (``@regime(threshold=)``) survives the merge's re-decision."""
    from dataclasses import replace

    base = tuple((1.0 + 0.001 * i,) for i in range(10))
    head = tuple((1.2 + 0.001 * i,) for i in range(10))  # +20%, as clear as it gets

    def slower(c: Comparison, band: float | None) -> Comparison:
        rows = tuple(replace(r, base_values=base, head_values=head, base_order=tuple(range(0, 20, 2)),
                             head_order=tuple(range(1, 20, 2)), threshold=band) for r in c.regimes)  # fmt: skip
        return replace(c, regimes=rows)

    own = shard.merge([slower(_fake_shard(repo, k), 0.5) for k in (1, 2)], "m", "now")
    assert {(r.verdict, r.threshold) for r in own.regimes} == {("within noise", 0.5)}
    assert all("within the 50% noise band" in r.reason for r in own.regimes)
    plain = shard.merge([slower(_fake_shard(repo, k), None) for k in (1, 2)], "m", "now")
    assert {r.verdict for r in plain.regimes} == {"regressed"}


@pytest.mark.slow
def test_ci_shard_writes_artefacts_and_leaves_gate_and_comment_to_merge(
    repo: GitRepo, tmp_path: Path
) -> None:
    out = run_cli(
        "ci", "--base", "c1", "--head", "c2", "--fast", "--rounds", "8", "--shard", "1/2", "--shard-run", "ci1",
        "--fail-on-regression", "--artifacts", str(tmp_path / "s1"), cwd=repo.path,
    )  # fmt: skip
    # Shard 1/2 holds `also_slow`, a real regression: the shard itself does not gate.
    assert out.returncode == 0, out.stderr
    assert "shard 1/2: `perfctl merge` in the fan-in job comments and gates" in out.stderr
    stored = json.loads((tmp_path / "s1" / "comparison.json").read_text())
    assert stored["settings"]["shard"] == {"index": 1, "count": 2, "run": "ci1"}
    assert any(r["verdict"] == "regressed" for r in stored["regimes"])
