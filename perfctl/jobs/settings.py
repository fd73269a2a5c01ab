"""Compare's options bundle: one CompareSettings, parsed once from flags, config and preset.

`compare`, `ci`, `plan update` and `bisect` build theirs with :func:`settings_for`
(the demo has its own two, `jobs.demo.demo_settings`). The presets here are compare's (rounds of interleaved
processes); `perfctl run`'s presets are pyperf's process × value counts
(``measure.runner``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from perfctl.config import Config
from perfctl.errors import UsageError
from perfctl.jobs.shard import Shard
from perfctl.measure import counters
from perfctl.measure.interleave import Schedule


@dataclass(frozen=True)
class CompareSettings:
    """Precision, selection and decision settings of one comparison."""

    schedule: Schedule = Schedule()
    alpha: float = 0.05
    confirm: bool = False
    rebuild: bool = False
    regimes: tuple[str, ...] = ()  # --regimes paths
    regimes_from: str | None = None
    globs: tuple[str, ...] = ()
    family: str | None = None
    subjects: tuple[tuple[str, str], ...] = ()
    lock_wait: float = 600.0
    name: str = "default"
    shard: Shard | None = None  # --shard K/N: measure only this shard's regimes
    threshold_given: bool = False  # --threshold on the command line (wins over a stored band)

    @property
    def threshold(self) -> float:
        """The noise band (relative change)."""
        return self.schedule.threshold


# Presets. Cost per regime on a 2-core VM at ~0.25 s per process: fast ≈ 3 s,
# default 3–15 s (stops once the answer is clear), rigorous 10–60 s.
COMPARE_FAST = CompareSettings(
    schedule=Schedule(rounds=6, max_rounds=6, values=2, time_budget=10), name="fast"
)


# Default: 10 rounds, then sequential sampling (one more round per check) up to 80 rounds
# or 60 s of measuring per regime, whichever comes first: ~95% power for a 5% change at
# a process CV of 5% (simulated; see benchmarks/README.md for the measured figure).
COMPARE_DEFAULT = CompareSettings()


COMPARE_RIGOROUS = CompareSettings(
    schedule=Schedule(rounds=20, max_rounds=80, time_budget=240), name="rigorous"
)


def settings_for(
    *,
    config: Config | None = None,
    fast: bool = False,
    rigorous: bool = False,
    rounds: int | None = None,
    max_rounds: int | None = None,
    values: int | None = None,
    min_time: float | None = None,
    time_budget: float | None = None,
    threshold: float | None = None,
    alpha: float | None = None,
    order: str = "abba",
    seed: int = 0,
    pairing: str = "process",
    clock: str = "wall",
    measure: str = "time",
    burst_wait: float | None = None,
    affinity: str | None = None,
    **kw: object,
) -> CompareSettings:
    """The settings chosen by flags: a preset, then config keys, then flags win.

    The config's ``rounds``/``time_budget`` tune the default preset only (an explicit
    ``--fast``/``--rigorous`` keeps its own); ``threshold``/``alpha`` always apply.
    """
    if fast and rigorous:
        raise UsageError("--fast and --rigorous exclude each other", "pick one")
    threshold_given = threshold is not None
    _check_numbers(dict(rounds=rounds, max_rounds=max_rounds, values=values, min_time=min_time,
                        time_budget=time_budget, burst_wait=burst_wait, threshold=threshold,
                        alpha=alpha))  # fmt: skip
    _check_modes(config, pairing, clock)
    if measure != "time":  # counters: their own band (0.5%) and rounds; flags still win
        threshold, rounds, max_rounds = counters.counter_settings(
            pairing, threshold, rounds, max_rounds
        )
    if config is not None:
        if not (fast or rigorous):
            rounds = rounds if rounds is not None else config.rounds
            time_budget = time_budget if time_budget is not None else config.time_budget
        threshold = threshold if threshold is not None else config.threshold
        alpha = alpha if alpha is not None else config.alpha
        burst_wait = burst_wait if burst_wait is not None else config.burst_wait
    s = COMPARE_FAST if fast else COMPARE_RIGOROUS if rigorous else COMPARE_DEFAULT
    given = dict(rounds=rounds, max_rounds=max_rounds, values=values, min_time=min_time,
                 time_budget=time_budget, threshold=threshold, burst_wait=burst_wait)  # fmt: skip
    sched = replace(
        _counts(s.schedule, {k: v for k, v in given.items() if v is not None}, measure),
        order=order,
        seed=seed,
        pairing=pairing,
        clock=clock,
        measure=measure,
        affinity=timed_cpus(affinity, config, measure),
    )
    alpha = alpha if alpha is not None else s.alpha
    return replace(s, schedule=sched, alpha=alpha, threshold_given=threshold_given, **kw)  # type: ignore[arg-type]


def _check_modes(config: Config | None, pairing: str, clock: str) -> None:
    if clock == "cpu" and pairing != "same-process":
        raise UsageError("--clock cpu needs --pairing same-process", "add --pairing same-process")
    if pairing == "same-process" and config is not None and config.install:
        raise UsageError(
            "same-process pairing needs install = false (both refs run from source)",
            "use --pairing process (the default) for this project",
        )


def _counts(sched: Schedule, given: dict[str, float], measure: str) -> Schedule:
    """The preset's schedule with the numbers that were given; max_rounds never below rounds."""
    first = int(given.get("rounds", sched.rounds))
    last = max(int(given.get("max_rounds", max(sched.max_rounds, first))), first)
    return replace(
        sched,
        rounds=first,
        max_rounds=last,
        values=int(given.get("values", sched.values)),
        min_time=given.get("min_time", sched.min_time),
        time_budget=given.get("time_budget", sched.time_budget),
        threshold=given.get("threshold", sched.threshold),
        # Counters are never held: their record says so (0) whatever the config says.
        burst_wait=given.get("burst_wait", sched.burst_wait) if measure == "time" else 0.0,
    )


