"""`perfctl init`: configuration, a starter regimes file and GitHub workflows.

What it writes, relative to the project directory:

* ``[tool.perfctl]`` appended to pyproject.toml (or perfctl.toml when there is
  no pyproject.toml); an existing perfctl table is kept as it is;
* ``benchmarks/regimes.py`` with one example regime, unless the project is
  already configured;
* ``.perfctl/`` added to .gitignore (perfctl's state: store, worktrees, envs);
* with ``--ci github``: ``.github/workflows/perfctl.yml`` (measure) and
  ``.github/workflows/perfctl-comment.yml`` (fork-safe commenting); with
  ``--shards N`` (N ≥ 2) perfctl.yml is a matrix of N shard jobs and one
  fan-in job that merges, summarises, comments and gates.

Nothing is overwritten unless ``--force``: a file that exists with other
content is a :class:`~perfctl.errors.UsageError` naming it. pyproject.toml
and .gitignore are only ever appended to, never rewritten.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from perfctl import __version__
from perfctl.errors import ConfigError, UsageError
from perfctl.files import check_output_file

REGIMES_PATH = "benchmarks/regimes.py"
WORKFLOWS = {
    ".github/workflows/perfctl.yml": "workflow-github.yml",
    ".github/workflows/perfctl-comment.yml": "workflow-github-comment.yml",
}
SHARDED = "workflow-github-sharded.yml"
SHARD_MARKERS = ("__PERFCTL_SHARD_COUNT__", "__PERFCTL_SHARD_LIST__")
MAX_SHARDS = 64  # GitHub allows 256 matrix jobs; past 64 a shard is mostly set-up time
CI_KINDS = ("github",)
# What the workflows pip-install: pinned to the perfctl that wrote them, so CI
# measures with the version the project was set up with.
DEFAULT_INSTALL = f"perfctl=={__version__}"
INSTALL_MARKER = "__PERFCTL_INSTALL__"
# A requirement, a URL (git+https://…@tag, …#egg=) or a path: no spaces, quotes or
# shell syntax, since it lands in a workflow's `run:` line.
_INSTALL_SPEC = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9._\-\[\]=<>!~,+:/@%#]*$")
STATE_IGNORE = ".perfctl/"
SETTINGS = f"""regimes = ["{REGIMES_PATH}"]
# threshold = 0.01      # noise band: changes inside ±1% are "within noise"
# alpha = 0.05          # significance level after Benjamini-Hochberg correction
# dependencies = []     # extra packages installed into each ref's environment
"""


@dataclass(frozen=True)
class Step:
    """One file change: write (create or overwrite) or append ``text``."""

    path: Path
    text: str
    mode: str  # "write" | "append"
    action: str  # created | overwritten | appended | unchanged | kept


def template(name: str) -> str:
    """The text of a template shipped in perfctl.render.templates."""
    return files("perfctl.render.templates").joinpath(name).read_text(encoding="utf-8")


def _write(root: Path, rel: str, text: str, force: bool, conflicts: list[str]) -> Step:
    path = root / rel
    if not path.exists():
        return Step(path, text, "write", "created")
    if path.is_file() and path.read_text(encoding="utf-8", errors="replace") == text:
        return Step(path, text, "write", "unchanged")
    if not force:
        conflicts.append(rel)
    return Step(path, text, "write", "overwritten")


def _has_perfctl_table(pyproject: Path) -> bool:
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"{pyproject}: invalid TOML: {exc}",
            "fix the file's syntax, then run `perfctl init` again",
        ) from exc
    return isinstance(data.get("tool"), dict) and "perfctl" in data["tool"]


def config_step(root: Path) -> Step:
    """Append ``[tool.perfctl]`` to pyproject.toml, or write perfctl.toml."""
    pyproject, own = root / "pyproject.toml", root / "perfctl.toml"
    if own.exists():
        return Step(own, "", "write", "kept")
    if not pyproject.exists():
        # Nothing to install without a pyproject: measure the sources in place.
        return Step(own, SETTINGS + 'install = false\npythonpath = ["."]\n', "write", "created")
    if _has_perfctl_table(pyproject):
        return Step(pyproject, "", "append", "kept")
    old = pyproject.read_text(encoding="utf-8")
    text = ("" if old.endswith("\n") or not old else "\n") + "\n[tool.perfctl]\n" + SETTINGS
    try:  # never leave the user's pyproject unparsable
        tomllib.loads(old + text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            f"{pyproject}: cannot append a [tool.perfctl] table ({exc})",
            "add the table by hand, or create perfctl.toml",
        ) from exc
    return Step(pyproject, text, "append", "appended")


def gitignore_step(root: Path) -> Step:
    """Add ``.perfctl/`` to .gitignore unless it is already ignored."""
    path = root / ".gitignore"
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    if any(line.strip().rstrip("/") in (".perfctl", "/.perfctl") for line in old.splitlines()):
        return Step(path, "", "append", "kept")
    sep = "" if old.endswith("\n") or not old else "\n"
    return Step(path, f"{sep}{STATE_IGNORE}\n", "append", "appended" if old else "created")


def install_line(spec: str) -> str:
    """The workflows' pip argument for ``spec``, quoted; UsageError when unsafe."""
    if not _INSTALL_SPEC.match(spec):
        raise UsageError(
            f"--install `{' '.join(spec.split())}` is not a plain requirement, URL or path",
            'e.g. --install "perfctl==0.1.0" or --install git+https://github.com/ORG/perfctl@v0.1.0',
        )
    return shlex.quote(spec)


