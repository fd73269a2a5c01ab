"""Compare's options bundle: one CompareSettings, parsed once from flags, config and preset.

`compare`, `ci`, `plan update` and `bisect` build theirs with :func:`settings_for`
(the demo has its own two, ``jobs.demo.demo_settings``). The presets here are
compare's (rounds of interleaved processes); `perfctl run`'s presets are pyperf's
process × value counts (``measure.runner``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from perfctl.config import Config
from perfctl.errors import UsageError
from perfctl.jobs.shard import Shard
from perfctl.measure import counters, duo
from perfctl.measure.duo import IsClear
from perfctl.measure.interleave import Schedule
from perfctl.stats.band import alpha_in_range, band_in_range


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
    # None: the default wait, and no --lock-wait to name. Not part of repr or equality:
    # the resume key hashes repr(settings), and how long to wait measures nothing.
    lock_wait: float | None = field(default=None, repr=False, compare=False)
    name: str = "default"
    shard: Shard | None = None  # --shard K/N: measure only this shard's regimes
    threshold_given: bool = False  # --threshold on the command line (wins over a stored band)

    @property
    def threshold(self) -> float:
        """The noise band (relative change)."""
        return self.schedule.threshold


# Presets. Cost per regime on a 2-core VM (README §7): fast ≈ 3–6 s; the default
# stops once the answer is clear, at most 60 s; rigorous at most 240 s.
COMPARE_FAST = CompareSettings(
    schedule=Schedule(rounds=6, max_rounds=6, values=2, time_budget=10), name="fast"
)


# Default: 10 rounds, then sequential sampling (one more round per check) up to 80 rounds
# or 60 s of measuring per regime, whichever comes first: ~99% power for a 5% change at
# a process CV of 5% at the ±1% band (simulated, README §9; benchmarks/README.md has the
# measured figures).
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
    pairing: str | None = None,
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
    one_preset(fast, rigorous)
    given: dict[str, float | None] = {
        "rounds": rounds, "max_rounds": max_rounds, "values": values, "min_time": min_time,
        "time_budget": time_budget, "burst_wait": burst_wait, "threshold": threshold,
        "alpha": alpha,
    }  # fmt: skip
    _check_numbers(given)
    pairing = _resolved(config, pairing, clock, measure)
    if measure != "time":  # counters: their own band (0.5%) and rounds; flags still win
        given["threshold"], given["rounds"], given["max_rounds"] = counters.counter_settings(
            pairing, threshold, rounds, max_rounds
        )
    if config is not None:
        given = _config_defaults(given, config, preset=fast or rigorous)
    s = COMPARE_FAST if fast else COMPARE_RIGOROUS if rigorous else COMPARE_DEFAULT
    sched = replace(
        _counts(s.schedule, given, measure),
        order=order,
        seed=seed,
        pairing=pairing,
        clock=clock,
        measure=measure,
        affinity=timed_cpus(affinity, config, measure),
    )
    return replace(
        s,
        schedule=_enough_pairs(sched),
        alpha=_pick(given, "alpha", s.alpha),
        threshold_given=threshold is not None,
        **kw,  # type: ignore[arg-type]
    )


def _config_defaults(
    given: dict[str, float | None], config: Config, *, preset: bool
) -> dict[str, float | None]:
    """What the flags left out, from the config; rounds and budget only for the default preset."""
    keys = ["threshold", "alpha", "burst_wait"] + ([] if preset else ["rounds", "time_budget"])
    return {**given, **{k: getattr(config, k) for k in keys if given[k] is None}}


def _pick(given: Mapping[str, float | None], key: str, default: float) -> float:
    value = given.get(key)
    return default if value is None else value


def one_preset(fast: bool, rigorous: bool) -> None:
    """Refuse ``--fast`` with ``--rigorous`` (compare's presets and run's alike)."""
    if fast and rigorous:
        raise UsageError("--fast and --rigorous exclude each other", "pick one")


def _check_modes(config: Config | None, pairing: str, clock: str) -> None:
    if clock != "wall" and pairing == "process":
        raise UsageError(
            f"--clock {clock} needs same-process pairing",
            "use --pairing auto (the default: it applies to the regimes measured in one "
            "process) or same-process",
        )
    if clock == "busy" and not _schedstat_counts():
        raise UsageError(
            "--clock busy needs Linux's per-thread scheduler statistics (schedstat)",
            "use --clock wall, or cpu for single-threaded regimes that wait on nothing",
        )
    if pairing == "same-process" and config is not None and config.install:
        raise UsageError(
            "same-process pairing needs install = false (both refs run from source)",
            "use --pairing auto (the default) or process for this project",
        )


def _schedstat_counts() -> bool:
    """Whether this kernel keeps per-thread run and wait times: the file can exist and
    stay at zero (no schedstats, delay accounting off), and busy would equal wall."""
    from perfctl.measure.procs import thread_schedstat

    return thread_schedstat()[0] > 0  # this thread has run: never 0 where it is kept


def _resolved(config: Config | None, pairing: str | None, clock: str, measure: str) -> str:
    """The pairing asked for (flag, config key, else ``auto``), checked; ``process`` for
    ``auto`` where the whole comparison can only run in separate processes: counters
    (one value per process) and installed projects (same-process needs the source)."""
    pairing = pairing or (config.pairing if config is not None else None) or "auto"
    _check_modes(config, pairing, clock)
    if pairing == "auto" and (measure != "time" or (config is not None and config.install)):
        _no_pairs_for(clock, "counters and installed projects run in separate processes")
        return "process"
    return pairing


def _no_pairs_for(clock: str, why: str, hint: str = "drop --clock") -> None:
    """Refuse --clock cpu/busy where ``auto`` pairs nothing: it would time nothing."""
    if clock != "wall":
        raise UsageError(f"--clock {clock} needs same-process pairing: {why}", hint)


def _enough_pairs(sched: Schedule) -> Schedule:
    """``process`` for ``auto`` with too few rounds for a paired test (``--fast``)."""
    few = duo.too_few_rounds(sched) if sched.pairing == "auto" else ""
    if few:
        hint = f"drop --clock, or allow --max-rounds {duo.AUTO_MIN_ROUNDS} or more"
        _no_pairs_for(sched.clock, few, hint)
        return replace(sched, pairing="process")
    return sched


def _counts(sched: Schedule, given: Mapping[str, float | None], measure: str) -> Schedule:
    """The preset's schedule with the numbers that were given; max_rounds never below rounds."""
    first = int(_pick(given, "rounds", sched.rounds))
    last = max(int(_pick(given, "max_rounds", max(sched.max_rounds, first))), first)
    return replace(
        sched,
        rounds=first,
        max_rounds=last,
        values=int(_pick(given, "values", sched.values)),
        min_time=_pick(given, "min_time", sched.min_time),
        time_budget=_pick(given, "time_budget", sched.time_budget),
        threshold=_pick(given, "threshold", sched.threshold),
        # Counters are never held: their record says so (0) whatever the config says.
        burst_wait=_pick(given, "burst_wait", sched.burst_wait) if measure == "time" else 0.0,
    )