def refuse_untimed(
    measures: Sequence[str], *, affinity: str | None, burst_wait: float | None, several: bool = True
) -> None:
    """Refuse ``--affinity`` and ``--burst-wait`` flags when no signal asked for is time:
    they place and hold timed rounds, and a counter counts the same wherever and
    whenever it runs (the config's keys are project defaults, and simply do not apply)."""
    if "time" in measures:
        return
    asked = ",".join(measures)
    for flag, given in (("--affinity", bool(affinity)), ("--burst-wait", bool(burst_wait))):
        if given:
            raise UsageError(
                f"{flag} applies to timed rounds, and --measure {asked} times nothing "
                "(counts do not depend on where or when a process runs)",
                f"drop {flag}, or time too: --measure {asked},time"
                if several  # bisect and run take one signal
                else f"drop {flag}, or measure the time: --measure time",
            )


def timed_cpus(affinity: str | None, config: Config | None, measure: str) -> tuple[int, ...]:
    """The CPUs the workers of ``measure`` are pinned to: ``--affinity``, else the
    config's key (checked either way); counters do not see where a process ran, so
    their workers are never pinned."""
    if affinity is None and config is not None:
        affinity = config.affinity
    cpus = pinned_cpus(affinity)
    return cpus if measure == "time" else ()


def isolated_notice(cpus: tuple[int, ...], measure: str) -> str:
    """What to say when timed workers go unpinned on a kernel that isolates CPUs, or ''.

    Not a default placement: pinned before set-up, every thread and child a regime
    starts shares the isolated CPUs, which the scheduler does not balance across."""
    import os

    from perfctl.measure.machine import cpus_refused, format_cpus, isolated_cpus

    isolated = isolated_cpus()
    if cpus or measure != "time" or not isolated or not hasattr(os, "sched_setaffinity"):
        return ""
    # Only those a worker could be pinned to here (a container's cpuset, offline CPUs).
    isolated = tuple(sorted(set(isolated) - set(cpus_refused(isolated))))
    if not isolated:
        return ""
    shown = format_cpus(isolated)
    return (
        f"the kernel isolates CPU {shown} (isolcpus); the workers are not pinned there "
        f"(pyperf's own pinning is off too): --affinity {shown} measures on them"
    )


def pinned_cpus(text: str | None) -> tuple[int, ...]:
    """The CPUs ``--affinity`` names (``""`` or None: not pinned). Only the list is read
    here; whether this machine can pin to them is checked before measuring
    (:func:`check_placement`), so re-reading stored comparisons never depends on it."""
    from perfctl.measure.machine import parse_cpus

    if not text:
        return ()
    try:
        return parse_cpus(text)
    except ValueError as exc:
        raise UsageError(
            f"--affinity {text}: {exc}", "give CPUs as taskset -c does: 0 or 0-1,3"
        ) from None


def check_placement(cpus: tuple[int, ...]) -> None:
    """Refuse ``--affinity`` CPUs that no worker could be pinned to on this machine."""
    import os

    from perfctl.measure.machine import allowed_cpus, cpus_refused, format_cpus

    if not cpus:
        return
    if not hasattr(os, "sched_setaffinity"):
        raise UsageError("--affinity needs Linux (sched_setaffinity)", "leave --affinity out")
    refused = cpus_refused(cpus)
    if refused:
        raise UsageError(
            f"--affinity {format_cpus(cpus)}: CPU {format_cpus(refused)} cannot be used here "
            "(offline, or outside this machine's or container's CPU set)",
            f"choose among CPUs {format_cpus(allowed_cpus())}",
        )


def _check_numbers(given: Mapping[str, float | None]) -> None:
    """Refuse flags whose numbers no comparison could use (typer checks only some)."""
    for name in ("rounds", "max_rounds", "values", "min_time", "time_budget"):
        n = given[name]
        # `not n > 0` also refuses nan; inf would never stop.
        if n is not None and not 0 < n < math.inf:
            raise UsageError(
                f"{_flag(name)} must be a number above 0 (got {n:g})", "or leave it out"
            )
    wait = given["burst_wait"]
    if wait is not None and not 0 <= wait < math.inf:
        raise UsageError(
            f"--burst-wait must be 0 or more seconds (got {wait:g})", "or leave it out"
        )
    for name in ("threshold", "alpha"):
        n = given[name]
        if n is not None and not math.isfinite(n):
            raise UsageError(f"{_flag(name)} must be a number (got {n:g})", "or leave it out")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")
