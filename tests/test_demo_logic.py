"""The demo's pipeline on scripted processes: compare, each plan phase, report, plan.

The real project is written (git, five tagged phases); measuring goes through the
fake executor, so the verdicts and the plan's judging are exact. The profiling step
starts py-spy and is left to the e2e test (``tests/test_demo.py``), which runs it all
on real processes.
"""

from __future__ import annotations

import re
import shutil
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from perfctl.jobs import demo
from perfctl.model import IMPROVED, NO_CHANGE
from tests.fakes import Dist, FakeExecutor

# The phase that speeds each regime up, and by how much; direct_sum is never touched.
FASTER = {
    "payload_large_sum": ("phase-1", 5.0),
    "increment_small": ("phase-2", 5.0),
    "bytes_roundtrip_512kb": ("phase-3", 5.0),
    "propagation_update": ("phase-4", 10.0),
}
BASE = {  # seconds per op at phase-0
    "payload_large_sum": 1e-3,
    "direct_sum": 1e-4,
    "increment_small": 1e-3,
    "bytes_roundtrip_512kb": 1e-3,
    "propagation_update": 5e-4,  # 50 µs after phase 4: its target is < 100 µs
}
TAGS = [f"phase-{i}" for i in range(5)]


def _dists() -> dict[tuple[str, str], Dist]:
    out = {}
    for i, tag in enumerate(TAGS):
        for name, mean in BASE.items():
            phase, factor = FASTER.get(name, ("phase-9", 1.0))
            out[tag, name] = Dist(mean / factor if i >= int(phase[-1]) else mean, cv=0.01)
    return out


def test_demo_runs_its_pipeline_on_scripted_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profiled: list[str] = []

    def no_profile(config: Any, c: Any, refs: Any, quick: bool, say: Any, result: Any) -> Any:
        profiled.append(demo._most_improved(c) or "")
        return c

    monkeypatch.setattr(demo, "_profile_most_improved", no_profile)
    # The package's demo data with bytecode beside it, as compileall or an import leaves
    # it: none of it may reach the project.
    package = tmp_path / "package"
    shutil.copytree(
        Path(str(resources.files("perfctl"))) / "data" / "demo", package / "data" / "demo"
    )
    for phase in ("phase-0", "phase-2"):
        cache = package / "data" / "demo" / phase / "minibridge" / "__pycache__"
        cache.mkdir(exist_ok=True)
        (cache / "bridge.cpython-311.pyc").write_bytes(b"stale")
    real = resources.files
    monkeypatch.setattr(
        demo.resources, "files", lambda name: package if name == "perfctl" else real(name)
    )
    fake = FakeExecutor(_dists(), family="demo", baselines={"payload_large_sum": "direct_sum"})
    said: list[str] = []
    result = demo.run_demo(tmp_path / "demo", quick=True, say=said.append, executor=fake)

    # phase-0 → phase-4: every optimised regime improved, the untouched one unchanged.
    verdicts = {r.name: r.verdict for r in result.comparison.regimes}
    assert verdicts == {**dict.fromkeys(FASTER, IMPROVED), "direct_sum": NO_CHANGE}
    assert profiled == ["propagation_update"]  # the largest speed-up (10x) is profiled
    assert "comparing phase-0 → phase-4" in said
    # Each plan phase is measured on its own pair of tags: its regime improved there.
    assert sorted(result.phases) == TAGS[1:]
    for name, (tag, _) in FASTER.items():
        by_name = {r.name: r for r in result.phases[tag].regimes}
        assert by_name[name].verdict == IMPROVED, (tag, name)
        assert result.phases[tag].base.ref == TAGS[TAGS.index(tag) - 1]
        assert f"measuring phase {tag[-1]} ({TAGS[TAGS.index(tag) - 1]} → {tag})" in said
    # The first phase measures the whole suite (the plan's baseline), the others their
    # regimes and guards (with a guard's baseline regime: payload_large_sum's direct_sum).
    assert len(result.phases["phase-1"].regimes) == 5
    assert {r.name for r in result.phases["phase-3"].regimes} == {
        "bytes_roundtrip_512kb",
        "increment_small",
    }
    assert {r.name for r in result.phases["phase-2"].regimes} == {
        "increment_small",
        "payload_large_sum",
        "direct_sum",
    }
    # Every process the fake ran was one of the demo's tags and regimes.
    assert {(ref, name) for _, ref, name in fake.calls} <= set(_dists())
    # The plan judges every target met and every guard held, from the same comparisons.
    assert result.plan is not None and result.missed == []
    plan = result.plan.read_text(encoding="utf-8")
    assert plan.count("Targets met: 1 of 1; guards held: 1 of 1.") == 4, plan
    for target in (
        # ~5x faster: the paired estimate of one process's ratio (same-process pairing,
        # the auto default for these in-process regimes) lands on it, a process one near.
        r"-50% → -(79|80)\.\d\d%",
        r"3x → (4\.9\d|5\.\d\d)x",
        r"-20% → -(79|80)\.\d\d%",
        r"<100us → (49|50)\.\dus",
    ):
        assert re.search(target + " ✅ met", plan), target
    assert "❌" not in plan and "unverified" not in plan
    # The project holds the phases' files only, never the package's bytecode of them.
    assert list(result.root.rglob("__pycache__")) == []
    assert result.report is not None and result.report.is_file()
    assert result.history is not None and result.history.is_file()
