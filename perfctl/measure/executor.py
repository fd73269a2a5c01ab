"""The executor: everything a comparison runs outside perfctl's own process.

:func:`perfctl.jobs.compare.compare_refs` and the sampling loops
(:mod:`perfctl.measure.interleave`, :mod:`perfctl.measure.duo`) never start a
process themselves; they ask an :class:`Executor` to build a ref's environment,
probe its regimes, run one calibration process, one worker process for one side
of one regime or one same-process (duo) worker, tell the time, read the
machine's load and wait.
:class:`PyperfExecutor` is the real one (uv environments, the probe worker,
pyperf worker processes, the monotonic clock); the unit tests script a fake one
(``tests/fakes.py``), so the orchestration logic (sequential sampling, resume,
verdicts, gating, plan judging) runs in milliseconds.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from perfctl.measure import runner
from perfctl.model import RegimeInfo

if TYPE_CHECKING:
    from perfctl.config import Config
    from perfctl.envs import Target


@dataclass(frozen=True)
class Job:
    """One side of one regime: the worker to start, the regime, the log it writes."""

    side: str  # "base" or "head"
    worker: runner.Worker
    regime: RegimeInfo
    log: Path


@dataclass(frozen=True)
class ProcessSpec:
    """One worker process: fixed loop count, warmups and values; where it writes."""

    loops: int
    warmups: int
    values: int
    min_time: float
    out: Path  # pyperf JSON
    metrics: Path  # JSON lines of regime metrics (appended)


@dataclass(frozen=True)
class DuoSpec:
    """One same-process worker: round ``n`` (which side goes first), its values."""

    loops: int
    values: int
    n: int
    tmp: Path  # where the spec and output JSON go
    clock: str  # "wall", "cpu" or "busy" (Schedule.clock)
    watch: bool = False  # stop at another process (runner.Spawned): --pairing auto


class Executor(Protocol):
    """Runs what a comparison needs outside perfctl's process; the seam tests fake."""

    def now(self) -> float:
        """Seconds on a monotonic clock (budgets and deadlines are read from it)."""
        ...

    def load(self) -> tuple[float | None, int | None]:
        """The 1-minute load average and the CPU count (either None where unknown)."""
        ...

    def busy(self, cpus: tuple[int, ...] = ()) -> tuple[float | None, int | None]:
        """How many of ``cpus`` (default: all perfctl may use) other work kept busy over
        a short sample, and how many CPUs that is (None where it cannot be seen)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait (the clock of :meth:`now` moves on)."""
        ...

    def prepare(
        self, config: Config, ref: str, *, rebuild: bool, log: Callable[[str], None]
    ) -> Target:
        """Check out ``ref`` and build (or reuse) its environment."""
        ...

    def probe(
        self, target: Target, files: Sequence[Path], inherit: tuple[str, ...]
    ) -> list[RegimeInfo]:
        """The regimes the files define in ``target``'s environment."""
        ...

    def calibrate(self, job: Job, *, min_time: float, timeout: float) -> runner.Outcome:
        """One calibration process: the loop count in ``Outcome.loops``."""
        ...

    def run_process(self, job: Job, spec: ProcessSpec, *, timeout: float) -> runner.Outcome:
        """One worker process: its values in ``Outcome.processes``."""
        ...

    def run_duo(
        self,
        workers: dict[str, runner.Worker],
        info: RegimeInfo,
        spec: DuoSpec,
        *,
        log: Path,
        timeout: float,
    ) -> dict[str, list[float]] | str:
        """One process timing both refs: per-op values of each side, or why it failed."""
        ...


class PyperfExecutor:
    """The real executor: uv environments, the probe worker, pyperf worker processes."""

    def now(self) -> float:
        """time.monotonic()."""
        return time.monotonic()

    def load(self) -> tuple[float | None, int | None]:
        """The operating system's load average and CPU count."""
        from perfctl.measure.machine import load_average

        return load_average(), os.cpu_count()

    def busy(self, cpus: tuple[int, ...] = ()) -> tuple[float | None, int | None]:
        """/proc/stat over 0.2 s."""
        from perfctl.measure.machine import allowed_cpus, cpus_busy

        chosen = cpus or tuple(sorted(allowed_cpus()))
        return cpus_busy(chosen), len(chosen)

    def sleep(self, seconds: float) -> None:
        """time.sleep."""
        time.sleep(seconds)

    def prepare(
        self, config: Config, ref: str, *, rebuild: bool, log: Callable[[str], None]
    ) -> Target:
        """envs.prepare_target."""
        from perfctl import envs

        return envs.prepare_target(config, ref, rebuild=rebuild, log=log)

    def probe(
        self, target: Target, files: Sequence[Path], inherit: tuple[str, ...]
    ) -> list[RegimeInfo]:
        """discovery.probe in the target's interpreter (``inherit``: environment names kept)."""
        from perfctl.regimes import discovery

        t = target
        return discovery.probe(t.python, files, cwd=t.cwd, env=t.env, inherit=inherit)

    def calibrate(self, job: Job, *, min_time: float, timeout: float) -> runner.Outcome:
        """runner.calibrate."""
        return runner.calibrate(
            job.worker, job.regime, min_time=min_time, log=job.log, timeout=timeout
        )

    def run_process(self, job: Job, spec: ProcessSpec, *, timeout: float) -> runner.Outcome:
        """runner.run_process."""
        return runner.run_process(
            job.worker,
            job.regime,
            loops=spec.loops,
            warmups=spec.warmups,
            values=spec.values,
            min_time=spec.min_time,
            out=spec.out,
            metrics=spec.metrics,
            log=job.log,
            timeout=timeout,
        )

    def run_duo(
        self,
        workers: dict[str, runner.Worker],
        info: RegimeInfo,
        spec: DuoSpec,
        *,
        log: Path,
        timeout: float,
    ) -> dict[str, list[float]] | str:
        """runner.run_duo."""
        return runner.run_duo(
            workers,
            info,
            loops=spec.loops,
            values=spec.values,
            tmp=spec.tmp,
            n=spec.n,
            log=log,
            timeout=timeout,
            clock=spec.clock,
            watch=spec.watch,
        )


PYPERF: Executor = PyperfExecutor()