def workflow_text(name: str, pip_arg: str, shards: int = 1) -> str:
    """A workflow template with its markers filled; ``shards`` ≥ 2 picks the sharded one."""
    if name == WORKFLOWS[".github/workflows/perfctl.yml"] and shards > 1:
        text = template(SHARDED)
        text = text.replace(SHARD_MARKERS[0], str(shards))
        text = text.replace(SHARD_MARKERS[1], str(list(range(1, shards + 1))))
    else:
        text = template(name)
    return text.replace(INSTALL_MARKER, pip_arg)


def _check_shards(ci: str | None, shards: int) -> None:
    if not 1 <= shards <= MAX_SHARDS:
        raise UsageError(
            f"--shards takes 1 to {MAX_SHARDS} (got {shards})", "for example --shards 4"
        )
    if shards > 1 and ci is None:
        raise UsageError("--shards only shapes CI workflows", "add --ci github")


def plan_init(
    root: Path,
    ci: str | None = None,
    force: bool = False,
    install: str = DEFAULT_INSTALL,
    shards: int = 1,
) -> list[Step]:
    """Every change `perfctl init` would make; UsageError if one would clobber a file."""
    pip_arg = install_line(install)
    _check_shards(ci, shards)
    if not root.is_dir():
        raise UsageError(f"{root} is not a directory", "pass an existing project with -C DIR")
    if ci is not None and ci not in CI_KINDS:
        raise UsageError(f"unknown --ci `{ci}`", "supported: " + ", ".join(CI_KINDS))
    conflicts: list[str] = []
    config = config_step(root)
    steps = [config]
    if config.action != "kept":  # an already configured project keeps its regimes
        steps.append(
            _write(root, REGIMES_PATH, template("regimes_starter.py.txt"), force, conflicts)
        )
    steps.append(gitignore_step(root))
    if ci == "github":
        steps += [
            _write(root, rel, workflow_text(name, pip_arg, shards), force, conflicts)
            for rel, name in WORKFLOWS.items()
        ]
    if conflicts:
        raise UsageError(
            f"{' and '.join(conflicts)} already exist{'s' * (len(conflicts) == 1)}",
            "pass --force to overwrite (pyproject.toml and .gitignore are only ever appended to)",
        )
    return steps


def apply(steps: list[Step]) -> None:
    """Carry the planned changes out."""
    for step in steps:
        if step.action in ("kept", "unchanged"):
            continue
        step.path.parent.mkdir(parents=True, exist_ok=True)
        if step.mode == "append":
            with open(step.path, "a", encoding="utf-8") as fh:
                fh.write(step.text)
        else:
            step.path.write_text(step.text, encoding="utf-8")


def init_project(
    root: Path,
    ci: str | None = None,
    force: bool = False,
    install: str = DEFAULT_INSTALL,
    shards: int = 1,
) -> list[Step]:
    """Scaffold perfctl into ``root``; returns what was done, file by file."""
    steps = plan_init(root, ci, force, install, shards)
    for step in steps:  # a planted symlink must not redirect a write (checked before any)
        if step.action not in ("kept", "unchanged"):
            check_output_file(step.path, f"`perfctl init`'s {step.path.name}")
    apply(steps)
    return steps
