"""Environment stage: one isolated, cached virtual environment per ref and build config.

An environment lives in ``<state_dir>/envs/<key>``; ``key`` hashes the commit
(or the WORKTREE fingerprint), the build config (``build``, ``dependencies``,
``install``, ``pythonpath``) and the Python version. uv makes it (``uv venv`` +
``uv pip install``; ``python -m venv`` + pip without uv) in a ``.tmp-`` dir that
is renamed into place only once every step succeeded and a completion marker
was written, so an interrupted build is never reused (its leftovers are swept
next time). Build output goes to ``<state_dir>/logs/<key>.log``.

Workers import the host's ``perfctl`` and ``pyperf`` without installing them:
``perfctl_runtime.pth`` appends ``<state_dir>/runtime/<version>`` (links to the
host's packages) to ``sys.path``, after the project's own packages.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import DEVNULL, STDOUT
from typing import IO

from perfctl.config import Config
from perfctl.errors import BuildError, ConfigError, GitError
from perfctl.git import refs as gitrefs
from perfctl.git.refs import WORKTREE
from perfctl.measure import procs
from perfctl.measure.environ import scrubbed_env
from perfctl.model import Fact, Notice, RefInfo
from perfctl.runtime import RUNTIME_LINKS, host_site_packages, link_runtime
from perfctl.store.lock import project_lock

ENV_FORMAT = 1  # bump when the layout of an environment changes
MARKER = "perfctl-env.json"
Log = Callable[[str], None]


@dataclass(frozen=True)
class Target:
    """Where and with what interpreter one ref's workers run."""

    ref: RefInfo
    python: Path  # interpreter that runs the workers
    cwd: Path  # the worktree (or the user's checkout for WORKTREE / current)
    env: dict[str, str] = field(default_factory=dict)  # extra environment for workers
    env_dir: Path | None = None  # the venv; None for the current interpreter


@dataclass(frozen=True)
class EnvSpec:
    """Everything that decides one environment's content, and its cache key."""

    key: str
    ref: RefInfo
    source: Path  # the project directory the environment is built from
    python: str  # interpreter request for uv / venv
    config: Config
    stamp: str = ""  # identity of the worktree the build ran in


def _worker_env(config: Config, source: Path, in_place: bool = False) -> dict[str, str]:
    """PYTHONPATH for install = false; in place, the PYTHONPATH perfctl runs with follows."""
    if config.install:
        return {}  # the worker inherits PYTHONPATH whole
    own = os.environ.get("PYTHONPATH", "") if in_place else ""  # in place: no .pth of ours
    entries = [str(source / p) for p in config.pythonpath] + [str(source), *own.split(os.pathsep)]
    return {"PYTHONPATH": os.pathsep.join(e for e in entries if e)}


def current_target(config: Config) -> Target:
    """The running interpreter, measuring the checkout in place (for `perfctl run`)."""
    try:
        ref = gitrefs.resolve_ref(config.root, WORKTREE, outputs=config.outputs)
    except GitError:
        ref = RefInfo(ref=WORKTREE, sha="")
    env = _worker_env(config, config.root, in_place=True)
    return Target(ref, Path(sys.executable), config.root, env, None)


def _python_request(config: Config) -> tuple[str, str]:
    """The interpreter to build with, and the version it stands for in the key."""
    if config.python:
        return config.python, f"python={config.python}"
    # The host interpreter itself: same major.minor, and uv never downloads one.
    return sys.executable, f"{sys.implementation.name}-{platform.python_version()}"


def env_key(source_id: str, config: Config, python_id: str) -> str:
    """The cache key of one environment (16 hex digits)."""
    build = [config.build, list(config.dependencies), config.install, list(config.pythonpath)]
    if config.inherit_site_packages:  # appended only when on: existing keys stay as they were
        build.append(["inherit", *host_site_packages()])
    parts = [ENV_FORMAT, source_id, python_id, *build]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def _stamp(worktree: Path) -> str:
    # The .git file is written once when the worktree is made: a re-made
    # worktree has lost what a custom build left in it.
    st = (worktree / ".git").stat()
    return f"{st.st_ino}-{st.st_mtime_ns}"