def refuse_untimed(
    measures: Sequence[str],
    *,
    affinity: str | None,
    burst_wait: float | None,
    clock: str = "wall",
    several: bool = True,
) -> None:
    """Refuse ``--affinity``, ``--burst-wait`` and ``--clock`` flags when no signal asked
    for is time: they place, hold and time timed rounds, and a counter counts the same
    wherever and whenever it runs (the config's keys are project defaults, and simply do
    not apply)."""
    if "time" in measures:
        return
    asked = ",".join(measures)
    flags = (("--affinity", bool(affinity)), ("--burst-wait", bool(burst_wait)))
    for flag, given in (*flags, (f"--clock {clock}", clock != "wall")):
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
    # The same ranges as the config's and a stored record's (stats.band).
    band, alpha = given["threshold"], given["alpha"]
    if band is not None and not band_in_range(band, none=True):
        raise UsageError(
            f"--threshold must be a fraction from 0 and below 1 (got {band:g})",
            "0.01 is a ±1% band (the default); 0 means no band",
        )
    if alpha is not None and not alpha_in_range(alpha):
        raise UsageError(
            f"--alpha must be a fraction above 0 and below 1 (got {alpha:g})",
            "0.05 is the default",
        )


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def stopping_rule(
    settings: CompareSettings, pairing: str, family: int = 1, band: float | None = None
) -> IsClear:
    """The sequential-sampling check: whether the rounds so far give a clear answer
    (``pairing``: how they are measured, "process" or "same-process"; ``family``: how
    many regimes the verdicts' correction will count; ``band``: the regime's own noise
    band, if it declares one)."""
    from perfctl.stats import decision as stats
    from perfctl.stats.band import band_of
    from perfctl.stats.paired import compare_paired, ratio_cv
    from perfctl.stats.summary import process_cv

    paired = pairing == "same-process"
    threshold = band_of(band, settings.threshold)

    def clear(b: list[tuple[float, ...]], h: list[tuple[float, ...]]) -> bool:
        if paired:
            change = compare_paired(b, h)
            # decide judges the pairs' spread
            noisy = stats.is_noisy(ratio_cv(b, h), 0.0, threshold)
        else:
            change = stats.compare_sides(b, h)
            noisy = stats.is_noisy(process_cv(b), process_cv(h), threshold)
        return stats.is_clear(
            change, threshold=threshold, alpha=settings.alpha, family=family, noisy=noisy
        )

    return clear
