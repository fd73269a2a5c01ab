"""The real perfctl CLI run in the test's own process, for the cli tier.

A `python -m perfctl` subprocess costs a Python start-up and perfctl's imports,
~0.25 s of every call and a third of the cli tier's time. ``run`` calls the same
entry point, ``perfctl.cli.app.main()``, with what a subprocess would have of its
own: argv, environment, working directory, signal handlers, and file descriptors 1
and 2 (the git and tools it starts write there too); all are put back afterwards.
What a process owns beyond that (its imports, its locks) is no test's business here:
such a test is marked ``fresh_process`` and gets a real subprocess. Usage lines name
the program `perfctl`, as the installed console script does (`python -m perfctl` in a
subprocess).
"""

from __future__ import annotations

import faulthandler
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

# Set per test by tests/tiers.py: a cli-tier test not marked fresh_process.
ENABLED = [False]

_STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run(
    argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """``argv`` (``python -m perfctl ARGS``) run by ``main()`` in this process."""
    from perfctl.cli import app, common

    saved_env, saved_cwd, saved_argv = dict(os.environ), os.getcwd(), sys.argv
    saved_handlers = {sig: signal.getsignal(sig) for sig in _STOPS}
    saved_streams = sys.stdout, sys.stderr
    for stream in saved_streams:
        stream.flush()
    saved_fds = os.dup(1), os.dup(2)
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    code: object = 0
    try:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        sys.argv = ["perfctl", *argv[3:]]
        common.SWALLOWED.clear()
        # A hung command fails this worker loudly, as a subprocess's timeout would, its
        # stacks shown on the stderr that was the test's.
        faulthandler.dump_traceback_later(timeout, exit=True, file=saved_fds[1])
        try:
            app.main()
        except SystemExit as exc:
            code = exc.code
    finally:
        faulthandler.cancel_dump_traceback_later()
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = saved_streams
        os.dup2(saved_fds[0], 1)
        os.dup2(saved_fds[1], 2)
        for fd in saved_fds:
            os.close(fd)
        for sig, handler in saved_handlers.items():
            signal.signal(sig, handler)
        common.SWALLOWED.clear()
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    if isinstance(code, str):  # sys.exit("message"): printed, exit status 1
        err.write(f"{code}\n".encode())
        code = 1
    returncode = 0 if code is None else int(code)  # type: ignore[call-overload]
    texts = []
    for f in (out, err):
        f.seek(0)
        texts.append(f.read().decode("utf-8", "replace").replace("\r\n", "\n"))
        f.close()
    return subprocess.CompletedProcess(argv, returncode, texts[0], texts[1])
