"""The environment stage with real uv, venvs and a tiny setuptools package."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from perfctl import envs
from perfctl.config import Config
from perfctl.envs import Target, current_target, prepare_target, remove_envs
from perfctl.errors import EXIT_FAILURE, BuildError, ConfigError
from tests.conftest import GitRepo

# Builds real environments (uv, venv, pip): the cli tier.
pytestmark = pytest.mark.cli

PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "tinypkg"
version = "0.1"
"""

PROBE = """\
import json, sys, importlib.util
import tinypkg, perfctl, pyperf
spec = importlib.util.find_spec("perfctl")
print(json.dumps({"value": tinypkg.VALUE, "tinypkg": tinypkg.__file__,
                  "perfctl": perfctl.__file__, "pyperf": pyperf.__version__,
                  "version": list(sys.version_info[:2]), "prefix": sys.prefix,
                  "path": sys.path}))
"""


def make_project(path: Path) -> GitRepo:
    """A git repo holding the package `tinypkg`: tag v1 has VALUE = 1, main VALUE = 2."""
    path.mkdir(parents=True)
    repo = GitRepo(path)
    repo.git("init", "-q", "-b", "main")
    repo.write("pyproject.toml", PYPROJECT)
    repo.write(".gitignore", "build/\n*.egg-info/\n")
    repo.write("tinypkg/__init__.py", "VALUE = 1\n")
    repo.commit("first")
    repo.tag("v1")
    repo.write("tinypkg/__init__.py", "VALUE = 2\n")
    repo.commit("second")
    return repo


def config_for(repo: GitRepo, **kwargs: object) -> Config:
    return Config(root=repo.path, state_dir=repo.path / ".perfctl", **kwargs)  # type: ignore[arg-type]


