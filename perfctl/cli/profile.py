"""Command: profile (py-spy flame graphs, what dominates, before/after per-op diffs)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from perfctl.cli.common import (
    ANALYSE,
    ProjectOpt,
    TableOrJson,
    emit,
    finite,
    guarded,
    interrupted_code,
    signal_note,
)
from perfctl.cli.measure import RegimesOpt
from perfctl.profile import PROFILE_SECONDS

if TYPE_CHECKING:
    from perfctl.config import Config
    from perfctl.jobs.profile import DiffResult, ProfileResult


def _say(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def _show(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _files(rows: list[tuple[str, Path]]) -> list[str]:
    return ["", "Files", *(f"  {name:<18}{_show(path)}" for name, path in rows)]


def _profile_lines(result: ProfileResult) -> list[str]:
    from perfctl.profile.records import format_summary

    return [
        *format_summary(result.summary),
        *_files(
            [
                ("flame graph", result.flame_svg),
                ("speedscope", result.speedscope),
                ("collapsed stacks", result.collapsed),
                ("summary", result.summary_json),
            ]
        ),
    ]


def _diff_lines(d: DiffResult) -> list[str]:
    from perfctl.profile.records import format_diff

    return [
        *format_diff(d.diff),
        *_files(
            [
                ("diff flame graph", d.diff_svg),
                ("reverse view", d.diff_reverse_svg),
                ("diff data", d.diff_json),
                ("before flame", d.before.flame_svg),
                ("after flame", d.after.flame_svg),
                ("before summary", d.before.summary_json),
                ("after summary", d.after.summary_json),
            ]
        ),
    ]


def _warn(warnings: tuple[str, ...]) -> None:
    for w in warnings:
        _say(f"Warning: {w}")


@guarded
def profile_cmd(
    regime: Annotated[str, typer.Argument(help="Regime name, as `perfctl list` shows it.")],
    ref: Annotated[
        str,
        typer.Option(
            "--ref",
            help="Ref to profile (after side with --vs): branch, tag, sha, HEAD~3, or "
            "WORKTREE = this checkout with this interpreter.",
        ),
    ] = "WORKTREE",
    vs: Annotated[
        str | None,
        typer.Option(
            "--vs", help="Also profile this ref (the before side) and diff per operation."
        ),
    ] = None,
    duration: Annotated[
        float,
        typer.Option(
            "--duration", callback=finite, help="Seconds the regime loops under the profiler."
        ),
    ] = PROFILE_SECONDS,
    rate: Annotated[int, typer.Option("--rate", help="Samples per second.")] = 100,
    native: Annotated[
        bool, typer.Option("--native", help="Include native (C/C++/Cython) frames.")
    ] = False,
    subprocesses: Annotated[
        bool,
        typer.Option(
            "--subprocesses/--no-subprocesses", help="Sample the regime's child processes too."
        ),
    ] = True,
    idle: Annotated[
        bool, typer.Option("--idle", help="Include samples of waiting threads (sleep, I/O, locks).")
    ] = False,
    gil: Annotated[
        bool, typer.Option("--gil", help="Only samples of the thread holding the GIL.")
    ] = False,
    regimes: RegimesOpt = None,
    fmt: Annotated[
        TableOrJson,
        typer.Option("--format", help="table (people) or json (the same data, stdout only)."),
    ] = TableOrJson.table,
    project: ProjectOpt = None,
) -> None:
    """Profile a regime with py-spy: flame graph, what dominates, per-op diff with --vs.

    The regime's timed callable loops for --duration seconds in a worker run by
    py-spy, in the ref's environment; the artefacts go to
    <reports>/profiles/<regime>/<ref>/ and their paths are printed. Profiled
    timings are not measurements: use `perfctl compare` for those.

    Example: perfctl profile callback.call_soon --regimes builtin --vs main --duration 3
    """
    from perfctl.config import load_config
    from perfctl.profile import pyspy

    config = load_config(project, standalone=bool(regimes))
    pyspy.find_py_spy()  # before building any environment
    options: dict[str, Any] = dict(
        duration=duration,
        rate=rate,
        native=native,
        subprocesses=subprocesses,
        idle=idle,
        gil=gil,
        regimes=tuple(regimes or ()),
        log=_say,
    )
    try:
        if vs is None:
            _single(config, regime, ref, fmt, options)
        else:
            _pair(config, regime, vs, ref, fmt, options)
    except KeyboardInterrupt as exc:
        # typer turns a bare KeyboardInterrupt into a silent exit 130: say what happened.
        _say(f"Error: interrupted{signal_note(exc)}")
        _say("Hint: a profile stopped by Ctrl-C is kept, marked interrupted; re-run for a full one")
        raise typer.Exit(interrupted_code(exc)) from None


def _single(
    config: Config, regime: str, ref: str, fmt: TableOrJson, options: dict[str, Any]
) -> None:
    from perfctl.jobs import profile as profiling
    from perfctl.profile.records import summary_to_dict

    target = profiling.resolve_target(config, ref, log=_say)
    result = profiling.profile_regime(config, regime, target, **options)
    _warn(result.summary.warnings)
    if fmt == TableOrJson.json:
        emit(json.dumps(summary_to_dict(result.summary), indent=1))
    else:
        emit("\n".join(_profile_lines(result)))


def _pair(
    config: Config,
    regime: str,
    before_ref: str,
    after_ref: str,
    fmt: TableOrJson,
    options: dict[str, Any],
) -> None:
    from perfctl.jobs import profile as profiling

    # Both sides in built environments (WORKTREE from a snapshot, as compare does):
    # the two profiles then differ in the code only, never in the interpreter setup.
    after = profiling.resolve_target(config, after_ref, isolated=True, log=_say)
    before = profiling.resolve_target(config, before_ref, isolated=True, log=_say)
    d = profiling.profile_pair(config, regime, before, after, **options)
    _warn(d.diff.warnings)
    if fmt == TableOrJson.json:
        emit(json.dumps(_pair_json(d), indent=1))
    else:
        emit("\n".join(_diff_lines(d)))


def _pair_json(d: DiffResult) -> dict[str, Any]:
    from perfctl.profile.records import diff_to_dict, summary_to_dict

    return {
        "before": summary_to_dict(d.before.summary),
        "after": summary_to_dict(d.after.summary),
        "diff": diff_to_dict(d.diff),
    }


def register(app: typer.Typer) -> None:
    """Add profile."""
    app.command("profile", rich_help_panel=ANALYSE)(profile_cmd)
