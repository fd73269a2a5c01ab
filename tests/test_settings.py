"""Compare settings: preset, then config keys, then flags; bad values are usage errors."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from perfctl.config import load_config
from perfctl.errors import ConfigError, UsageError
from perfctl.jobs.compare import settings_for
from tests.conftest import run_cli


def project(tmp_path: Path, body: str) -> Path:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "p"\nversion = "0"\n\n[tool.perfctl]\nregimes = ["r.py"]\n' + body,
        encoding="utf-8",
    )
    return tmp_path


def test_config_keys_tune_the_default_preset_and_flags_win(tmp_path: Path) -> None:
    config = load_config(
        project(tmp_path, "rounds = 14\ntime_budget = 25\nthreshold = 0.03\nalpha = 0.01\n")
    )
    s = settings_for(config=config)
    assert (s.schedule.rounds, s.schedule.time_budget) == (14, 25)
    assert (s.threshold, s.alpha) == (0.03, 0.01)
    flags = settings_for(config=config, rounds=12, time_budget=5, threshold=0.05, alpha=0.1)
    assert (flags.schedule.rounds, flags.schedule.time_budget) == (12, 5)
    assert (flags.threshold, flags.alpha) == (0.05, 0.1)
    # An explicit preset keeps its own schedule; the decision settings still apply.
    fast = settings_for(config=config, fast=True)
    assert (fast.schedule.rounds, fast.schedule.max_rounds) == (6, 6)
    assert fast.threshold == 0.03


def test_a_zero_threshold_is_kept_not_replaced_by_the_default(tmp_path: Path) -> None:
    config = load_config(project(tmp_path, "threshold = 0\n"))
    assert config.threshold == 0.0
    assert settings_for(config=config).threshold == 0.0


def test_an_unknown_config_key_is_an_error_with_a_suggestion(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown config key `threshhold`") as info:
        load_config(project(tmp_path, "threshhold = 0.02\n"))
    assert info.value.hint == "did you mean `threshold`?"
    # A table no perfctl reads is refused too, never accepted and ignored.
    with pytest.raises(ConfigError, match="unknown config key `ci`"):
        load_config(project(tmp_path, "[tool.perfctl.ci]\nfail_on = 0.05\n"))


@pytest.mark.parametrize(
    "body",
    [
        "alpha = 0\n",
        "alpha = 1.5\n",
        "alpha = nan\n",
        "threshold = -0.1\n",
        "threshold = 1\n",
        "rounds = 0\n",
        "time_budget = -3\n",
    ],
)
def test_out_of_range_config_values_are_config_errors(tmp_path: Path, body: str) -> None:
    with pytest.raises(ConfigError, match="out of range|must be a number above 0") as info:
        load_config(project(tmp_path, body))
    if body.startswith("threshold"):
        assert info.value.hint == "use a fraction from 0 and below 1 (default 0.01)"
    if body.startswith("alpha"):
        assert info.value.hint == "use a fraction above 0 and below 1 (default 0.05)"


@pytest.mark.parametrize("flag", ["rounds", "max_rounds", "values", "min_time", "time_budget"])
def test_non_positive_flags_are_usage_errors(flag: str) -> None:
    with pytest.raises(UsageError, match="must be a number above 0"):
        kw: dict[str, Any] = {flag: 0}
        settings_for(**kw)


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("threshold", 1.0, "--threshold must be a fraction from 0 and below 1"),
        ("threshold", 5.0, "--threshold must be a fraction from 0 and below 1"),
        ("alpha", 0.0, "--alpha must be a fraction above 0 and below 1"),
        ("alpha", 1.0, "--alpha must be a fraction above 0 and below 1"),
    ],
)
def test_band_and_alpha_flags_take_the_configs_ranges(
    flag: str, value: float, message: str
) -> None:
    # The config refuses these (test above); a flag must not let them through.
    with pytest.raises(UsageError, match=message):
        kw: dict[str, Any] = {flag: value}
        settings_for(**kw)


def test_band_and_alpha_flags_near_their_edges_are_allowed() -> None:
    s = settings_for(threshold=0.0, alpha=1e-9)
    assert (s.threshold, s.alpha) == (0.0, 1e-9)
    s = settings_for(threshold=0.999, alpha=0.999)
    assert (s.threshold, s.alpha) == (0.999, 0.999)


@pytest.mark.parametrize(
    "args",
    [
        ("compare", "A", "B", "--alpha", "1"),
        ("bisect", "A", "B", "-r", "x", "--threshold", "3"),
        ("ci", "--alpha", "0"),
    ],
)
def test_out_of_range_band_or_alpha_is_one_error_line_and_exit_2(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    out = run_cli(*args, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    first, hint = out.stderr.splitlines()[:2]
    assert re.fullmatch(r"Error: --(alpha|threshold) must be a fraction .* \(got [0-9]+\)", first)
    assert hint.startswith("Hint: ")


def test_burst_wait_comes_from_config_and_applies_to_every_preset(tmp_path: Path) -> None:
    config = load_config(project(tmp_path, "burst_wait = 15\n"))
    assert settings_for(config=config).schedule.burst_wait == 15.0
    assert settings_for(config=config, fast=True).schedule.burst_wait == 15.0
    assert settings_for(config=config, burst_wait=0).schedule.burst_wait == 0.0  # flag wins
    assert settings_for().schedule.burst_wait == 0.0  # off unless asked for


@pytest.mark.parametrize("body", ["burst_wait = -1\n", "burst_wait = nan\n", 'burst_wait = "5"\n'])
def test_a_bad_burst_wait_is_a_config_error(tmp_path: Path, body: str) -> None:
    with pytest.raises(ConfigError, match="burst_wait"):
        load_config(project(tmp_path, body))
    with pytest.raises(UsageError, match="--burst-wait must be 0 or more seconds"):
        settings_for(burst_wait=float("inf"))


def test_pairing_is_auto_unless_a_flag_or_the_config_says_otherwise(tmp_path: Path) -> None:
    assert settings_for().schedule.pairing == "auto"
    config = load_config(project(tmp_path, 'pairing = "process"\ninstall = false\n'))
    assert settings_for(config=config).schedule.pairing == "process"
    assert settings_for(config=config, pairing="auto").schedule.pairing == "auto"  # flag wins
    # Where no regime could be paired, or too few pairs could decide, it says process.
    assert settings_for(fast=True).schedule.pairing == "process"  # 6 rounds
    assert settings_for(rounds=8, max_rounds=8).schedule.pairing == "process"
    assert settings_for(rounds=8, max_rounds=12).schedule.pairing == "auto"
    assert settings_for(measure="memory").schedule.pairing == "process"
    installed = load_config(project(tmp_path, 'pairing = "auto"\ninstall = true\n'))
    assert settings_for(config=installed).schedule.pairing == "process"


def test_an_on_cpu_clock_is_kept_where_regimes_are_paired_and_refused_where_none_are(
    tmp_path: Path,
) -> None:
    for clock in ("cpu", "busy"):
        assert settings_for(clock=clock).schedule.clock == clock  # auto pairs what it can
        assert settings_for(clock=clock, pairing="same-process", fast=True).schedule.clock
    config = load_config(project(tmp_path, 'pairing = "process"\ninstall = false\n'))
    with pytest.raises(UsageError, match="--clock busy needs same-process pairing"):
        settings_for(config=config, clock="busy")
    with pytest.raises(UsageError, match="6 rounds are too few") as err:
        settings_for(fast=True, clock="busy")
    assert "--max-rounds 12 or more" in err.value.hint
    with pytest.raises(UsageError, match="counters and installed projects"):
        settings_for(measure="memory", clock="cpu")
    installed = load_config(project(tmp_path, "install = true\n"))
    with pytest.raises(UsageError, match="counters and installed projects"):
        settings_for(config=installed, clock="busy")


def test_the_busy_clock_needs_a_kernel_that_keeps_thread_wait_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from perfctl.jobs import settings

    monkeypatch.setattr(settings, "_schedstat_counts", lambda: False)
    with pytest.raises(UsageError, match="schedstat"):
        settings_for(clock="busy")
    assert settings_for(clock="cpu").schedule.clock == "cpu"  # thread_time needs no schedstat


@pytest.mark.parametrize("body", ['pairing = "paired"\n', "pairing = 1\n"])
def test_a_bad_pairing_is_a_config_error(tmp_path: Path, body: str) -> None:
    with pytest.raises(ConfigError, match="pairing"):
        load_config(project(tmp_path, body))


def test_affinity_comes_from_flag_or_config_as_a_cpu_list(tmp_path: Path) -> None:
    assert settings_for(affinity="0-1,3").schedule.affinity == (0, 1, 3)
    assert settings_for().schedule.affinity == ()  # placement left to the OS by default
    config = load_config(project(tmp_path, "affinity = 2\n"))
    assert settings_for(config=config).schedule.affinity == (2,)
    assert settings_for(config=config, affinity="").schedule.affinity == ()  # flag wins
    # counters do not see where a process ran: their workers are never pinned
    assert settings_for(affinity="0", measure="instructions").schedule.affinity == ()


def test_timed_cpus_come_from_flag_or_config_and_counters_are_never_pinned(
    tmp_path: Path,
) -> None:
    from perfctl.jobs.settings import timed_cpus

    config = load_config(project(tmp_path, 'affinity = "1"\n'))
    assert timed_cpus(None, config, "time") == (1,)  # `run` with the config key
    assert timed_cpus("0", config, "time") == (0,) and timed_cpus("", config, "time") == ()
    assert timed_cpus(None, config, "memory") == ()  # the key does not apply to counters
    with pytest.raises(UsageError, match="--affinity x"):
        timed_cpus("x", None, "instructions")  # but a typo is a typo whatever is measured
    # A counter comparison records no hold either: it never holds.
    held = settings_for(config=config, burst_wait=5.0, measure="memory").schedule
    assert (held.burst_wait, held.affinity) == (0.0, ())
    assert settings_for(config=config, burst_wait=5.0).schedule.burst_wait == 5.0


def test_a_run_says_where_its_workers_were_pinned() -> None:
    from perfctl.model import Machine, RefInfo, Run
    from perfctl.render.notes import run_notes

    machine = Machine("m", "cpu", 2, 2**30, "6", "none", "3.11")

    def run(cpus: list[int]) -> Run:
        ref = RefInfo("main", "1" * 40)
        return Run("r", "p", ref, machine, "now", settings={"affinity": cpus})

    assert run_notes(run([0, 1, 3])) == [
        "Placement: every worker was pinned to CPU 0-1,3 (--affinity)."
    ]
    assert run_notes(run([])) == []


def test_timing_flags_with_only_counters_are_refused_and_with_time_kept() -> None:
    from perfctl.jobs.settings import refuse_untimed

    for flags in ({"affinity": "0", "burst_wait": None}, {"affinity": None, "burst_wait": 5.0}):
        with pytest.raises(UsageError, match="applies to timed rounds") as err:
            refuse_untimed(["instructions", "memory"], **flags)
        assert "--measure instructions,memory,time" in (err.value.hint or "")
    refuse_untimed(["instructions", "time"], affinity="0", burst_wait=5.0)  # time is pinned
    refuse_untimed(["memory"], affinity="", burst_wait=0.0)  # given as off: nothing to refuse
    with pytest.raises(UsageError) as err:
        refuse_untimed(["memory"], affinity="0", burst_wait=None, several=False)
    assert err.value.hint == "drop --affinity, or measure the time: --measure time"


@pytest.mark.parametrize(
    ("text", "said"),
    [("x", "`x` is not a CPU number or range"), ("1-0", "`1-0` runs backwards"),
     ("0,", "`` is not a CPU number"), ("0-", "`0-` is not"), ("-1", "`-1` is not"),
     ("1-2-3", "`1-2-3` is not"), (" ", "`` is not"),
     ("0-100000000", "no CPU is numbered above 8191")],
)  # fmt: skip
def test_a_bad_affinity_is_a_usage_error(text: str, said: str) -> None:
    with pytest.raises(UsageError, match=said) as err:
        settings_for(affinity=text)
    assert err.value.hint


def test_a_cpu_no_worker_can_be_pinned_to_is_refused_before_measuring() -> None:
    import os

    from perfctl.jobs.settings import check_placement

    # Read anywhere (a stored comparison re-decided on another machine), refused only
    # where a worker would be pinned.
    cpus = settings_for(affinity="8000").schedule.affinity
    with pytest.raises(UsageError, match="CPU 8000 cannot be used here") as err:
        check_placement(cpus)
    assert err.value.hint.startswith("choose among CPUs ")
    check_placement((min(os.sched_getaffinity(0)),))  # one this process may use: fine
    check_placement(())


@pytest.mark.parametrize("body", ["affinity = true\n", "affinity = [0]\n"])
def test_a_bad_affinity_in_config_is_a_config_error(tmp_path: Path, body: str) -> None:
    with pytest.raises(ConfigError, match="affinity"):
        load_config(project(tmp_path, body))


def test_cpu_lists_read_and_print_as_taskset_writes_them() -> None:
    from perfctl.measure.machine import format_cpus, parse_cpus

    assert parse_cpus("0-2,5") == (0, 1, 2, 5) and parse_cpus("3, 1") == (1, 3)
    assert format_cpus((5, 0, 1, 2)) == "0-2,5" and format_cpus((3,)) == "3"
    assert format_cpus((1, 1, 2)) == "1-2" and format_cpus(()) == ""


def test_isolated_cpus_are_named_not_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Pinned before set-up, a regime's threads would pile onto isolated CPUs, which the
    # scheduler does not balance: perfctl says where they are and pins only when asked.
    from perfctl.jobs.settings import isolated_notice
    from perfctl.measure import machine

    isolated = tmp_path / "isolated"
    monkeypatch.setattr(machine, "ISOLATED", isolated)
    for text, found in (("", ()), ("garbage\n", ()), ("2-3,5\n", (2, 3, 5))):
        isolated.write_text(text)
        assert machine.isolated_cpus() == found, text
    assert settings_for().schedule.affinity == ()  # not a default placement
    cpu = min(os.sched_getaffinity(0))
    isolated.write_text(f"{cpu},8000\n")  # 8000: not a CPU a worker can use here
    assert isolated_notice((), "time") == (
        f"the kernel isolates CPU {cpu} (isolcpus); the workers are not pinned there "
        f"(pyperf's own pinning is off too): --affinity {cpu} measures on them"
    )
    assert isolated_notice((cpu,), "time") == ""  # pinned: the placement line says where
    assert isolated_notice((), "instructions") == ""  # a count does not depend on it
    isolated.write_text("8000\n")
    assert isolated_notice((), "time") == ""  # none usable here: nothing to advise
    isolated.unlink()
    assert isolated_notice((), "time") == ""