def probe(target: Target, isolated: bool = True) -> dict[str, object]:
    """Import the project, perfctl and pyperf with the target's interpreter."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | target.env
    # -I: no cwd or PYTHONPATH on sys.path, so only what is installed counts.
    flags = ["-I"] if isolated else []
    out = subprocess.run(
        [str(target.python), *flags, "-c", PROBE],
        cwd=target.python.parent,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(out.stdout))


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> GitRepo:
    return make_project(tmp_path_factory.mktemp("envs") / "proj")


@pytest.fixture(scope="module")
def built(project: GitRepo) -> Target:
    """One real uv-built environment of v1, shared by the tests below."""
    return prepare_target(config_for(project), "v1")


def test_env_runs_project_perfctl_and_pyperf(project: GitRepo, built: Target) -> None:
    state, v1 = project.path / ".perfctl", project.git("rev-parse", "v1")
    assert built.env_dir is not None and built.env_dir.parent == state / "envs"
    assert built.python == built.env_dir / "bin" / "python"
    assert built.cwd == state / "worktrees" / v1
    assert (built.ref.ref, built.ref.sha, built.env) == ("v1", v1, {})
    seen = probe(built)
    assert seen["value"] == 1
    assert str(seen["tinypkg"]).startswith(str(built.env_dir))
    assert "/runtime/" in str(seen["perfctl"]) and seen["pyperf"]
    assert seen["version"] == list(sys.version_info[:2])
    assert seen["prefix"] == str(built.env_dir)
    path = [str(p) for p in seen["path"]]  # type: ignore[attr-defined]
    site = next(i for i, p in enumerate(path) if p.endswith("site-packages"))
    runtime = next(i for i, p in enumerate(path) if "/runtime/" in p)
    assert runtime > site  # the project's own packages win over the runtime's


def test_cache_hit_reuses_the_env(project: GitRepo, built: Target) -> None:
    assert built.env_dir is not None
    inode = built.env_dir.stat().st_ino
    said: list[str] = []
    again = prepare_target(config_for(project), project.git("rev-parse", "v1"), log=said.append)
    # Reused, not rebuilt: the same directory (inode), and the log says so.
    assert again.env_dir == built.env_dir and built.env_dir.stat().st_ino == inode
    reused = f"{project.git('rev-parse', 'v1')}: reusing environment {built.env_dir.name}"
    assert len(said) == 1 and re.fullmatch(rf"{reused} \(built in \d+\.\d s\)", said[0])


def test_other_commit_gets_its_own_env(project: GitRepo, built: Target) -> None:
    head = prepare_target(config_for(project), "main")
    assert head.env_dir != built.env_dir
    assert probe(head)["value"] == 2


def test_rebuild_makes_a_fresh_env(project: GitRepo, built: Target) -> None:
    assert built.env_dir is not None
    inode = built.env_dir.stat().st_ino
    fresh = prepare_target(config_for(project), "v1", rebuild=True)
    assert fresh.env_dir == built.env_dir and built.env_dir.stat().st_ino != inode
    assert probe(fresh)["value"] == 1
    assert not list(built.env_dir.parent.glob(".*"))  # no temporary or old dirs left


def test_install_false_uses_pythonpath(project: GitRepo) -> None:
    target = prepare_target(config_for(project, install=False, pythonpath=("src",)), "v1")
    expected = os.pathsep.join([str(target.cwd / "src"), str(target.cwd)])
    assert target.env == {"PYTHONPATH": expected}
    with pytest.raises(subprocess.CalledProcessError):
        probe(target)  # not installed...
    seen = probe(target, isolated=False)  # ...but importable from the worktree
    assert seen["value"] == 1
    assert seen["tinypkg"] == str(target.cwd / "tinypkg" / "__init__.py")


def test_key_follows_build_config_and_python(project: GitRepo) -> None:
    base = config_for(project)
    keys = {
        envs.env_key("sha", cfg, py)
        for cfg, py in [
            (base, "cpython-3.11.7"),
            (base, "cpython-3.12.1"),
            (config_for(project, build="make"), "cpython-3.11.7"),
            (config_for(project, dependencies=("numpy",)), "cpython-3.11.7"),
            (config_for(project, install=False), "cpython-3.11.7"),
            (config_for(project, install=False, pythonpath=("src",)), "cpython-3.11.7"),
        ]
    }
    assert len(keys) == 6
    assert envs.env_key("sha", base, "x") == envs.env_key("sha", config_for(project), "x")


BUILD = (
    "python -c \"import os, sys; open('built.txt', 'w').write(sys.prefix + ' ' + "
    "os.environ['VIRTUAL_ENV'])\""
)


def test_custom_build_command_runs_in_the_env(project: GitRepo) -> None:
    config = config_for(project, build=BUILD, dependencies=())
    target = prepare_target(config, "v1")
    assert target.env_dir is not None
    prefix, venv = (target.cwd / "built.txt").read_text().split(" ")
    assert prefix == venv and Path(prefix).parent == target.env_dir.parent
    assert Path(prefix).name.startswith(f".tmp-{target.env_dir.name}-")  # built, then renamed
    assert (target.env_dir / "bin" / "pip").exists()  # seeded: `pip install .` stays inside
    log = (project.path / ".perfctl" / "logs" / f"{target.env_dir.name}.log").read_text()
    assert "$ python -c " in log
    # The build command replaces the default install.
    with pytest.raises(subprocess.CalledProcessError):
        probe(target)


def test_failed_build_names_ref_command_and_log(project: GitRepo) -> None:
    build = "python -c \"print('boom-output'); raise SystemExit(3)\""
    with pytest.raises(BuildError) as info:
        prepare_target(config_for(project, build=build, install=False), "v1")
    err = info.value
    logs = list((project.path / ".perfctl" / "logs").glob("*.log"))
    log = next(p for p in logs if "boom-output" in p.read_text())
    assert err.message.startswith("building the environment of v1 (")
    assert "`python -c 'print('\"'\"'boom-output'\"'\"'); raise SystemExit(3)'`" in err.message
    assert "exited with status 3" in err.message and str(log) in err.message
    assert str(log) in err.hint and "--rebuild" in err.hint
    assert err.exit_code == EXIT_FAILURE
    assert not (project.path / ".perfctl" / "envs" / log.stem).exists()
    assert not list((project.path / ".perfctl" / "envs").glob(f".*{log.stem}*"))


def test_missing_build_command(project: GitRepo) -> None:
    with pytest.raises(BuildError, match="`no-such-command-xyz` could not run"):
        prepare_target(config_for(project, build="no-such-command-xyz", install=False), "v1")


def test_bad_settings_are_config_errors(project: GitRepo) -> None:
    with pytest.raises(ConfigError, match="dependency `--index-url=x`"):
        prepare_target(config_for(project, dependencies=("--index-url=x",)), "v1")
    with pytest.raises(ConfigError, match="cannot be split"):
        prepare_target(config_for(project, build="make 'unclosed"), "v1")


KILLED = textwrap.dedent("""
    import sys
    from pathlib import Path
    from perfctl.config import Config
    from perfctl.envs import prepare_target

    root = Path(sys.argv[1])
    config = Config(root=root, state_dir=root / ".perfctl", install=False, build=sys.argv[2])
    prepare_target(config, "v1")
