"""Waiting out bursts: hold the next round while other work fills the CPUs.

A round measured into a burst of other work (a neighbour's test suite, a build on
the same runner) gives both of its processes a slower machine than the rounds around
it, and a burst that hits one side of an ABBA pair more than the other reads as a
change. Before each round, :class:`Quiet` samples how many CPUs other work keeps
busy (``/proc/stat``, a short window: perfctl itself sleeps while it samples) and,
while that leaves fewer than 1.75 CPUs free (on a 1-CPU machine: 0.75), waits, up to ``limit`` seconds per round. A burst that outlasts the limit is not a burst: the load is steady, and
the regime's remaining rounds are measured without waiting (waiting would only use
up the time budget). The seconds held are given back to the time budget, which is
for measuring.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from perfctl.caveats import Caveat, WarningKind
from perfctl.measure.executor import Executor
from perfctl.model import Fact, Notice

POLL = 1.0  # seconds between samples while held
# Hold while fewer CPUs than this are free (at most the machine's count, less a
# quarter): one for the worker and one for what it talks to (a child process, the
# kernel's work for its pipes) or perfctl itself. Measured: one competitor on 2 CPUs
# reads 1.0-1.2 busy between rounds, and a two-process regime's means were then
# bimodal; three quarters of a CPU free never held there.
WANTED = 2.0
BLIND = "--burst-wait: /proc/stat shows no load for the workers' CPUs here: rounds are not held"


@dataclass
class Quiet:
    """The bursts waited out over one comparison (shared by its regimes)."""

    limit: float  # seconds one round may be held; 0 never holds
    held: float = 0.0  # seconds held in all
    rounds: int = 0  # rounds that were held
    steady: list[str] = field(default_factory=list)  # regimes measured into steady load
    busiest: float = 0.0  # the most CPUs other work kept busy while a round was held
    cpus: tuple[int, ...] = ()  # the CPUs the workers run on (--affinity); () all
    blind: bool = False  # the platform shows no CPU load (no /proc/stat): never holds

    def hold(self, executor: Executor, name: str, say: Callable[[str], None], left: float) -> float:
        """Wait until the CPUs are free enough or the limit passes (never more than a
        quarter of the ``left`` seconds before the regime's timeout); the seconds
        spent, sampling included."""
        limit = min(self.limit, max(0.0, left / 4))
        if limit <= 0 or name in self.steady or self.blind:
            return 0.0
        start = executor.now()
        slept = False
        while True:
            busy, cpus = executor.busy(self.cpus)
            if busy is None or not cpus:
                self.blind = True
                say(Fact(BLIND))
                break
            if cpus - busy >= min(WANTED, cpus) - 0.25:
                break
            waited = executor.now() - start
            self.busiest = max(self.busiest, busy)
            if waited >= limit:
                self.steady.append(name)
                say(
                    Notice(
                        f"{name}: other work kept {busy:.1f} of {cpus} CPUs busy for "
                        f"{waited:.0f} s: measuring into it"
                    )
                )
                break
            say(f"{name}: waiting for a quiet moment ({busy:.1f} of {cpus} CPUs busy)")
            executor.sleep(min(POLL, limit - waited))
            slept = True
        elapsed = executor.now() - start  # the samples too: none of it was measuring
        if slept:
            self.held += elapsed
            self.rounds += 1
        return elapsed

    def warning(self) -> Caveat | None:
        """What the comparison says about its waiting, if anything happened."""
        if not self.rounds and not self.steady:
            return None
        text = (
            f"waited {self.held:.0f} s in {self.rounds} round(s) for bursts of other work "
            f"to pass (up to {self.busiest:.1f} CPUs busy)"
        )
        if self.steady:
            names = ", ".join(self.steady[:5]) + (" …" if len(self.steady) > 5 else "")
            text += (
                f"; the load outlasted --burst-wait {self.limit:g} s for {names}, "
                "so their later rounds were measured into it"
            )
        return Caveat(text, WarningKind.HELD_FOR_BURSTS)
