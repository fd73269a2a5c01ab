"""`perfctl profile`: record a regime under py-spy on one ref, or diff two refs.

:func:`profile_regime` reads as the pipeline: resolve the regime (probe worker
in the target's environment) -> record (py-spy running the profile worker,
into a temporary folder) -> judge (the worker's status file, the output file
and py-spy's ``Samples:`` line; never py-spy's exit code) -> analyse (stacks,
the regime's view, tables) -> write the artefacts -> move the folder into place,
so a half-written profile is never presented as finished. Artefacts::

    <reports>/profiles/<regime>/<ref>/
        flame.svg  profile.speedscope.json  stacks.collapsed  summary.json  py-spy.log
    <reports>/profiles/<regime>/<before>-vs-<after>/
        diff.svg  diff-reverse.svg  diff.json

``summary.json`` and ``diff.json``: :mod:`perfctl.profile.records`, which also decides
where artefacts live. A failed attempt leaves only a log under ``<state>/logs/``.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from perfctl.caveats import Caveat, kind_of
from perfctl.config import Config
from perfctl.errors import ProfileFailed, UsageError
from perfctl.files import ensure_output_dir
from perfctl.model import RefInfo, RegimeInfo
from perfctl.profile import PROFILE_SECONDS, pyspy, recording, stackdiff
from perfctl.profile.pyspy import Recording, RecordSettings
from perfctl.profile.recording import Target
from perfctl.profile.records import (
    DiffSide,
    DiffSummary,
    ProfileSummary,
    diff_dir,
    diff_to_dict,
    load_warning,
    profile_dir,
    ref_dir,
    slug,
)
from perfctl.profile.records import load_diff as load_diff  # re-exported API
from perfctl.profile.records import load_summary as load_summary
from perfctl.profile.stacks import Stacks
from perfctl.store.lock import project_lock

WORKTREE = "WORKTREE"
# The artefacts of one profile (summary.json "files" keys -> file names).
PROFILE_FILES = {
    "flame_svg": "flame.svg",
    "speedscope": "profile.speedscope.json",
    "collapsed": "stacks.collapsed",
    "summary": "summary.json",
}
Log = Callable[[str], None]


@dataclass(frozen=True)
class ProfileResult:
    """A finished profile of one regime on one ref: its artefacts and summary."""

    regime: str
    ref: RefInfo
    directory: Path
    flame_svg: Path
    speedscope: Path
    collapsed: Path
    summary_json: Path
    summary: ProfileSummary

    def artifacts(self, prefix: str = "") -> dict[str, str]:
        """Artefact paths by name (for RegimeComparison.artifacts)."""
        return {
            f"{prefix}flamegraph": str(self.flame_svg),
            f"{prefix}speedscope": str(self.speedscope),
            f"{prefix}collapsed": str(self.collapsed),
            f"{prefix}profile_summary": str(self.summary_json),
        }


@dataclass(frozen=True)
class DiffResult:
    """Profiles of one regime on two refs, and their per-op comparison."""

    regime: str
    before: ProfileResult
    after: ProfileResult
    directory: Path
    diff_svg: Path
    diff_reverse_svg: Path
    diff_json: Path
    diff: DiffSummary

    def artifacts(self) -> dict[str, str]:
        """Every artefact path by name: both profiles' and the diff's."""
        return {
            **self.before.artifacts("base_"),
            **self.after.artifacts("head_"),
            "diff_flamegraph": str(self.diff_svg),
            "diff_flamegraph_reverse": str(self.diff_reverse_svg),
            "profile_diff": str(self.diff_json),
        }


# -- targets and the regime ------------------------------------------------------


def resolve_target(
    config: Config,
    ref: str,
    *,
    rebuild: bool = False,
    isolated: bool = False,
    log: Log | None = None,
) -> Target:
    """WORKTREE: this interpreter, in place (``isolated``: a built env, as compare does);
    any other ref: its built environment."""
    from perfctl import envs

    if ref == WORKTREE and not isolated:
        return envs.current_target(config)
    return envs.prepare_target(config, ref, rebuild=rebuild, log=log)


def find_regime(
    config: Config, target: Target, regime: str, regimes: Sequence[str] = ()
) -> tuple[list[Path], RegimeInfo]:
    """The regimes files and the probed regime; UsageError naming close matches."""
    from perfctl.regimes import discovery

    files, inherit = discovery.regime_files(config, list(regimes)), config.inherit_environ
    infos = discovery.probe(target.python, files, cwd=target.cwd, env=target.env, inherit=inherit)
    found = next((i for i in infos if i.name == regime), None)
    if found is None:
        close = difflib.get_close_matches(regime, [i.name for i in infos], n=3, cutoff=0.5)
        raise UsageError(
            f"unknown regime `{regime}`",
            f"did you mean: {', '.join(close)}?"
            if close
            else "list the regimes with `perfctl list`",
        )
    if found.skip_reason:
        raise ProfileFailed(
            f"regime `{regime}` cannot run on {target.ref.ref}: {found.skip_reason}",
            "profile it where its requirements are met",
        )
    return files, found


# -- one profile -------------------------------------------------------------------


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _record_into(
    tmp: Path,
    config: Config,
    target: Target,
    files: Sequence[Path],
    info: RegimeInfo,
    settings: RecordSettings,
) -> tuple[ProfileSummary, Stacks, Recording]:
    """Record, judge, analyse and write into ``tmp``: (summary, regime stacks, py-spy's run)."""
    run = recording.run_worker(tmp, config, target, files, info, settings)
    analysed = recording.analyse(
        run, config=config, target=target, regime=info.name, sample_s=1.0 / settings.rate
    )
    final = profile_dir(config, info.name, target.ref)
    summary = recording.summarise(
        run,
        analysed,
        regime=info.name,
        ref=target.ref,
        settings=settings,
        created=_now(),
        files={k: str(final / v) for k, v in PROFILE_FILES.items()},
    )
    recording.write_profile(tmp, summary, analysed, settings)
    return summary, analysed.regime, run.recording


def _profile(
    config: Config,
    target: Target,
    files: Sequence[Path],
    info: RegimeInfo,
    settings: RecordSettings,
    log: Log | None,
) -> tuple[ProfileResult, Stacks]:
    final = profile_dir(config, info.name, target.ref)
    ensure_output_dir(config.reports_dir, final.parent)
    recording.sweep_stale(final.parent)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    if log:
        log(
            f"profiling {info.name} on {target.ref.ref} for {settings.duration:g} s "
            f"at {settings.rate} Hz"
        )
    try:
        summary, regime, rec = _record_into(tmp, config, target, files, info, settings)
        (tmp / "status.json").unlink(missing_ok=True)
        recording.publish(tmp, final)
    except Exception as exc:
        where = recording.save_failure_log(config, f"{slug(info.name)}-{final.name}", tmp, exc)
        if isinstance(exc, ProfileFailed) and where:
            exc.hint = f"{exc.hint}; log: {where}" if exc.hint else f"log: {where}"
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        with contextlib.suppress(OSError):
            final.parent.rmdir()  # only when empty: a first profile that failed
    out = {key: final / name for key, name in PROFILE_FILES.items()}
    result = ProfileResult(
        info.name,
        target.ref,
        final,
        out["flame_svg"],
        out["speedscope"],
        out["collapsed"],
        out["summary"],
        summary,
    )
    if rec.stopped == "interrupt":
        if log:
            log(f"interrupted: kept the shortened profile in {final}")
        pyspy.stop_as_signalled(rec)  # stop everything else
    return result, regime


def profile_regime(
    config: Config,
    regime: str,
    target: Target,
    *,
    duration: float = PROFILE_SECONDS,
    rate: int = 100,
    native: bool = False,
    subprocesses: bool = True,
    idle: bool = False,
    gil: bool = False,
    regimes: Sequence[str] = (),
    log: Log | None = None,
) -> ProfileResult:
    """Profile ``regime`` on ``target`` and write its artefacts (see module docstring)."""
    settings = _settings(duration, rate, native, subprocesses, idle, gil)
    pyspy.find_py_spy()  # fail before probing when py-spy is missing
    with project_lock(config.state_dir, what="profile"):  # it measures: never beside a compare
        files, info = find_regime(config, target, regime, regimes)
        return _profile(config, target, files, info, settings, log)[0]


def _settings(
    duration: float, rate: int, native: bool, subprocesses: bool, idle: bool, gil: bool
) -> RecordSettings:
    if duration <= 0:
        raise UsageError(
            f"--duration must be positive, got {duration:g}",
            "give the loop's length in seconds, e.g. --duration 5",
        )
    if not 1 <= rate <= 10_000:
        raise UsageError(
            f"--rate must be between 1 and 10000 Hz, got {rate}",
            "the default 100 Hz slows the loop by 2-4%, 1000 Hz by 14-20%",
        )
    return RecordSettings(duration, rate, native, subprocesses, idle, gil)


# -- two refs ----------------------------------------------------------------------


def _side(result: ProfileResult) -> DiffSide:
    s = result.summary
    return DiffSide(
        s.ref,
        str(result.summary_json),
        s.ops,
        s.elapsed_s,
        s.wall_per_op_s,
        s.regime_samples,
        s.cpu_s / max(s.ops, 1),
        s.per_op_s,
    )


DIFF_FILES = {
    "diff_svg": "diff.svg",
    "diff_reverse_svg": "diff-reverse.svg",
    "diff_json": "diff.json",
}


def diff_profiles(
    config: Config,
    before: ProfileResult,
    after: ProfileResult,
    before_stacks: Stacks,
    after_stacks: Stacks,
) -> DiffResult:
    """Compare two finished profiles per op and write diff.svg/diff-reverse.svg/diff.json."""
    b_scale = recording.scale_of(before.summary, before_stacks.total_s)
    a_scale = recording.scale_of(after.summary, after_stacks.total_s)
    root, functions, band = stackdiff.compare(before_stacks, after_stacks, b_scale, a_scale)
    final = diff_dir(config, before.regime, before.ref, after.ref)
    sides = _side(before), _side(after)
    warnings = load_warning(*sides) + tuple(
        Caveat(f"{side}: {w}", kind_of(w))
        for side, r in (("before", before), ("after", after))
        for w in r.summary.warnings
    )
    d = DiffSummary(
        before.regime,
        _now(),
        *sides,
        functions,
        stackdiff.where_moved(root),
        stackdiff.node_deltas(root, band, stackdiff.max_delta(root)),
        {k: str(final / v) for k, v in DIFF_FILES.items()},
        warnings,
    )
    forward, reverse = stackdiff.diff_svgs(
        root,
        band=band,
        title=f"{d.regime}: {before.ref.ref} → {after.ref.ref}, per operation",
        before_per_op_s=d.before.per_op_s,
        after_per_op_s=d.after.per_op_s,
    )
    ensure_output_dir(config.reports_dir, final.parent)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        for name, text in (
            ("diff.svg", forward),
            ("diff-reverse.svg", reverse),
            ("diff.json", json.dumps(diff_to_dict(d), indent=1) + "\n"),
        ):
            (tmp / name).write_text(text, encoding="utf-8")
        recording.publish(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return DiffResult(
        before.regime,
        before,
        after,
        final,
        final / DIFF_FILES["diff_svg"],
        final / DIFF_FILES["diff_reverse_svg"],
        final / DIFF_FILES["diff_json"],
        d,
    )


def profile_pair(
    config: Config,
    regime: str,
    before_target: Target,
    after_target: Target,
    *,
    duration: float = PROFILE_SECONDS,
    rate: int = 100,
    native: bool = False,
    subprocesses: bool = True,
    idle: bool = False,
    gil: bool = False,
    regimes: Sequence[str] = (),
    log: Log | None = None,
) -> DiffResult:
    """Profile ``regime`` on both targets (before first) and diff them per operation."""
    settings = _settings(duration, rate, native, subprocesses, idle, gil)
    if ref_dir(before_target.ref) == ref_dir(after_target.ref):
        raise UsageError(
            f"both sides are `{ref_dir(after_target.ref)}`",
            "compare two different refs, e.g. --vs main",
        )
    pyspy.find_py_spy()
    with project_lock(config.state_dir, what="profile --vs"):  # both sides, one hold
        files, info = find_regime(config, after_target, regime, regimes)
        before, b_stacks = _profile(config, before_target, files, info, settings, log)
        after, a_stacks = _profile(config, after_target, files, info, settings, log)
    return diff_profiles(config, before, after, b_stacks, a_stacks)
