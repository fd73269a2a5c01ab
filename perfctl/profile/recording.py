"""One profile, step by step: run the worker under py-spy, judge, analyse, write.

Judging never trusts py-spy's exit code. A profile is good when the worker's
own status file says the loop ran (``ok``), py-spy's output file parses, and
samples landed inside the regime. Otherwise: ptrace refusals raise
:class:`ProfilerUnavailable`; a failing or hanging regime, a missing output
and zero samples raise :class:`ProfileFailed`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from perfctl.caveats import Caveat, WarningKind
from perfctl.config import Config
from perfctl.errors import ProfileFailed, ProfilerUnavailable
from perfctl.measure.environ import scrubbed_env
from perfctl.measure.workers import WORKERS
from perfctl.model import RefInfo, RegimeInfo
from perfctl.profile import hotspots, pyspy, stacks
from perfctl.profile.pyspy import RecordSettings
from perfctl.profile.records import ProfileSummary, summary_to_dict
from perfctl.render import flame

WORKER = WORKERS / "profile.py"
PACKAGE_PARENT = Path(__file__).resolve().parent.parent.parent
SETUP_GRACE_S = 120.0  # start-up, set-up and teardown allowed beyond --duration
FEW_SAMPLES = 100  # fewer in the regime: warn that shares are rough
MIN_SAMPLES = 5  # fewer in the regime: no profile at all
BUSY_SHARE = 0.2  # warn when the loop waited longer than this share for a CPU


class Target(Protocol):
    """Where one ref's workers run (:class:`perfctl.envs.Target` fits)."""

    @property
    def ref(self) -> RefInfo: ...
    @property
    def python(self) -> Path: ...
    @property
    def cwd(self) -> Path: ...
    @property
    def env(self) -> dict[str, str]: ...


@dataclass(frozen=True)
class WorkerRun:
    """A judged recording: py-spy's run, the worker's status, the output file."""

    recording: pyspy.Recording
    status: Mapping[str, Any]
    output: Path
    timeout_s: float


@dataclass(frozen=True)
class Analysed:
    """Normalised stacks: all of them, the regime's view and the rest."""

    all: stacks.Stacks
    regime: stacks.Stacks
    outside: stacks.Stacks


def _read_status(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _tail(log: str) -> str:
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower() and "Errors: " not in ln]
    return (errors or lines or ["py-spy printed nothing"])[-1]


