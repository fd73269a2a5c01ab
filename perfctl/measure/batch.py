"""Several worker processes at once, for measurements that load cannot change.

Counters (callgrind's instructions, tracemalloc's blocks) count the same whether
the machine is idle or busy, so their processes need not take turns as wall-time
workers must: they run side by side, up to one per CPU perfctl may use. Each
child goes through :func:`procs.group` as every other child does (own process
group, killed with perfctl, on timeout, Ctrl-C or any error).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from perfctl.measure import procs

POLL_S = 0.02  # how often running children are looked at


@dataclass(frozen=True)
class Command:
    """One process of a batch: its argv, where it runs, its own log and its time limit."""

    argv: tuple[str, ...]
    cwd: Path
    env: dict[str, str]
    log: Path
    timeout: float


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask; ``taskset`` narrows it)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not Linux
        return max(os.cpu_count() or 1, 1)


def _start(command: Command, stack: contextlib.ExitStack) -> subprocess.Popen[bytes]:
    command.log.parent.mkdir(parents=True, exist_ok=True)
    out = stack.enter_context(open(command.log, "ab"))
    return stack.enter_context(
        procs.group(
            command.argv,
            cwd=command.cwd,
            env=command.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    )


def call_all(
    commands: Sequence[Command],
    *,
    limit: int,
    stop: Callable[[int | None], bool] = lambda rc: False,
    done: Callable[[int], None] | None = None,
) -> dict[int, int | None]:
    """Run the commands in order, at most ``limit`` at once: index -> exit status.

    None is a timeout. ``done`` hears each index as it finishes. Once ``stop`` is
    true of a status no further command starts (those running finish); the ones
    never started are absent.
    """
    results: dict[int, int | None] = {}
    running: dict[int, tuple[subprocess.Popen[bytes], float, contextlib.ExitStack]] = {}
    queue = list(range(len(commands)))[::-1]
    halted = False
    try:
        while running or (queue and not halted):
            while queue and not halted and len(running) < max(limit, 1):
                i = queue.pop()
                with contextlib.ExitStack() as starting:  # closed here if the start fails
                    proc = _start(commands[i], starting)
                    running[i] = (proc, time.monotonic(), starting.pop_all())
            time.sleep(POLL_S)
            for i, (proc, started, stack) in list(running.items()):
                rc = proc.poll()
                if rc is None and time.monotonic() - started < commands[i].timeout:
                    continue
                stack.close()  # kills what is left of the group (all of it on a timeout)
                del running[i]
                results[i] = rc
                halted = halted or stop(rc)
                if done:
                    done(i)
    finally:
        for _, _, stack in running.values():
            stack.close()
    return results
