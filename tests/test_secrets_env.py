"""User code never sees perfctl's secrets (#13.3).

Every process that runs user code (the regime probe, workers, the profile
worker, build steps) gets the scrubbed environment plus ``inherit_environ``.
These run in the gate (`.ci/run`): none is marked slow.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfctl.config import Config
from perfctl.envs import Target
from perfctl.measure.environ import scrubbed_env
from perfctl.model import RefInfo
from perfctl.profile.recording import worker_env
from tests.conftest import run_cli

SPY = '''
import json, os
from perfctl import regime

# Runs at import, in the probe: record everything this process was given.
with open(OUT, "w") as out:
    json.dump(dict(os.environ), out)

@regime(family="spy")
def spy():
    """Does nothing."""
    return lambda: None
'''

SECRETS = {
    "GITHUB_TOKEN": "ghs_secret_token_value",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "PERFCTL_KEEP_ME": "kept",
}


def _project(tmp_path: Path, inherit: list[str]) -> Path:
    root = tmp_path / "proj"
    (root / "home").mkdir(parents=True)
    (root / "spy.py").write_text(SPY.replace("OUT", repr(str(root / "seen-env.json"))))
    (root / "pyproject.toml").write_text(
        f'[tool.perfctl]\nregimes = ["spy.py"]\ninherit_environ = {json.dumps(inherit)}\n'
    )
    return root


@pytest.mark.parametrize(
    "command",
    [
        ["list"],
        # `run` starts a measuring worker: the e2e tier's.
        pytest.param(["run", "--processes", "1", "--values", "1"], marks=pytest.mark.slow),
    ],
)
def test_the_probe_never_sees_the_token(tmp_path: Path, command: list[str]) -> None:
    root = _project(tmp_path, ["PERFCTL_KEEP_ME"])
    home = str(root / "home")
    proc = run_cli(*command, "--format", "json", cwd=root, env={**SECRETS, "HOME": home})
    assert proc.returncode == 0, proc.stderr
    seen = json.loads((root / "seen-env.json").read_text())
    assert "GITHUB_TOKEN" not in seen and "AWS_SECRET_ACCESS_KEY" not in seen
    assert "ghs_secret_token_value" not in json.dumps(seen)
    assert seen["PERFCTL_KEEP_ME"] == "kept"  # inherit_environ still reaches user code
    assert seen["HOME"] == home and "PATH" in seen


def test_scrubbed_env_is_pyperfs_list_plus_what_is_asked_for() -> None:
    source = {**SECRETS, "PATH": "/bin", "LANG": "C.UTF-8", "HTTPS_PROXY": "http://p"}
    env = scrubbed_env(["PERFCTL_KEEP_ME"], {"EXTRA": "1"}, source=source)
    assert env == {
        "PATH": "/bin",
        "LANG": "C.UTF-8",
        "PERFCTL_KEEP_ME": "kept",
        "PYTHONDONTWRITEBYTECODE": "1",
        "EXTRA": "1",
    }


def test_build_steps_get_installer_settings_but_no_credentials() -> None:
    source = {
        **SECRETS,
        "PATH": "/bin",
        "HTTPS_PROXY": "http://proxy:3128",
        "UV_INDEX_URL": "https://index.example/simple",
        "UV_PUBLISH_TOKEN": "pypi-secret",
        "PIP_PASSWORD": "hunter2",
    }
    env = scrubbed_env((), build=True, source=source)
    assert env["HTTPS_PROXY"] == "http://proxy:3128"
    assert env["UV_INDEX_URL"] == "https://index.example/simple"
    for secret in ("GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "UV_PUBLISH_TOKEN", "PIP_PASSWORD"):
        assert secret not in env
    # Named in inherit_environ, a credential is passed on purpose.
    assert scrubbed_env(["PIP_PASSWORD"], build=True, source=source)["PIP_PASSWORD"] == "hunter2"


def test_the_profile_worker_gets_the_scrubbed_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_secret_token_value")
    monkeypatch.setenv("PERFCTL_KEEP_ME", "kept")
    config = Config(root=tmp_path, inherit_environ=("PERFCTL_KEEP_ME",))
    target = Target(RefInfo(ref="WORKTREE", sha=""), Path("python"), tmp_path, {"X": "1"})
    env = worker_env(config, target)
    assert "GITHUB_TOKEN" not in env
    assert env["PERFCTL_KEEP_ME"] == "kept" and env["X"] == "1"


@pytest.mark.cli  # builds an environment / starts an interpreter
def test_a_custom_build_command_never_sees_the_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from perfctl.envs import prepare_target
    from tests.test_envs import config_for, make_project

    repo = make_project(tmp_path / "proj")
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_secret_token_value")
    monkeypatch.setenv("PERFCTL_KEEP_ME", "kept")
    dump = "import json, os; json.dump(dict(os.environ), open('built-env.json', 'w'))"
    build = f'python -c "{dump}"'
    config = config_for(repo, build=build, inherit_environ=("PERFCTL_KEEP_ME",))
    target = prepare_target(config, "v1")
    seen = json.loads((target.cwd / "built-env.json").read_text())
    assert "GITHUB_TOKEN" not in seen and seen["PERFCTL_KEEP_ME"] == "kept"
    assert seen["VIRTUAL_ENV"].startswith(str(repo.path / ".perfctl" / "envs"))


@pytest.mark.cli  # builds an environment / starts an interpreter
def test_the_version_check_of_an_environment_gets_no_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from perfctl.measure import duo, runner

    monkeypatch.setenv("GITHUB_TOKEN", "ghs_secret_token_value")
    seen = tmp_path / "seen.txt"
    pythons = []
    for side in ("base", "head"):  # two interpreters: their versions are compared
        script = tmp_path / f"python-{side}"
        script.write_text(f'#!/bin/sh\nenv >> "{seen}"\nexec "{sys.executable}" "$@"\n')
        script.chmod(0o755)
        pythons.append(script)
    workers = {
        side: runner.Worker(py, tmp_path, {"PYTHONPATH": str(tmp_path)}, ())
        for side, py in zip(("base", "head"), pythons, strict=True)
    }
    assert duo.unsupported(workers) == ""
    assert "PATH=" in seen.read_text() and "GITHUB_TOKEN" not in seen.read_text()
