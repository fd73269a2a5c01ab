"""Shared pieces of the typer layer: error printing, the project option, formats."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from perfctl.errors import PerfctlError, UsageError
from perfctl.profile import PROFILE_SECONDS

F = TypeVar("F", bound=Callable[..., Any])

# Help-panel names, used to group commands in `perfctl --help`.
MEASURE = "Measure"
ANALYSE = "Analyse"
PUBLISH = "Publish"
MANAGE = "Manage"


class Format(StrEnum):
    """Output formats for data commands."""

    table = "table"
    json = "json"
    markdown = "markdown"


def finite(value: float | None) -> float | None:
    """Refuse nan and inf for a number option: a range check (``min=``) lets nan
    through, and a nan or infinite wait, budget or duration never ends."""
    import math

    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number")
    return value


class TableOrJson(StrEnum):
    """Formats for listing commands."""

    table = "table"
    json = "json"


ProjectOpt = Annotated[
    Path | None,
    typer.Option("--project", "-C", help="Project directory (default: the current directory)."),
]


BurstWaitOpt = Annotated[
    float | None,
    typer.Option(
        "--burst-wait",
        callback=finite,
        min=0,
        help="Hold a round up to S seconds while other work fills the CPUs (0: never; "
        "config burst_wait).",
    ),
]


ProfileDurationOpt = Annotated[
    float | None,
    typer.Option(
        "--profile-duration",
        callback=finite,
        min=0.1,
        help=f"With --profile: seconds each ref loops under py-spy (default {PROFILE_SECONDS:g}).",
    ),
]


AffinityOpt = Annotated[
    str | None,
    typer.Option(
        "--affinity",
        metavar="CPUS",
        help="Pin every timed worker process to these CPUs, e.g. 0 or 0-1,3; '' pins "
        "nothing (Linux; config affinity; default: not pinned).",
    ),
]


def refuse_stray_profile_duration(duration: float | None, profile: bool) -> None:
    """Refuse ``--profile-duration`` without ``--profile``, where it would do nothing."""
    if duration is not None and not profile:
        raise UsageError(
            "--profile-duration sets how long --profile samples; --profile is not given",
            "add --profile, or drop --profile-duration",
        )


def print_error(exc: PerfctlError) -> None:
    """Write ``Error:``/``Hint:`` lines to stderr (never a traceback)."""
    sys.stderr.write(f"Error: {one_line(exc.message)}\n")
    if exc.hint:
        sys.stderr.write(f"Hint: {one_line(exc.hint)}\n")
    sys.stderr.flush()


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where Ctrl-C would be so the same clean-up runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


SWALLOWED: list[int] = []  # signals received, in case the exception was swallowed


def _raise_terminated(signum: int, _frame: object) -> None:
    SWALLOWED.append(signum)
    raise Terminated(signum)


def _raise_interrupt(signum: int, _frame: object) -> None:
    SWALLOWED.append(signum)
    raise KeyboardInterrupt


def swallowed_signal() -> KeyboardInterrupt | None:
    """A stop signal whose exception was swallowed (it can land in an at-fork hook or a
    ``__del__``, where Python only prints "Exception ignored"), to honour it on the way out."""
    import signal

    if not SWALLOWED:
        return None
    return KeyboardInterrupt() if SWALLOWED[-1] == signal.SIGINT else Terminated(SWALLOWED[-1])


def stop_cleanly_on_signals() -> None:
    """Make SIGTERM and SIGHUP (CI cancels, closed terminals) stop like Ctrl-C.

    Without this they kill perfctl outright, leaving its workers (own sessions,
    so they miss the signal) running. A signal ignored at start (nohup) stays ignored.
    """
    import signal

    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, _raise_terminated)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _raise_interrupt)


def interrupted_code(exc: KeyboardInterrupt) -> int:
    """128 + the signal number: 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP."""
    return 128 + exc.signum if isinstance(exc, Terminated) else 130


def signal_note(exc: KeyboardInterrupt | None) -> str:
    """`` (SIGTERM)`` / `` (SIGHUP)`` for a Terminated, nothing for Ctrl-C."""
    import signal

    return f" ({signal.Signals(exc.signum).name})" if isinstance(exc, Terminated) else ""


def interrupted(exc: KeyboardInterrupt | None = None) -> None:
    """What Ctrl-C (or SIGTERM/SIGHUP) prints: nothing was lost."""
    sys.stderr.write(f"Error: interrupted{signal_note(exc)}\n")
    sys.stderr.write("Hint: everything completed was kept; re-run the command to resume\n")


def one_line(text: str) -> str:
    """Collapse newlines so an error stays on one line; no control or bidi characters."""
    from perfctl.render.escape import strip_unsafe

    return " ".join(strip_unsafe(text).split())


def guarded(fn: F) -> F:
    """Turn PerfctlError into Error/Hint output and its documented exit code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except PerfctlError as exc:
            print_error(exc)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt as exc:
            interrupted(exc)
            raise typer.Exit(interrupted_code(exc)) from None

    return wrapper  # type: ignore[return-value]


def emit(text: str) -> None:
    """Write data to stdout (a closed pipe, e.g. `| head`, is not an error)."""
    try:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        pass


def out_console() -> Any:
    """A rich Console on stdout; wide when piped, so tables are not squeezed."""
    from rich.console import Console

    console = Console(soft_wrap=False)
    if not console.is_terminal and "COLUMNS" not in __import__("os").environ:
        console = Console(soft_wrap=False, width=160)
    return console


def err_console() -> Any:
    """A rich Console on stderr; when stderr is not a terminal (a log, CI), lines are not
    wrapped at rich's default 80 columns, so notes next to a wide table stay whole."""
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_terminal:
        console = Console(stderr=True, soft_wrap=True)
    return console


def emit_listing(
    fmt: TableOrJson,
    records: list[dict[str, Any]],
    title: str,
    columns: tuple[str, ...],
    rows: list[tuple[Any, ...]],
) -> None:
    """Print a listing as JSON records (stdout only) or as a rich table."""
    if fmt == TableOrJson.json:
        import json

        emit(json.dumps(records, indent=2))
        return
    from rich.table import Table

    from perfctl.render.tables import esc

    table = Table(title=esc(title), title_justify="left")
    # The first column names each row (an id that `report ID` or `--comparison ID`
    # takes): never wrapped or squeezed, however narrow the terminal.
    width = max((len(str(r[0])) for r in rows), default=0)
    for i, col in enumerate(columns):
        table.add_column(col, no_wrap=i == 0, min_width=width if i == 0 else None)
    for row in rows:
        table.add_row(*(esc(x) for x in row))
    out_console().print(table)
