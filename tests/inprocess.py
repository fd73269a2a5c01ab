"""The real perfctl CLI run in the test's own process, for the cli tier.

A `python -m perfctl` subprocess costs a Python start-up and perfctl's imports,
~0.25 s of every call and a third of the cli tier's time. ``run`` calls the same
entry point, ``perfctl.cli.app.main()``, with what a subprocess would have of its
own: argv, environment (and the temporary folder it names), working directory,
signal handlers, file descriptors 1 and 2 (the git and tools it starts write there
too), and Python's own ways of reporting on stderr (warnings, log records without a
handler, exceptions Python can only print), which pytest otherwise collects itself.
All are put back afterwards, each on its own, whatever the command did.
What a process owns beyond that (its imports, its locks) is no test's business here:
such a test is marked ``fresh_process`` and gets a real subprocess. Usage lines name
the program `perfctl`, as the installed console script does (`python -m perfctl` in a
subprocess). A command that hangs is stopped by pytest-timeout (pyproject), as
``BaseException``, which perfctl's error handling does not catch.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

# Set for each test by tests/tiers.py before its fixtures: a cli-tier test not marked
# fresh_process.
ENABLED = [False]

_STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# Python's filters when started without -W or PYTHONWARNINGS (pytest sets its own).
_DEFAULT_FILTERS: list[tuple[str, type[Warning], str]] = [
    ("default", DeprecationWarning, "__main__"),
    ("ignore", DeprecationWarning, ""),
    ("ignore", PendingDeprecationWarning, ""),
    ("ignore", ImportWarning, ""),
    ("ignore", ResourceWarning, ""),
]


def run(
    argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """``argv`` (``python -m perfctl ARGS``) run by ``main()`` in this process.

    ``timeout`` is pytest-timeout's here (see the module's docstring).
    """
    from perfctl.cli import app

    code: object = 0
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        with contextlib.ExitStack() as stack:  # put back in reverse order, each on its own
            stack.enter_context(_own_process(cwd, env, ["perfctl", *argv[3:]]))
            stack.enter_context(_own_streams(out.fileno(), err.fileno()))
            stack.enter_context(_python_reports())
            try:
                app.main()
            except SystemExit as exc:
                code = exc.code
        if isinstance(code, str):  # sys.exit("message"): printed, exit status 1
            err.write(f"{code}\n".encode())
            code = 1
        stdout, stderr = (_text(f) for f in (out, err))
    returncode = 0 if code is None else int(code)  # type: ignore[call-overload]
    return subprocess.CompletedProcess(argv, returncode, stdout, stderr)


def _text(f: Any) -> str:
    """What ``subprocess.run(text=True)`` gives: strict UTF-8, universal newlines."""
    f.seek(0)
    return f.read().decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")


@contextlib.contextmanager
def _own_process(cwd: Path, env: dict[str, str], argv: list[str]) -> Iterator[None]:
    """argv, environment, temporary folder, working directory and stop signals."""
    from perfctl.cli import common

    saved_env, saved_cwd, saved_argv = dict(os.environ), os.getcwd(), sys.argv
    saved_handlers = {sig: signal.getsignal(sig) for sig in _STOPS}
    saved_tempdir = tempfile.tempdir
    try:
        _replace_environ(env)
        tempfile.tempdir = None  # re-read from TMPDIR, as a new process would
        os.chdir(cwd)
        sys.argv = argv
        common.SWALLOWED.clear()
        yield
    finally:
        for restore in (
            lambda: [signal.signal(sig, h) for sig, h in saved_handlers.items()],
            common.SWALLOWED.clear,
            lambda: setattr(sys, "argv", saved_argv),
            lambda: os.chdir(saved_cwd),
            lambda: setattr(tempfile, "tempdir", saved_tempdir),
            lambda: _replace_environ(saved_env),
        ):
            with contextlib.suppress(Exception):
                restore()


def _replace_environ(env: dict[str, str]) -> None:
    os.environ.clear()
    os.environ.update(env)


@contextlib.contextmanager
def _own_streams(out: int, err: int) -> Iterator[None]:
    """File descriptors 1 and 2, and sys.stdout/sys.stderr over them."""
    saved_streams = sys.stdout, sys.stderr
    for stream in saved_streams:
        with contextlib.suppress(Exception):
            stream.flush()
    saved_fds = os.dup(1), os.dup(2)
    try:
        os.dup2(out, 1)
        os.dup2(err, 2)
        sys.stdout = _stream(1, "strict")
        sys.stderr = _stream(2, "backslashreplace")
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # the command may have closed it
                stream.flush()
        sys.stdout, sys.stderr = saved_streams
        for fd, saved in zip((1, 2), saved_fds, strict=True):
            os.dup2(saved, fd)
            os.close(saved)


def _stream(fd: int, errors: str) -> TextIO:
    return open(fd, "w", encoding="utf-8", errors=errors, closefd=False)  # noqa: SIM115


@contextlib.contextmanager
def _python_reports() -> Iterator[None]:
    """Warnings, unhandled log records and unraisable exceptions go to stderr, as in a
    process of its own, not to pytest's collectors."""

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    saved_hooks = sys.unraisablehook, threading.excepthook
    with warnings.catch_warnings():
        warnings.resetwarnings()
        for action, category, module in reversed(_DEFAULT_FILTERS):
            warnings.filterwarnings(action, category=category, module=module)  # type: ignore[arg-type]
        warnings.showwarning = show
        try:
            root.handlers[:] = []  # so logging's last resort writes to sys.stderr
            root.setLevel(logging.WARNING)
            sys.unraisablehook = sys.__unraisablehook__
            threading.excepthook = threading.__excepthook__
            yield
        finally:
            root.handlers[:] = saved_handlers
            root.setLevel(saved_level)
            sys.unraisablehook, threading.excepthook = saved_hooks
