"""Regime definitions are checked where they are defined; the probe reads only its own answer."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from perfctl.config import load_config
from perfctl.errors import ConfigError, RegimeLoadError, UsageError
from perfctl.jobs.compare import settings_for
from perfctl.regimes import discovery
from tests.conftest import run_cli

# Each test probes a regimes file in a real subprocess.
pytestmark = pytest.mark.cli

HEADER = "import math\nfrom perfctl import regime\n\n"


def probe(tmp_path: Path, *bodies: str) -> list[str]:
    """Probe one regimes file per body; the expanded names."""
    files = []
    for i, body in enumerate(bodies):
        f = tmp_path / f"regimes_{i}.py"
        f.write_text(HEADER + textwrap.dedent(body))
        files.append(f)
    return [r.name for r in discovery.probe(Path(sys.executable), files, cwd=tmp_path)]


def test_duplicate_names_are_an_error_naming_both_places(tmp_path: Path) -> None:
    one = "@regime\ndef work():\n    return lambda: None\n"
    with pytest.raises(RegimeLoadError, match="duplicate regime name 'work'") as info:
        probe(tmp_path, one, one)
    assert "regimes_1.py:4" in info.value.message and "regimes_0.py:4" in info.value.message
    params = (
        '@regime(params={"n": [1]})\ndef work(n):\n    return lambda: None\n\n'
        '@regime(name="work[n=1]")\ndef other():\n    return lambda: None\n'
    )
    with pytest.raises(RegimeLoadError, match=r"duplicate regime name 'work\[n=1\]'"):
        probe(tmp_path, params)


@pytest.mark.parametrize("timeout", ["-5", "0", "'soon'", "math.nan", "True"])
def test_timeout_must_be_a_positive_number(tmp_path: Path, timeout: str) -> None:
    body = f"@regime(timeout={timeout})\ndef work():\n    return lambda: None\n"
    with pytest.raises(RegimeLoadError, match="timeout must be a number of seconds above 0"):
        probe(tmp_path, body)


def test_a_good_timeout_and_baseline_pass(tmp_path: Path) -> None:
    body = (
        '@regime(timeout=2.5, params={"n": [1, 2]}, baseline="base")\n'
        "def work(n):\n    return lambda: None\n\n"
        '@regime(params={"n": [1, 2]})\ndef base(n):\n    return lambda: None\n'
    )
    assert probe(tmp_path, body) == ["work[n=1]", "work[n=2]", "base[n=1]", "base[n=2]"]


@pytest.mark.parametrize("band", ["0", "1", "-0.1", "2", "'5%'", "math.nan", "True"])
def test_a_declared_noise_band_must_be_a_fraction_below_one(tmp_path: Path, band: str) -> None:
    body = f"@regime(threshold={band})\ndef work():\n    return lambda: None\n"
    with pytest.raises(RegimeLoadError, match="threshold must be") as info:
        probe(tmp_path, body)
    assert "regimes_0.py:4" in info.value.message


def test_a_declared_noise_band_reaches_the_regime_info(tmp_path: Path) -> None:
    body = (
        "@regime(threshold=0.1)\ndef loose():\n    return lambda: None\n\n"
        "@regime\ndef plain():\n    return lambda: None\n"
    )
    f = tmp_path / "regimes.py"
    f.write_text(HEADER + body)
    found = {r.name: r.threshold for r in discovery.probe(Path(sys.executable), [f], cwd=tmp_path)}
    assert found == {"loose": 0.1, "plain": None}


def test_a_missing_baseline_is_an_error_naming_it(tmp_path: Path) -> None:
    body = '@regime(baseline="direct")\ndef work():\n    return lambda: None\n'
    with pytest.raises(RegimeLoadError, match="its baseline 'direct' is not a defined regime"):
        probe(tmp_path, body)


def test_output_of_the_regimes_file_is_not_read_as_the_answer(tmp_path: Path) -> None:
    body = (
        "import atexit, json\n"
        'print(\'{"regimes": "mine"}\')\n'
        "atexit.register(lambda: print(json.dumps({'x': 1})))\n"
        "@regime\ndef work():\n    return lambda: None\n"
    )
    assert probe(tmp_path, body) == ["work"]


def test_exiting_at_import_is_not_blamed_on_perfctl(tmp_path: Path) -> None:
    with pytest.raises(RegimeLoadError) as info:
        probe(tmp_path, "import os\nos._exit(4)\n")
    assert "(exit code 4)" in info.value.message
    assert "must not exit the interpreter" in info.value.hint
    assert "perfctl is importable" not in info.value.hint


@pytest.mark.parametrize("flag", ["time_budget", "min_time"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_time_flags_refuse_nan_and_inf(flag: str, value: float) -> None:
    with pytest.raises(UsageError, match="must be a number above 0"):
        kw: dict[str, Any] = {flag: value}
        settings_for(**kw)


def test_threshold_refuses_nan() -> None:
    with pytest.raises(UsageError, match="--threshold must be a number"):
        settings_for(threshold=float("nan"))


def test_config_time_budget_nan_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.perfctl]\ntime_budget = nan\n")
    with pytest.raises(ConfigError, match="`time_budget` = nan must be a number above 0"):
        load_config(tmp_path)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["profile", "work", "--duration", "nan"], "'--duration': nan is not a finite number"),
        (["run", "--lock-wait", "inf"], "'--lock-wait': inf is not a finite number"),
        (["compare", "a", "b", "--seed", "-1"], "'--seed'"),
        (
            ["compare", "a", "b", "--profile", "all", "--profile-duration", "0"],
            "'--profile-duration': 0.0 is not in the range x>=0.1",
        ),
        (
            ["bisect", "a", "b", "-r", "w", "--profile", "--profile-duration", "inf"],
            "'--profile-duration': inf is not a finite number",
        ),
    ],
)
def test_cli_numbers_no_run_could_use_exit_2_before_anything_runs(
    tmp_path: Path, args: list[str], said: str
) -> None:
    # Refused while parsing (no project here): a nan duration profiled until its
    # timeout, and a negative seed failed only after every regime was measured.
    out = run_cli(*args, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("Error: Invalid value for ") and said in out.stderr


@pytest.mark.parametrize(
    "args", [["compare", "a", "b"], ["bisect", "a", "b", "-r", "work"]], ids=["compare", "bisect"]
)
def test_profile_duration_without_profile_is_refused_before_anything_runs(
    tmp_path: Path, args: list[str]
) -> None:
    # No project here: the refusal comes before the config is read or a ref resolved.
    out = run_cli(*args, "--profile-duration", "2", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr == (
        "Error: --profile-duration sets how long --profile samples; --profile is not given\n"
        "Hint: add --profile, or drop --profile-duration\n"
    )


def test_cli_time_budget_nan_exits_2(tmp_path: Path) -> None:
    (tmp_path / "r.py").write_text(HEADER + "@regime\ndef work():\n    return lambda: None\n")
    out = run_cli("compare", "a", "b", "--regimes", "r.py", "--time-budget", "nan", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "Error:" in out.stderr and "--time-budget" in out.stderr
