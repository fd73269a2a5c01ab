"""Whether a regime's timed code runs other processes (what ``--pairing auto`` asks).

Same-process pairing cancels what the two refs share inside one worker process. For a
regime that talks to a child process (a pipe round trip, a subprocess per call) that
includes what a ref changes in the process's environment (a helper process it starts),
so a real change can cancel too: on the demo project pairing read a 22-43% speed-up of
such regimes as none (benchmarks/README.md, "real changes under each pairing"). The
calibration worker watches its timed calls with :class:`Watch`; ``--pairing auto``
keeps a regime that started processes in separate worker processes. Calibration runs
base alone, and only a few calls, so under ``auto`` the duo worker watches too: a
process seen beside its timed calls (head starts one where base did not, or base starts
one later on) ends the duo, and the regime is measured apart.

Import-light: it runs inside every calibration and duo worker.
"""

from __future__ import annotations

import os
import resource

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


def live_children(pid: int | None = None) -> int:
    """How many processes are children of ``pid`` (default: this one) right now."""
    pid = os.getpid() if pid is None else pid
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    found = 0
    readable = False
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as fh:
                found += len(fh.read().split())
            readable = True
        except OSError:
            continue
    return found if readable else _scan_children(pid)


def _scan_children(pid: int) -> int:
    # Kernels without CONFIG_PROC_CHILDREN: every process's parent, from its stat line.
    found = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: fields follow its last ")".
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[1] == str(pid):
            found += 1
    return found


def _reaped_faults() -> int:
    # Every process that ran and was waited for adds page faults to RUSAGE_CHILDREN,
    # even one too short to show any CPU time.
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_minflt + usage.ru_majflt


class Watch:
    """Notes whether processes ran since it was made (checked between timed calls)."""

    def __init__(self) -> None:
        self.faults = _reaped_faults()
        self.started = False

    def check(self) -> bool:
        """Whether a child is alive now, or one ran and was reaped, since the start."""
        if not self.started:
            self.started = live_children() > 0 or _reaped_faults() > self.faults
        return self.started

    def wrap(self, time_func: Callable[[int], float]) -> Callable[[int], float]:
        """A pyperf time function, checked after each call (outside its own timing)."""

        def watched(loops: int) -> float:
            seconds = time_func(loops)
            self.check()
            return seconds

        return watched