def env_spec(config: Config, ref: str) -> EnvSpec:
    """Resolve ``ref``, check out its worktree, and work out its environment's key."""
    info = gitrefs.resolve_ref(config.root, ref, outputs=config.outputs)
    request, python_id = _python_request(config)
    if ref == WORKTREE:
        source_id = f"{WORKTREE}:{gitrefs.worktree_fingerprint(config.root, config.outputs)}"
        key = env_key(source_id, config, python_id)
        return EnvSpec(key, info, config.root, request, config)
    worktree = gitrefs.ensure_worktree(config.root, config.state_dir, info.sha)
    source = worktree / gitrefs.project_subdir(config.root)
    key = env_key(info.sha, config, python_id)
    return EnvSpec(key, info, source, request, config, _stamp(worktree))


def _uv_bin() -> str | None:
    """The uv executable (the `uv` Python package's, else one on PATH)."""
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def _venv_python(env_dir: Path) -> Path:
    return env_dir / "bin" / "python"


def _check_dependencies(deps: tuple[str, ...]) -> list[str]:
    for dep in deps:
        if not dep or dep.startswith("-"):
            raise ConfigError(
                f"dependency `{dep}` is not a package requirement",
                'list requirements only, e.g. dependencies = ["numpy>=1.26"]',
            )
    return list(deps)


def _build_argv(build: str) -> list[str]:
    try:
        argv = shlex.split(build)
    except ValueError as exc:
        raise ConfigError(
            f"`build = {build!r}` cannot be split into a command: {exc}",
            "quote it as you would in a shell (it is run without one)",
        ) from exc
    if not argv:
        raise ConfigError("`build` is empty", 'remove it, or give a command such as "make"')
    return argv


def _fallback_python(request: str) -> str:
    if os.sep in request:
        return request
    found = shutil.which(f"python{request}") or shutil.which(request)
    if found is None:
        raise BuildError(
            f"no interpreter found for python = {request!r}",
            "install that Python, or install uv so it can find one",
        )
    return found


def _create_step(spec: EnvSpec, tmp: Path, uv: str | None) -> list[str]:
    seed = spec.config.build is not None  # a custom build may call pip itself
    if uv is not None:
        seeded = ["--seed"] if seed else []
        return [uv, "venv", "--relocatable", "--python", spec.python, *seeded, str(tmp)]
    bare = not (seed or spec.config.install or spec.config.dependencies)
    without_pip = ["--without-pip"] if bare else []
    return [_fallback_python(spec.python), "-m", "venv", *without_pip, str(tmp)]