def _last_line(traceback: str) -> str:
    lines = [ln for ln in str(traceback).splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "unknown error"


def worker_env(config: Config, target: Target) -> dict[str, str]:
    """The workers' scrubbed environment, the target's additions, the configured subjects."""
    env = scrubbed_env(config.inherit_environ, target.env)
    if config.subjects and "PERFCTL_SUBJECTS" not in target.env:
        env["PERFCTL_SUBJECTS"] = json.dumps(config.subjects)
    return env


def run_worker(
    tmp: Path,
    config: Config,
    target: Target,
    files: Sequence[Path],
    info: RegimeInfo,
    settings: RecordSettings,
) -> WorkerRun:
    """Record the profile worker under py-spy into ``tmp``, then judge the outcome."""
    output, status_path = tmp / "profile.speedscope.json", tmp / "status.json"
    worker = [
        str(target.python),
        str(WORKER),
        os.pathsep.join(map(str, files)),
        info.name,
        repr(float(settings.duration)),
        str(status_path),
    ]
    argv = pyspy.command(pyspy.find_py_spy(), output, settings, worker)
    timeout = settings.duration + max(SETUP_GRACE_S, info.timeout or 0.0)
    env = worker_env(config, target)
    rec = pyspy.record(
        argv, cwd=target.cwd, env=env, log_path=tmp / "py-spy.log", timeout_s=timeout
    )
    run = WorkerRun(rec, _read_status(status_path) or {}, output, timeout)
    judge(run, info.name, has_status=status_path.is_file())
    return run


def judge(run: WorkerRun, regime: str, *, has_status: bool) -> None:
    """Raise unless the worker succeeded and py-spy wrote samples."""
    rec, status = run.recording, run.status
    has_output = run.output.is_file() and run.output.stat().st_size > 0
    if (not has_status or not has_output) and pyspy.permission_denied(rec.log):
        raise ProfilerUnavailable(
            f"py-spy may not read the worker's memory ({_tail(rec.log)})", pyspy.PTRACE_HINT
        )
    if rec.stopped == "timeout":
        # A loop stopped by SIGINT still writes an ok status: a hang is a failure anyway.
        raise ProfileFailed(
            f"regime `{regime}` did not finish within {run.timeout_s:.0f} s under the profiler",
            "one call of the regime must return; check it for a hang",
        )
    if not has_status:
        raise ProfileFailed(
            f"the profile worker of `{regime}` wrote no status ({_tail(rec.log)})",
            "check that the regime runs with `perfctl run`",
        )
    if not status.get("ok"):
        raise ProfileFailed(
            f"regime `{regime}` failed under the profiler: {_last_line(status.get('error') or '')}",
            "fix the regime (its full traceback is in the log)",
        )
    if not has_output:
        raise ProfileFailed(
            f"py-spy wrote no profile for `{regime}` ({_tail(rec.log)})",
            "check the py-spy version supports this Python",
        )
    if rec.samples == 0:
        # Same words as a recording with stray samples only: a user sees one message for
        # "the regime never ran on CPU", whichever way py-spy got there.
        raise ProfileFailed(too_few_samples(regime, 0, 0), _ZERO_HINT)


def too_few_samples(regime: str, found: int, total: int | None) -> str:
    """The error line for a profile with (almost) no samples inside the regime's loop."""
    return (
        f"{found or 'no'} samples of `{regime}` inside its timed loop, too few to "
        f"profile ({'?' if total is None else total} in all)"
    )


_ZERO_HINT = (
    "lengthen --duration or raise --rate; a regime that mostly waits (sleep, I/O) needs --idle"
)


def analyse(
    run: WorkerRun, *, config: Config, target: Target, regime: str, sample_s: float
) -> Analysed:
    """Parse, normalise and split the recorded stacks; (almost) no regime samples is an error."""
    try:
        data = json.loads(run.output.read_text(encoding="utf-8"))
        raw = stacks.parse_speedscope(data)
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise ProfileFailed(
            f"py-spy's profile of `{regime}` is unreadable ({exc})",
            "re-run; if it persists, check the py-spy version",
        ) from exc
    roots = [Path(target.cwd), config.root, PACKAGE_PARENT]
    norm = stacks.normalise(raw, roots, strip=("src", *config.pythonpath))
    inside, outside = stacks.regime_view(norm)
    found = round(inside.total_s / sample_s)
    if found < MIN_SAMPLES:
        # A stray sample or two (a wake-up between sleeps) says nothing about the regime.
        raise ProfileFailed(too_few_samples(regime, found, run.recording.samples), _ZERO_HINT)
    return Analysed(norm, inside, outside)


def _warnings(
    run: WorkerRun, settings: RecordSettings, coverage: float, regime_samples: int
) -> tuple[Caveat, ...]:
    rec, out = run.recording, []
    if rec.errors:
        out.append(
            Caveat(
                f"py-spy reported {rec.errors} sampling errors in {rec.samples} samples",
                WarningKind.SAMPLING_ERRORS,
            )
        )
    if "behind in sampling" in rec.log:
        out.append(
            Caveat(
                "py-spy fell behind its sampling rate: lower --rate for accurate shares",
                WarningKind.SAMPLER_BEHIND,
            )
        )
    if coverage < 0.5 and not settings.idle:
        out.append(
            Caveat(
                f"the regime was sampled on CPU for only {coverage:.0%} of its loop time "
                "(it waits, or py-spy fell behind); per-op times spread that waiting over "
                "the sampled functions: --idle shows the waits",
                WarningKind.LOW_COVERAGE,
            )
        )
    if regime_samples < FEW_SAMPLES:
        out.append(
            Caveat(
                f"only {regime_samples} samples in the regime: shares are rough "
                "(raise --duration or --rate)",
                WarningKind.FEW_SAMPLES,
            )
        )
    out += _run_warnings(run, settings)
    return tuple(out)


def _run_warnings(run: WorkerRun, settings: RecordSettings) -> list[Caveat]:
    """What the loop's own status says: a busy machine, an early stop."""
    out = []
    elapsed, wait = _busy_s(run.status)
    if wait > BUSY_SHARE * elapsed:
        out.append(
            Caveat(
                f"the machine was busy: the loop waited {wait / elapsed:.0%} of its time for "
                "a CPU; per-op times leave that wait out, but caches and py-spy suffered too",
                WarningKind.BUSY_MACHINE,
            )
        )
    if run.status.get("interrupted"):
        out.append(
            Caveat(
                f"stopped early: the loop ran {float(run.status['elapsed_s']):.1f} s of "
                f"{settings.duration:g} s",
                WarningKind.STOPPED_EARLY,
            )
        )
    return out


def scale_of(summary: ProfileSummary, regime_s: float) -> float:
    """Seconds per op per sampled regime second (``share × (elapsed - wait) / ops``)."""
    return summary.per_op_s / regime_s if regime_s > 0 else 0.0


def _busy_s(status: Mapping[str, Any]) -> tuple[float, float]:
    """(elapsed_s, wait_s) of the loop; the wait never takes more than 90% away."""
    elapsed = float(status["elapsed_s"])
    wait = min(max(float(status.get("wait_s") or 0.0), 0.0), 0.9 * elapsed)
    return elapsed, wait


def summarise(
    run: WorkerRun,
    analysed: Analysed,
    *,
    regime: str,
    ref: RefInfo,
    settings: RecordSettings,
    created: str,
    files: dict[str, str],
) -> ProfileSummary:
    """The summary record of a judged, analysed recording."""
    sample_s = 1.0 / settings.rate
    ops = max(int(run.status["ops"]), 1)
    elapsed, wait = _busy_s(run.status)
    regime_s = analysed.regime.total_s
    per_op = (elapsed - wait) / ops
    top_self, top_incl, tree = hotspots.tables(
        analysed.regime, scale=per_op / regime_s, sample_s=sample_s
    )
    regime_samples = round(regime_s / sample_s)
    coverage = regime_s / elapsed if elapsed > 0 else 0.0
    samples = run.recording.samples
    return ProfileSummary(
        regime=regime,
        ref=ref,
        created=created,
        settings=settings.as_dict(),
        ops=ops,
        calls=int(run.status["calls"]),
        elapsed_s=elapsed,
        wall_per_op_s=elapsed / ops,
        samples=samples if samples is not None else round(analysed.all.total_s / sample_s),
        errors=run.recording.errors or 0,
        regime_samples=regime_samples,
        outside_samples=round(analysed.outside.total_s / sample_s),
        coverage=coverage,
        top_self=top_self,
        top_inclusive=top_incl,
        tree=tree,
        files=files,
        warnings=_warnings(run, settings, coverage, regime_samples),
        interrupted=bool(run.status.get("interrupted")),
        cpu_s=float(run.status.get("cpu_s") or 0.0),
        wait_s=wait,
        per_op_s=per_op,
    )


def flame_svg(summary: ProfileSummary, regime: stacks.Stacks, sample_s: float) -> str:
    """The flame graph of the regime's samples, widths and tooltips per op."""
    tree = hotspots.call_tree(regime)
    total = tree.total_s or 1.0
    scale = scale_of(summary, total)

    def tip(node: hotspots.CallNode) -> str:
        return (
            f"{node.frame.label}\n{hotspots.format_time(node.total_s * scale)}/op, "
            f"{node.total_s / total:.1%} (self {hotspots.format_time(node.self_s * scale)}"
            f"/op, {node.self_s / total:.1%}); {round(node.total_s / sample_s):,} samples"
        )

    ref = summary.ref.ref + (f" ({summary.ref.short})" if summary.ref.sha else "")
    return flame.render_svg(
        flame.tree_boxes(tree, tip),
        title=f"{summary.regime} on {ref}",
        subtitle=f"{summary.regime_samples:,} samples in the regime at "
        f"{summary.settings['rate_hz']} Hz; {summary.ops:,} ops in "
        f"{summary.elapsed_s:.2f} s, {hotspots.format_time(summary.per_op_s)}/op",
        legend=f"width: share of the regime's samples; {summary.outside_samples:,} start-up "
        "and set-up samples are in profile.speedscope.json and stacks.collapsed. "
        "Hover a frame for details.",
    )


def write_profile(
    tmp: Path, summary: ProfileSummary, analysed: Analysed, settings: RecordSettings
) -> None:
    """Write flame.svg, stacks.collapsed and summary.json next to py-spy's output."""
    sample_s = 1.0 / settings.rate
    (tmp / "stacks.collapsed").write_text(
        stacks.to_collapsed(analysed.all, sample_s), encoding="utf-8"
    )
    (tmp / "flame.svg").write_text(flame_svg(summary, analysed.regime, sample_s), encoding="utf-8")
    (tmp / "summary.json").write_text(
        json.dumps(summary_to_dict(summary), indent=1) + "\n", encoding="utf-8"
    )


def sweep_stale(folder: Path, max_age_s: float = 3600.0) -> None:
    """Remove temporaries a killed perfctl left in ``folder`` (old enough to be dead)."""
    import time

    for path in folder.glob(".*.*-*"):
        if (".tmp-" in path.name or ".old-" in path.name) and path.is_dir():
            with contextlib.suppress(OSError):
                if time.time() - path.stat().st_mtime > max_age_s:
                    shutil.rmtree(path, ignore_errors=True)


def publish(tmp: Path, final: Path) -> None:
    """Move a finished folder into place, replacing an older one."""
    os.chmod(tmp, 0o755)  # mkdtemp made it private
    old = None
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
    os.replace(tmp, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def save_failure_log(config: Config, name: str, tmp: Path, exc: Exception) -> Path | None:
    """Keep what a failed attempt printed in ``<state>/logs/profile-NAME.log``."""
    logs = config.state_dir / "logs"
    try:
        logs.mkdir(parents=True, exist_ok=True)
        path = logs / f"profile-{name}.log"
        parts = [f"{type(exc).__name__}: {exc}"]
        for item in ("py-spy.log", "status.json"):
            if (tmp / item).is_file():
                parts.append(f"--- {item}\n" + (tmp / item).read_text(errors="replace"))
        path.write_text("\n".join(parts) + "\n", encoding="utf-8")
    except OSError:
        return None
    return path
