"""Project configuration: ``[tool.perfctl]`` in pyproject.toml or ``perfctl.toml``.

Known keys (all optional)::

    regimes = ["benchmarks/regimes.py"]   # files, dirs, "builtin", "builtin:ipc"
    store = ".perfctl"                    # state dir: store, worktrees, envs
    store = "postgresql://user@host/db"   # or: a shared PostgreSQL store (state stays
                                          # in .perfctl); PERFCTL_STORE_URL overrides
    reports = "reports"                   # generated output
    build = "make"                        # custom build command (argv, no shell)
    dependencies = ["numpy"]              # extra packages for each ref's env
    install = true                        # false: measure from source (PYTHONPATH)
    pythonpath = ["src"]                  # with install = false
    python = "3.11"                       # interpreter for ref environments
    inherit_environ = ["MY_VAR"]          # env vars passed to workers
    subjects = { ipc = "pkg.mod:factory" }
    threshold = 0.01                      # noise band for verdicts (default)
    pairing = "auto"                      # or "process", "same-process" (--pairing)
    alpha = 0.05
    [[tool.perfctl.plan.phases]] ...      # see perfctl.plan.update
"""

from __future__ import annotations

import difflib
import math
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfctl.errors import ConfigError
from perfctl.stats.band import DEFAULT_BAND, alpha_in_range, band_in_range

KNOWN_KEYS = {
    "regimes",
    "store",
    "reports",
    "build",
    "dependencies",
    "install",
    "pythonpath",
    "python",
    "inherit_site_packages",
    "inherit_environ",
    "subjects",
    "threshold",
    "alpha",
    "plan",
    "rounds",
    "time_budget",
    "burst_wait",
    "affinity",
    "pairing",
}
PROJECT_MARKERS = ("pyproject.toml", "perfctl.toml", ".git")


@dataclass(frozen=True)
class Config:
    """The resolved configuration of one project."""

    root: Path
    source: Path | None = None
    regimes: tuple[str, ...] = ()
    state_dir: Path = Path(".perfctl")
    reports_dir: Path = Path("reports")
    build: str | None = None
    dependencies: tuple[str, ...] = ()
    install: bool = True
    pythonpath: tuple[str, ...] = ()
    python: str | None = None
    inherit_site_packages: bool = False
    inherit_environ: tuple[str, ...] = ()
    subjects: dict[str, str] = field(default_factory=dict)
    threshold: float = DEFAULT_BAND
    alpha: float = 0.05
    rounds: int | None = None
    time_budget: float | None = None
    burst_wait: float | None = None
    affinity: str | None = None  # a CPU list, checked where it is used (jobs/settings.py)
    pairing: str | None = None  # auto | process | same-process (--pairing)
    plan: dict[str, Any] = field(default_factory=dict)
    # A postgresql:// URL (may hold a password): never in a repr or a message.
    store_url: str | None = field(default=None, repr=False)

    @property
    def outputs(self) -> tuple[Path, ...]:
        """Folders perfctl writes into the checkout: never the user's changes."""
        return (self.state_dir, self.reports_dir)


def find_root(start: Path, *, standalone: bool = False) -> Path:
    """The nearest directory at or above ``start`` that looks like a project.

    ``standalone`` (the command names its regimes files itself): when no
    project is found, ``start`` is the project, as pyperf and hyperfine need none.
    """
    start = start.resolve()
    for d in (start, *start.parents):
        if any((d / m).exists() for m in PROJECT_MARKERS):
            return d
    if standalone:
        return start
    raise ConfigError(
        f"{start} is not inside a project (no pyproject.toml, perfctl.toml or .git found)",
        "run perfctl from your project's directory, or `perfctl init` to set one up",
    )


def _read_table(root: Path) -> tuple[dict[str, Any], Path | None]:
    for name, path_in in (("perfctl.toml", ()), ("pyproject.toml", ("tool", "perfctl"))):
        path = root / name
        if not path.is_file():
            continue
        try:
            data: Any = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: invalid TOML: {exc}", "fix the file's syntax") from exc
        for key in path_in:
            data = data.get(key, {}) if isinstance(data, dict) else {}
        if data or name == "perfctl.toml":
            return data, path
    return {}, None


def _check_keys(table: dict[str, Any], path: Path | None) -> None:
    for key in table:
        if key not in KNOWN_KEYS:
            close = difflib.get_close_matches(key, sorted(KNOWN_KEYS), n=1)
            hint = (
                f"did you mean `{close[0]}`?"
                if close
                else "known keys: " + ", ".join(sorted(KNOWN_KEYS))
            )
            raise ConfigError(f"{path}: unknown config key `{key}`", hint)


def _expect(
    table: dict[str, Any], key: str, kind: type | tuple[type, ...], path: Path | None
) -> Any:
    value = table.get(key)
    if value is not None and not isinstance(value, kind):
        raise ConfigError(
            f"{path}: `{key}` has the wrong type ({type(value).__name__})",
            "see the configuration section of the README",
        )
    return value


