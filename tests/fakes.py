"""A scripted executor: synthetic process values instead of pyperf processes.

:class:`FakeExecutor` follows :class:`perfctl.measure.executor.Executor`. Each
(ref, regime) has a :class:`Dist`: every worker process draws one process
factor (the noise between processes, the unit of replication) and its values
around it. The clock is fake too: each process advances it by ``seconds``, so
budgets and timeouts are scripted, never waited for. It drives the pure logic
of compare, sequential sampling, resume, ci and plan in unit tests; the
end-to-end tests keep the real executor.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from perfctl.config import Config
from perfctl.envs import Target
from perfctl.errors import RegimeLoadError
from perfctl.measure import runner
from perfctl.measure.executor import DuoSpec, Job, ProcessSpec
from perfctl.model import RefInfo, RegimeInfo

REF_VAR = "PERFCTL_FAKE_REF"  # which ref a worker belongs to (Job carries only the side)


@dataclass(frozen=True)
class Dist:
    """Per-op seconds of one regime on one ref: the process mean and its spreads."""

    mean: float
    cv: float = 0.02  # between processes
    within: float = 0.002  # between the values of one process


class Interrupted(Exception):
    """Raised by the fake where a real comparison would be killed."""


@dataclass
class FakeExecutor:
    """Scripted processes for each (ref, regime); ``calls`` records what ran."""

    dists: dict[tuple[str, str], Dist]
    seed: int = 0
    seconds: float = 0.05  # fake clock time per process
    timeout: float | None = None  # the regimes' own timeout
    family: str = "fake"
    baselines: dict[str, str] = field(default_factory=dict)  # regime -> its baseline regime
    fail: dict[tuple[str, str], str] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)  # ref -> probe error
    spawning: set[str] = field(default_factory=set)  # regimes whose calls start processes
    unshared: dict[str, str] = field(default_factory=dict)  # regime -> why a duo worker fails
    # regime -> the first duo round whose watch (--pairing auto) sees another process:
    # head starts processes where base, which calibration watched, did not.
    head_spawns: dict[str, int] = field(default_factory=dict)
    interrupt_at: int | None = None  # raise Interrupted at this worker process
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # (kind, ref, regime)
    clock: float = 0.0
    loads: tuple[float, ...] = (0.5,)  # load averages read in turn (the last one repeats)
    cpus: int = 2
    load_reads: int = 0
    busy_cpus: tuple[float | None, ...] = (0.0,)  # CPUs other work keeps busy, in turn
    busy_reads: int = 0
    busy_asked: list[tuple[int, ...]] = field(default_factory=list)  # the CPUs sampled
    pinned: set[tuple[int, ...]] = field(default_factory=set)  # workers' --affinity seen
    slept: float = 0.0
    bands: dict[str, float] = field(default_factory=dict)  # regime -> @regime(threshold=)
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def regimes(self, ref: str) -> list[str]:
        """The regime names defined for ``ref``, in the order given."""
        return [name for r, name in self.dists if r == ref]

    def rounds(self, kind: str = "process") -> int:
        """Worker processes of one kind that ran (a process round is two)."""
        return sum(1 for k, _, _ in self.calls if k == kind)

    def now(self) -> float:
        """The fake clock."""
        return self.clock

    def load(self) -> tuple[float | None, int | None]:
        """The scripted load averages, never the real machine's."""
        reading = self.loads[min(self.load_reads, len(self.loads) - 1)]
        self.load_reads += 1
        return reading, self.cpus

    def busy(self, cpus: tuple[int, ...] = ()) -> tuple[float | None, int | None]:
        """The scripted CPUs busy (the last one repeats); a sample takes 0.25 s.

        Pinned (``cpus``), the count is theirs, as the real one's is."""
        reading = self.busy_cpus[min(self.busy_reads, len(self.busy_cpus) - 1)]
        self.busy_reads += 1
        self.busy_asked.append(cpus)
        self.clock += 0.25
        return reading, len(cpus) if cpus else self.cpus

    def sleep(self, seconds: float) -> None:
        """Moves the fake clock on."""
        self.slept += seconds
        self.clock += seconds

    def prepare(
        self, config: Config, ref: str, *, rebuild: bool, log: Callable[[str], None]
    ) -> Target:
        """A target in the current interpreter; a real commit when the root is a repo."""
        del rebuild
        log(f"{ref}: fake environment")
        info = _ref_info(config.root, ref)
        env = {"PYTHONPATH": str(config.root), REF_VAR: ref}
        return Target(info, Path(sys.executable), config.root, env)

    def probe(
        self, target: Target, files: Sequence[Path], inherit: tuple[str, ...] = ()
    ) -> list[RegimeInfo]:
        """One RegimeInfo per regime scripted for the target's ref."""
        ref = target.env[REF_VAR]
        if ref in self.broken:
            raise RegimeLoadError(self.broken[ref], "fix the regimes file")
        source = str(files[0]) if files else ""
        return [
            replace(
                _info(name, self.family, self.baselines.get(name), source, self.timeout),
                threshold=self.bands.get(name),
            )
            for name in self.regimes(ref)
        ]

    def calibrate(self, job: Job, *, min_time: float, timeout: float) -> runner.Outcome:
        """One loop per value, or the scripted failure."""
        ref = job.worker.env[REF_VAR]
        self.pinned.add(job.worker.affinity)
        self.calls.append(("calibrate", ref, job.regime.name))
        reason = self.fail.get((ref, job.regime.name))
        if reason:
            return runner.Outcome(ok=False, reason=reason)
        return runner.Outcome(True, loops=1, spawned=job.regime.name in self.spawning)

    def run_process(self, job: Job, spec: ProcessSpec, *, timeout: float) -> runner.Outcome:
        """One process's values drawn from the (ref, regime) distribution."""
        ref, name = job.worker.env[REF_VAR], job.regime.name
        self.pinned.add(job.worker.affinity)
        self._tick("process", ref, name)
        reason = self.fail.get((ref, name))
        if reason:
            return runner.Outcome(ok=False, reason=reason)
        values = self._draw(self.dists[ref, name], self._factor(ref, name), spec.values)
        return runner.Outcome(ok=True, processes=(values,), loops=spec.loops)

    def run_duo(
        self,
        workers: dict[str, runner.Worker],
        info: RegimeInfo,
        spec: DuoSpec,
        *,
        log: Path,
        timeout: float,
    ) -> dict[str, list[float]] | str:
        """Both sides in one process: they share its process factor."""
        refs = {s: w.env[REF_VAR] for s, w in workers.items()}
        self.pinned.update(w.affinity for w in workers.values())
        self._tick("duo", refs["base"], info.name)
        if info.name in self.unshared:
            return self.unshared[info.name]
        if spec.watch and spec.n >= self.head_spawns.get(info.name, spec.n + 1):
            return runner.Spawned(
                "another process ran beside the timed calls (calibration saw none)"
            )
        factor = self._factor(refs["base"], info.name)
        return {
            s: list(self._draw(self.dists[refs[s], info.name], factor, spec.values)) for s in refs
        }

    def _tick(self, kind: str, ref: str, name: str) -> None:
        if self.interrupt_at is not None and len(self.calls) >= self.interrupt_at:
            raise Interrupted(f"interrupted before {kind} {ref} {name}")
        self.calls.append((kind, ref, name))
        self.clock += self.seconds

    def _factor(self, ref: str, name: str) -> float:
        return self.rng.lognormvariate(0.0, self.dists[ref, name].cv)

    def _draw(self, d: Dist, factor: float, n: int) -> tuple[float, ...]:
        return tuple(d.mean * factor * self.rng.lognormvariate(0.0, d.within) for _ in range(n))


def _ref_info(root: Path, ref: str) -> RefInfo:
    """The real commit in a git repo; otherwise no sha (no resume, no commit list)."""
    if (root / ".git").exists():
        from perfctl.git import refs as gitrefs

        return gitrefs.resolve_ref(root, ref)
    return RefInfo(ref=ref, sha="")


def _info(
    name: str, family: str, baseline: str | None, source: str, timeout: float | None
) -> RegimeInfo:
    return RegimeInfo(
        name=name,
        family=family,
        params={},
        ops=1,
        baseline=baseline,
        requires=(),
        description=f"scripted {name}",
        source=source,
        timeout=timeout,
    )
