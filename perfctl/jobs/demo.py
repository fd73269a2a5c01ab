"""`perfctl demo`: the whole loop on a bundled project with a real history.

The bundled project (``perfctl/data/demo``) is minibridge, a parent/child
bridge. It is written out as a real git repository whose commits are the
phases of its optimization plan (tags ``phase-0`` … ``phase-4``):

1. per-element pickling → bulk payload transport,
2. per-call round trips → batched calls,
3. pipe bytes → shared memory,
4. always-recompute → epoch-cached propagation.

Then the real pipeline runs on it: compare first vs last commit, profile the
most-improved regime on both refs, render the HTML report, and regenerate the
optimization plan (one comparison per phase). Everything printed is measured.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from perfctl.errors import UsageError
from perfctl.jobs.compare import CompareSettings
from perfctl.measure.executor import PYPERF, Executor
from perfctl.measure.interleave import Schedule
from perfctl.model import IMPROVED, Comparison

if TYPE_CHECKING:
    from perfctl.config import Config

Say = Callable[[str], None]
GIT_IDENTITY = [
    "-c",
    "user.name=perfctl demo",
    "-c",
    "user.email=demo@perfctl.invalid",
    "-c",
    "commit.gpgsign=false",
    "-c",
    "tag.gpgsign=false",
]


@dataclass
class DemoResult:
    """Where the demo left each artefact, plus what it measured."""

    root: Path
    comparison: Comparison
    phases: dict[str, Comparison] = field(default_factory=dict)
    profile: dict[str, str] = field(default_factory=dict)
    report: Path | None = None
    history: Path | None = None
    plan: Path | None = None
    missed: list[str] = field(default_factory=list)


def demo_settings(quick: bool) -> CompareSettings:
    """Comparison settings: quick (tests/CI) or the demo's default."""
    if quick:
        # 8 rounds: enough for the rank test to clear BH even when the machine is busy.
        return CompareSettings(
            schedule=Schedule(rounds=8, max_rounds=8, values=2, min_time=0.01, time_budget=5),
            name="demo-quick",
        )
    return CompareSettings(
        schedule=Schedule(rounds=10, max_rounds=16, values=2, min_time=0.03, time_budget=10),
        name="demo",
    )


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *GIT_IDENTITY, *args], cwd=root, check=True, capture_output=True)


def write_project(root: Path, say: Say) -> list[str]:
    """Write minibridge into ``root`` as a git repo, one commit + tag per phase."""
    data = Path(str(resources.files("perfctl") / "data" / "demo"))
    phases = json.loads((data / "phases.json").read_text(encoding="utf-8"))
    if root.exists() and any(root.iterdir()):
        raise UsageError(f"{root} is not empty", "give a new or empty directory for the demo")
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q", "-b", "main")
    (root / ".gitignore").write_text(".perfctl/\nreports/\n__pycache__/\n*.egg-info/\nbuild/\n")
    for i, phase in enumerate(phases):
        # Not the package's own bytecode (compileall or an import writes it there): a
        # phase's checkout must hold only that phase's files.
        shutil.copytree(
            data / phase["dir"],
            root,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        _git(root, "add", "-A")
        date = f"2026-01-{10 + i:02d}T12:00:00+00:00"
        subprocess.run(
            ["git", *GIT_IDENTITY, "commit", "-q", "-m", phase["message"], "--date", date],
            cwd=root,
            check=True,
            capture_output=True,
            env={**_env(), "GIT_COMMITTER_DATE": date},
        )
        _git(root, "tag", phase["tag"])
        say(f"committed {phase['tag']}: {phase['message']}")
    return [p["tag"] for p in phases]


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


def _most_improved(c: Comparison) -> str | None:
    """The improved regime with the largest speed-up (the demo profiles it)."""
    improved = [r for r in c.regimes if r.verdict == IMPROVED and r.change is not None]
    return min(improved, key=lambda r: r.change or 0).name if improved else None


def run_demo(
    directory: Path | None,
    *,
    quick: bool = False,
    say: Say = print,
    executor: Executor = PYPERF,
) -> DemoResult:
    """Write the project, then compare, profile, report and plan it."""
    from perfctl.config import load_config
    from perfctl.jobs import compare
    from perfctl.plan import update as plan
    from perfctl.render import html_report as report
    from perfctl.store.local import open_store

    root = (directory or Path(tempfile.mkdtemp(prefix="perfctl-demo-"))).resolve()
    tags = write_project(root, say)
    # The demo's throw-away project keeps its own store, whatever PERFCTL_STORE_URL says.
    config = replace(load_config(root), store_url=None)
    settings = demo_settings(quick)
    say(f"comparing {tags[0]} → {tags[-1]}")
    c = compare.compare_refs(
        config,
        tags[0],
        tags[-1],
        settings=settings,
        progress=say,
        executor=executor,
    )
    result = DemoResult(root=root, comparison=c)
    c = _profile_most_improved(config, c, (tags[0], tags[-1]), quick, say, result)
    spec = plan.load_spec(config)
    for i, phase in enumerate(spec.phases):
        say(f"measuring phase {phase.id} ({phase.before} → {phase.after})")
        # The first phase is the plan's baseline: it measures the whole suite.
        names = None if i == 0 else [*phase.regimes, *phase.guards]
        result.phases[phase.after] = compare.compare_refs(
            config,
            phase.before,
            phase.after,
            regimes=names,
            settings=settings,
            progress=say,
            executor=executor,
        )
    result.report = report.render_comparison(
        c, project_root=root, out=config.reports_dir / "comparison.html"
    )
    result.history = report.render_history(
        open_store(config.state_dir, config.store_url).list_runs(),
        out=config.reports_dir / "history.html",
    )
    plan_path = root / "PLAN.md"
    plan.init_plan(config, plan_path)
    outcome = plan.update_plan(config, plan_path, measure=True, progress=say, executor=executor)
    result.plan = plan_path
    result.missed = list(getattr(outcome, "warnings", ()) or ())
    return result


def _profile_most_improved(
    config: Config,
    c: Comparison,
    refs: tuple[str, str],
    quick: bool,
    say: Say,
    result: DemoResult,
) -> Comparison:
    """Profile the most-improved regime on both refs and store the comparison with it."""
    from perfctl import envs
    from perfctl.jobs import profile as profiling
    from perfctl.store.local import open_store

    best = _most_improved(c)
    if not best:
        return c
    say(f"profiling {best} on {refs[0]} and {refs[1]}")
    before, after = (envs.prepare_target(config, t) for t in refs)
    diff = profiling.profile_pair(
        config, best, before, after, duration=1.5 if quick else 4.0, log=say
    )
    result.profile = diff.artifacts()
    c = replace(
        c,
        regimes=tuple(
            replace(r, artifacts={**r.artifacts, **result.profile}) if r.name == best else r
            for r in c.regimes
        ),
    )
    open_store(config.state_dir, config.store_url).save_comparison(c)
    result.comparison = c
    return c