def _project_name(source: Path) -> str | None:
    try:
        data = tomllib.loads((source / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    name = data.get("project", {}).get("name")
    return name if isinstance(name, str) and not name.startswith("-") else None


def _refresh(src: Path) -> list[str]:
    # uv may reuse a wheel it built before from a directory at the same path
    # (a WORKTREE snapshot, a re-made worktree): always build it afresh.
    name = _project_name(src)
    return ["--refresh-package", name] if name else []


def _installs_project(spec: EnvSpec) -> bool:
    return spec.config.install and spec.config.build is None


@contextlib.contextmanager
def _install_source(spec: EnvSpec) -> Iterator[Path]:
    """Where to install the project from: WORKTREE via a snapshot, to keep the checkout clean."""
    if spec.ref.ref != WORKTREE or not spec.ref.sha or not _installs_project(spec):
        yield spec.source
        return
    config = spec.config
    with gitrefs.worktree_snapshot(config.root, config.state_dir, config.outputs) as snapshot:
        yield snapshot / gitrefs.project_subdir(spec.config.root)


def _install_step(spec: EnvSpec, tmp: Path, uv: str | None, src: Path) -> list[str] | None:
    project = [str(src)] if _installs_project(spec) else []
    wanted = project + _check_dependencies(spec.config.dependencies)
    if not wanted:
        return None
    if uv is not None:
        refresh = _refresh(src) if project else []
        return [uv, "pip", "install", "--python", str(_venv_python(tmp)), *refresh, *wanted]
    return [str(_venv_python(tmp)), "-m", "pip", "install", "--no-input", *wanted]


def _steps(spec: EnvSpec, tmp: Path, src: Path) -> list[list[str]]:
    uv = _uv_bin()
    steps = [_create_step(spec, tmp, uv), _install_step(spec, tmp, uv, src)]
    if spec.config.build is not None:
        steps.append(_build_argv(spec.config.build))
    return [s for s in steps if s is not None]


def _step_env(spec: EnvSpec, tmp: Path) -> dict[str, str]:
    """The environment of build steps: scrubbed, the new venv activated, uv on PATH."""
    env = scrubbed_env(spec.config.inherit_environ, build=True)
    uv = _uv_bin()
    extra = [str(Path(uv).parent)] if uv else []
    env["PATH"] = os.pathsep.join([str(tmp / "bin"), env.get("PATH", ""), *extra])
    env["VIRTUAL_ENV"] = str(tmp)
    env.update(_worker_env(spec.config, spec.source))
    return env


def _run_step(
    argv: list[str], spec: EnvSpec, env: dict[str, str], log: IO[str], log_path: Path
) -> None:
    command = shlex.join(argv)
    log.write(f"$ {command}\n")
    log.flush()
    try:
        # No stdin: a build that prompts must fail, not hang.
        # Its own process group, killed whole when perfctl stops (SIGTERM, Ctrl-C).
        rc = procs.call(argv, cwd=spec.source, env=env, stdin=DEVNULL, stdout=log, stderr=STDOUT)
    except OSError as exc:
        log.write(f"{exc}\n")
        raise _build_failed(spec, command, f"could not run ({exc.strerror})", log_path) from exc
    if rc != 0:
        raise _build_failed(spec, command, f"exited with status {rc}", log_path)


def _build_failed(spec: EnvSpec, command: str, what: str, log_path: Path) -> BuildError:
    return BuildError(
        f"building the environment of {spec.ref.ref} ({spec.ref.short}) failed: "
        f"`{command}` {what}; build log: {log_path}",
        f"read {log_path}, fix the build or the `python`/`build`/`dependencies` settings, "
        "then re-run (--rebuild starts from scratch)",
    )


def _complete(env_dir: Path, spec: EnvSpec) -> bool:
    marker = env_dir / MARKER
    if not marker.is_file() or not _venv_python(env_dir).exists():
        return False
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
    except ValueError:
        return False
    # A custom build leaves products in the worktree: a re-made one needs a rebuild.
    return spec.config.build is None or data.get("stamp") == spec.stamp


def _write_marker(tmp: Path, spec: EnvSpec, build_s: float) -> None:
    data = {"format": ENV_FORMAT, "key": spec.key, "stamp": spec.stamp, "python": spec.python}
    data |= {"ref": spec.ref.ref, "sha": spec.ref.sha, "source": str(spec.source)}
    data["created"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    data["build_s"] = round(build_s, 2)
    (tmp / MARKER).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _relocate(tmp: Path, env_dir: Path) -> None:
    """Point scripts that name the temporary path (pip's shebangs) at the final one."""
    before, after = str(tmp).encode(), str(env_dir).encode()
    for script in (tmp / "bin").iterdir():
        if script.is_symlink() or not script.is_file() or script.stat().st_size > 1 << 20:
            continue
        data = script.read_bytes()
        if before in data and (data.startswith(b"#!") or script.name.startswith("activate")):
            script.write_bytes(data.replace(before, after))


def _sweep(envs: Path, key: str) -> None:
    """Remove what killed builds of ``key`` left behind (we hold the lock)."""
    for leftover in [*envs.glob(f".tmp-{key}-*"), *envs.glob(f".old-{key}-*")]:
        shutil.rmtree(leftover, ignore_errors=True)


def _swap(tmp: Path, env_dir: Path) -> None:
    """Move the finished build into place; the final name never holds a partial env."""
    old = env_dir.with_name(f".old-{env_dir.name}-{os.getpid()}")
    if env_dir.exists():
        os.rename(env_dir, old)
    os.rename(tmp, env_dir)
    shutil.rmtree(old, ignore_errors=True)


def _built_note(env_dir: Path) -> str:
    """`` (built in 12.3 s)`` from the environment's marker; empty when unknown."""
    try:
        seconds = json.loads((env_dir / MARKER).read_text(encoding="utf-8")).get("build_s")
    except (OSError, ValueError, AttributeError):
        return ""
    return f" (built in {seconds:.1f} s)" if isinstance(seconds, int | float) else ""


def _build(spec: EnvSpec, env_dir: Path, log_path: Path, started: float) -> None:
    envs = env_dir.parent
    envs.mkdir(parents=True, exist_ok=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    _sweep(envs, spec.key)
    tmp = envs / f".tmp-{spec.key}-{os.getpid()}"
    try:
        with open(log_path, "w", encoding="utf-8") as log, _install_source(spec) as src:
            log.write(f"# perfctl environment {spec.key} for {spec.ref.ref} ({spec.ref.sha})\n")
            env = _step_env(spec, tmp)
            for argv in _steps(spec, tmp, src):
                _run_step(argv, spec, env, log, log_path)
        link_runtime(spec.config.state_dir, tmp, spec.config.inherit_site_packages)
        _relocate(tmp, env_dir)
        _write_marker(tmp, spec, time.monotonic() - started)
        _swap(tmp, env_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def prepare_target(
    config: Config, ref: str, *, rebuild: bool = False, log: Log | None = None
) -> Target:
    """Check out ``ref`` and build (or reuse) its environment; the Target to run it."""
    say: Log = log or (lambda _msg: None)
    with project_lock(config.state_dir, what=f"preparing {ref}"):
        spec = env_spec(config, ref)
        env_dir = config.state_dir / "envs" / spec.key
        log_path = config.state_dir / "logs" / f"{spec.key}.log"
        if rebuild or not _complete(env_dir, spec):
            say(Notice(f"{ref}: building environment {spec.key} (log: {log_path})"))
            started = time.monotonic()
            _build(spec, env_dir, log_path, started)
            took = time.monotonic() - started
            say(Notice(f"{ref}: environment {spec.key} ready in {took:.1f} s"))
        else:
            # A Fact: a command that compares many times (bisect) says it once.
            say(Fact(f"{ref}: reusing environment {spec.key}{_built_note(env_dir)}"))
            link_runtime(config.state_dir, env_dir, config.inherit_site_packages)
    extra = _worker_env(config, spec.source)
    return Target(spec.ref, _venv_python(env_dir), spec.source, extra, env_dir)


_KEY = re.compile(r"[0-9a-f]{16}")
_LEFTOVER = re.compile(r"\.(tmp|old)-[0-9a-f]{16}-\d+")  # what a killed build leaves


def _ours(path: Path) -> bool:
    """Made by perfctl: a finished env (its key and marker) or a killed build's leftover."""
    finished = _KEY.fullmatch(path.name) and (path / MARKER).is_file()
    return (
        path.is_dir() and not path.is_symlink() and bool(finished or _LEFTOVER.fullmatch(path.name))
    )


def remove_envs(state_dir: Path) -> int:
    """Remove perfctl's environments, runtime links and build logs; returns how many envs."""
    envs, runtime = state_dir / "envs", state_dir / "runtime"
    with project_lock(state_dir, what="removing environments"):
        found = [p for p in sorted(envs.glob("*")) if _ours(p)]
        links = [p for p in runtime.glob("*/*") if p.is_symlink() and p.name in RUNTIME_LINKS]
        logs = [p for p in (state_dir / "logs").glob("*.log") if _KEY.fullmatch(p.stem)]
        for path in found:
            shutil.rmtree(path, ignore_errors=True)
        for path in [*links, *logs]:
            path.unlink()
        for folder in [*runtime.glob("*"), runtime]:
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when nothing of the user's is left in it
    return sum(1 for p in found if not p.name.startswith("."))