def _fraction(
    table: dict[str, Any],
    key: str,
    path: Path | None,
    default: float,
    in_range: Callable[[float], bool],
    hint: str,
) -> float:
    """A fraction that ``in_range`` accepts (stats.band's ranges); absent: default."""
    value = _expect(table, key, (int, float), path)
    if value is None:
        return default
    if isinstance(value, bool) or not in_range(value):
        raise ConfigError(
            f"{path}: `{key}` = {value!r} is out of range", f"{hint} (default {default:g})"
        )
    return float(value)


def _positive(
    table: dict[str, Any], key: str, kind: type | tuple[type, ...], path: Path | None
) -> Any:
    """A number above zero, or None when absent."""
    value = _expect(table, key, kind, path)
    # `not value > 0` also refuses nan (TOML has it); inf would never stop sampling.
    if value is not None and (isinstance(value, bool) or not 0 < value < math.inf):
        raise ConfigError(
            f"{path}: `{key}` = {value!r} must be a number above 0", "or leave it out"
        )
    return value


def _seconds(table: dict[str, Any], key: str, path: Path | None) -> float | None:
    """A number of seconds, 0 or more, or None when absent."""
    value = _expect(table, key, (int, float), path)
    if value is not None and (isinstance(value, bool) or not 0 <= value < math.inf):
        raise ConfigError(
            f"{path}: `{key}` = {value!r} must be 0 or more seconds", "or leave it out"
        )
    return None if value is None else float(value)


def _cpu_list(table: dict[str, Any], path: Path | None) -> str | None:
    """`affinity`: a CPU list as text (``"0-1,3"``) or one CPU number."""
    value = _expect(table, "affinity", (str, int), path)
    if isinstance(value, bool):
        raise ConfigError(f"{path}: `affinity` = {value!r} must be a CPU list", 'e.g. "0-1"')
    return None if value is None else str(value)


PAIRINGS = ("auto", "process", "same-process")


def _choice(
    table: dict[str, Any], key: str, choices: tuple[str, ...], path: Path | None
) -> str | None:
    value = _expect(table, key, str, path)
    if value is not None and value not in choices:
        raise ConfigError(
            f"{path}: `{key}` = {value!r} is not one of {', '.join(choices)}",
            f"set `{key}` to one of them, or leave it out",
        )
    return value


def _store(table: dict[str, Any], source: Path | None) -> tuple[str | None, str | None]:
    """The `store` key when it names a directory, and the shared store's URL (env first)."""
    from perfctl.store import url

    value = _expect(table, "store", str, source)
    env = url.from_env()
    if env is not None and not url.is_store_url(env):
        raise ConfigError(
            f"{url.ENV_VAR} is not a postgresql:// URL ({url.redact(env)})",
            "set it to postgresql://USER@HOST:PORT/DB, or unset it for the local store",
        )
    if value is not None and url.is_store_url(value):
        return None, env or value
    return value, env


def _store_dir(root: Path, store: str | None, path: Path | None) -> Path:
    """The state dir: a directory of its own, never the project root or above it.

    perfctl writes a ``.gitignore`` of ``*`` into it and `clean` empties it.
    """
    state_dir = root / (store or ".perfctl")
    if root.resolve().is_relative_to(state_dir.resolve()):
        raise ConfigError(
            f"{path}: `store` = {store!r} is the project root or a folder above it",
            'give perfctl a directory of its own, e.g. store = ".perfctl" (the default)',
        )
    return state_dir


def load_config(start: Path | None = None, *, standalone: bool = False) -> Config:
    """Find the project root from ``start`` and read its perfctl configuration.

    ``standalone``: an explicit ``--regimes`` was given, so a directory outside
    any project is a project of its own (see :func:`find_root`).
    """
    root = find_root(start or Path.cwd(), standalone=standalone)
    table, source = _read_table(root)
    _check_keys(table, source)
    regimes = _expect(table, "regimes", (list, str), source) or []
    if isinstance(regimes, str):
        regimes = [regimes]
    state, store_url = _store(table, source)
    return Config(
        root=root,
        source=source,
        regimes=tuple(str(r) for r in regimes),
        state_dir=_store_dir(root, state, source),
        store_url=store_url,
        reports_dir=root / (_expect(table, "reports", str, source) or "reports"),
        build=_expect(table, "build", str, source),
        dependencies=tuple(_expect(table, "dependencies", list, source) or ()),
        install=bool(table.get("install", True)),
        pythonpath=tuple(_expect(table, "pythonpath", list, source) or ()),
        python=_expect(table, "python", str, source),
        inherit_site_packages=bool(_expect(table, "inherit_site_packages", bool, source)),
        inherit_environ=tuple(_expect(table, "inherit_environ", list, source) or ()),
        subjects=dict(_expect(table, "subjects", dict, source) or {}),
        threshold=_fraction(
            table,
            "threshold",
            source,
            DEFAULT_BAND,
            lambda v: band_in_range(v, none=True),
            "use a fraction from 0 and below 1",
        ),
        alpha=_fraction(
            table, "alpha", source, 0.05, alpha_in_range, "use a fraction above 0 and below 1"
        ),
        rounds=_positive(table, "rounds", int, source),
        time_budget=_positive(table, "time_budget", (int, float), source),
        burst_wait=_seconds(table, "burst_wait", source),
        affinity=_cpu_list(table, source),
        pairing=_choice(table, "pairing", PAIRINGS, source),
        plan=dict(_expect(table, "plan", dict, source) or {}),
    )