""")
# Sleeps (to be killed) the first time only: the re-run must then finish.
SLOW_ONCE = (
    "python -c \"import os, time; first = not os.path.exists('started'); "
    "open('started', 'a').close(); time.sleep(60 if first else 0)\""
)


def test_killed_build_is_never_reused(project: GitRepo) -> None:
    state = project.path / ".perfctl"
    started = state / "worktrees" / project.git("rev-parse", "v1") / "started"
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED, str(project.path), SLOW_ONCE], start_new_session=True
    )
    deadline = time.monotonic() + 120
    while not started.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # perfctl and its build command, mid-build
    proc.wait()
    assert started.exists()
    leftovers = list((state / "envs").glob(f".tmp-*-{proc.pid}"))
    assert len(leftovers) == 1 and not (leftovers[0] / envs.MARKER).exists()
    key = leftovers[0].name.split("-")[1]
    assert not (state / "envs" / key).exists()
    config = config_for(project, install=False, build=SLOW_ONCE)
    target = prepare_target(config, "v1")  # the lock died with the killed process
    assert target.env_dir == state / "envs" / key
    assert (target.env_dir / envs.MARKER).is_file() and not leftovers[0].exists()


def test_worktree_runs_in_place_and_follows_edits(tmp_path: Path) -> None:
    repo = make_project(tmp_path / "proj")
    (repo.path / ".gitignore").unlink()  # build/ and *.egg-info would show up
    repo.commit("no .gitignore")
    repo.write("tinypkg/__init__.py", "from tinypkg.extra import VALUE\n")
    repo.write("tinypkg/extra.py", "VALUE = 3\n")  # untracked, yet part of WORKTREE
    first = prepare_target(config_for(repo), "WORKTREE")
    assert (first.cwd, first.ref.ref, first.ref.dirty) == (repo.path, "WORKTREE", True)
    assert probe(first)["value"] == 3
    repo.write("tinypkg/extra.py", "VALUE = 4\n")
    second = prepare_target(config_for(repo), "WORKTREE")
    assert second.env_dir != first.env_dir
    assert probe(second)["value"] == 4  # uv did not reuse the wheel it built for VALUE = 3
    assert prepare_target(config_for(repo), "WORKTREE").env_dir == second.env_dir
    # Built from a snapshot: the checkout got no build/ or *.egg-info.
    assert repo.git("status", "--porcelain").splitlines() == [
        "M tinypkg/__init__.py",
        "?? tinypkg/extra.py",
    ]
    assert repo.git("worktree", "list").count("\n") == 0


def test_fallback_to_venv_without_uv(project: GitRepo, monkeypatch) -> None:
    monkeypatch.setattr(envs, "_uv_bin", lambda: None)
    state = project.path / "fallback-state"
    config = dataclasses.replace(config_for(project, install=False), state_dir=state)
    target = prepare_target(config, "v1")
    assert target.env_dir is not None
    assert "uv =" not in (target.env_dir / "pyvenv.cfg").read_text()
    assert probe(target, isolated=False)["value"] == 1


def test_current_target(project: GitRepo, monkeypatch: pytest.MonkeyPatch) -> None:
    target = current_target(config_for(project))
    assert (target.python, target.cwd, target.env_dir) == (Path(sys.executable), project.path, None)
    assert (target.ref.ref, target.ref.sha) == ("WORKTREE", project.git("rev-parse", "HEAD"))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    flat = current_target(config_for(project, install=False))
    assert flat.env == {"PYTHONPATH": str(project.path)}
    # In place the project's paths come first, then the PYTHONPATH perfctl itself runs
    # with (an installed project's workers inherit it whole); nothing is written.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/opt/a", "", "/opt/b"]))
    flat = current_target(config_for(project, install=False, pythonpath=("src",)))
    assert flat.env["PYTHONPATH"].split(os.pathsep) == [
        str(project.path / "src"), str(project.path), "/opt/a", "/opt/b"
    ]  # fmt: skip
    assert project.git("status", "--porcelain") == ""


def test_run_in_place_with_perfctl_only_on_pythonpath(project: GitRepo, tmp_path: Path) -> None:
    """An interpreter that imports perfctl and pyperf only through PYTHONPATH (a source
    checkout, wheels unpacked with --target) still loads an install = false project's
    regimes in place (`list`; `run` gives its workers the same environment): the project's
    PYTHONPATH is followed by the one perfctl runs with."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True
    )
    import pyperf

    import perfctl

    paths = [str(Path(str(m.__file__)).resolve().parents[1]) for m in (perfctl, pyperf)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}
    project.write(
        "pyproject.toml", PYPROJECT + '[tool.perfctl]\nregimes = ["bench.py"]\ninstall = false\n'
    )
    project.write(
        "bench.py", "import perfctl\n\n@perfctl.regime()\ndef noop():\n    return lambda: None\n"
    )
    python = str(tmp_path / "bare" / "bin" / "python")
    listed = subprocess.run(
        [python, "-m", "perfctl", "list", "--format", "json"],
        cwd=project.path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert listed.returncode == 0, listed.stderr
    assert [r["name"] for r in json.loads(listed.stdout)] == ["noop"]


def test_current_target_outside_git(tmp_path: Path) -> None:
    target = current_target(Config(root=tmp_path, state_dir=tmp_path / ".perfctl"))
    assert (target.ref.ref, target.ref.sha, target.cwd) == ("WORKTREE", "", tmp_path)


def test_remove_envs(project: GitRepo) -> None:
    state = project.path / ".perfctl"
    count = len([p for p in (state / "envs").iterdir() if not p.name.startswith(".")])
    assert count >= 4
    (state / "logs" / "regime-run.log").write_text("not a build log: kept")
    assert remove_envs(state) == count
    assert list((state / "envs").iterdir()) == []
    assert not (state / "runtime").exists()
    assert [p.name for p in (state / "logs").iterdir()] == ["regime-run.log"]
    assert remove_envs(state) == 0
