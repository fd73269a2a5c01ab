"""The ``perfctl`` command line: the typer app, its global callback and ``main``.

Every command module in this package exposes ``register(app)``; heavy imports
(plotly, jinja2, httpx) happen inside command bodies, so ``--help`` stays fast.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import TYPE_CHECKING

import typer

from perfctl import __version__
from perfctl.cli import common

if TYPE_CHECKING:
    import click


def _no_placeholder_for_flags() -> None:
    """Keep ``--help`` from showing ``--version <bool>``: a plain flag takes no value.

    typer (0.2x with its vendored click) gives every option a type placeholder in
    the rich help, flags included; a flag gets none here. Counters and options
    that take a value keep theirs. Older typer has no such hook and needs none.
    """
    from typer.core import TyperOption

    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None or getattr(shown, "_perfctl_flags", False):
        return

    def display_type_rich(self: TyperOption, ctx: object) -> str | None:
        if getattr(self, "is_bool_flag", False) and self.metavar is None:
            return None
        return shown(self, ctx)

    display_type_rich._perfctl_flags = True  # type: ignore[attr-defined]
    # setattr: the attribute exists only in the typer releases that need the hook.
    setattr(TyperOption, "display_type_rich", display_type_rich)  # noqa: B010


_no_placeholder_for_flags()

app = typer.Typer(
    name="perfctl",
    help="Benchmark and profile a Python project across git refs, with sound statistics.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        common.emit(f"perfctl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Show the version and exit."
    ),
) -> None:
    """perfctl: compare, profile, report, plan and gate performance from one tool.

    Exit codes: 0 ok, 1 regression found (when gating), 2 usage/config error,
    3 build/regime/tool failure.
    """


def _register_all() -> None:
    if app.registered_commands:  # registered already, in this process
        return
    from perfctl.cli import bisect, compare, demo, measure, plan, profile, publish, report

    for module in (measure, compare, bisect, profile, report, plan, publish, demo):
        module.register(app)


@functools.cache
def _command() -> click.Command:
    """The click command tree, built once per process: typer evaluates every command's
    type hints to build it (~50 ms), and a process that calls main() again (the cli
    tests do, hundreds of times) need not pay that again."""
    _register_all()
    return typer.main.get_command(app)


def _usage_error(exc: Exception) -> int:
    msg = getattr(exc, "format_message", lambda: str(exc))()
    ctx = getattr(exc, "ctx", None)
    cmd = ctx.command_path if ctx is not None else "perfctl"
    sys.stderr.write(f"Error: {common.one_line(msg)}\n")
    sys.stderr.write(f"Hint: see `{cmd} --help`\n")
    return int(getattr(exc, "exit_code", 2) or 2)


def main() -> None:
    """Console-script entry point with uniform error handling."""
    command = _command()
    common.stop_cleanly_on_signals()
    from perfctl.measure import procs

    procs.sweep()  # what a killed perfctl left: its children's groups, its scratch folders
    try:
        # typer's app(...) builds this same command and calls it; its only other work
        # is pretty tracebacks, which perfctl turns off.
        rv = command(standalone_mode=False)
        # A signal whose exception Python swallowed is still a stop, unless the command
        # already ended on it with its own message and code (profile's, say).
        lost = common.swallowed_signal()
        if lost is not None and rv != common.interrupted_code(lost):
            raise lost
    except KeyboardInterrupt as exc:
        common.interrupted(exc)
        code = common.interrupted_code(exc)
    except BrokenPipeError:
        # Output piped into e.g. `head`: silence the closed stdout.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        code = 0
    except typer.Exit as exc:
        code = exc.exit_code
    except typer.Abort:
        sys.stderr.write("Error: aborted\n")
        code = 130
    except Exception as exc:  # noqa: BLE001
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            code = _usage_error(exc)
        elif os.environ.get("PERFCTL_DEBUG"):
            raise
        else:
            # A bug in perfctl is a tool failure (3), never "regression found" (1).
            sys.stderr.write(
                f"Error: internal error: {type(exc).__name__}: {common.one_line(str(exc))}\n"
            )
            sys.stderr.write(
                "Hint: this is a perfctl bug; re-run with PERFCTL_DEBUG=1 for the "
                "traceback and report it\n"
            )
            code = 3
    else:
        code = rv if isinstance(rv, int) else 0
    sys.exit(code)
