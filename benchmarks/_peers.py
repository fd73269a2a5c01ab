"""Helpers shared by the compare benchmarks: git, asv, pyperf and small statistics.

Not a benchmark itself. ``false_alarms.py`` and ``orchestration.py`` import it
(scripts run as ``python benchmarks/NAME.py`` have ``benchmarks/`` on sys.path).

asv is driven with a private ``HOME`` so that ``asv machine`` writes its
``.asv-machine.json`` into the benchmark's temporary directory, never into the
user's home; the directory of the real interpreter goes first on ``PATH`` so
that asv's virtualenv finds ``python3.X`` without pyenv shims (which need the
real ``HOME``).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

VENV_BIN = Path(sys.executable).parent
ASV_MACHINE = "bench"
PYVER = f"{sys.version_info.major}.{sys.version_info.minor}"


def tool(name: str) -> str:
    """An executable next to the running interpreter (the venv), else on PATH."""
    cand = VENV_BIN / name
    if cand.exists():
        return str(cand)
    found = shutil.which(name)
    if found is None:
        raise SystemExit(f"{name} not found next to {sys.executable} nor on PATH")
    return found


def load() -> str:
    """The 1/5/15-minute load averages, as `uptime` prints them."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def git(root: Path, *args: str) -> str:
    """Run git in ``root`` (must succeed); its stdout stripped."""
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "bench",
        "GIT_AUTHOR_EMAIL": "bench@example.invalid",
        "GIT_COMMITTER_NAME": "bench",
        "GIT_COMMITTER_EMAIL": "bench@example.invalid",
    }
    out = subprocess.run(
        ["git", *args], cwd=root, env=env, check=True, capture_output=True, text=True
    )
    return out.stdout.strip()


def commit(root: Path, message: str, tag: str | None = None) -> str:
    """Commit everything in ``root``; tag it; return the sha."""
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message)
    if tag:
        git(root, "tag", tag)
    return git(root, "rev-parse", "HEAD")


def init_repo(root: Path) -> None:
    """An empty git repository on branch main."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "commit.gpgsign", "false")


@dataclass(frozen=True)
class Timed:
    """One finished command: exit code, output and wall time."""

    rc: int
    stdout: str
    stderr: str
    wall: float


def timed(
    cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 1800.0
) -> Timed:
    """Run ``cmd`` and time it (wall clock, perf_counter)."""
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return Timed(124, out, "timed out", time.perf_counter() - t0)
    return Timed(p.returncode, p.stdout, p.stderr, time.perf_counter() - t0)


# --- the benchmarked project ------------------------------------------------------

PYPROJECT = """[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{module}"
version = "0.1.0"

[tool.setuptools]
py-modules = ["{module}"]

[tool.perfctl]
regimes = ["perf_regimes.py"]
"""


def write_suites(root: Path, module: str, regimes: str, asv_bench: str) -> None:
    """A fresh repository holding one pure-Python module's perfctl and asv suites.

    The module itself (``<module>.py``) is written and committed by the caller.
    """
    init_repo(root)
    (root / ".gitignore").write_text(".perfctl/\n.asv/\n__pycache__/\n*.egg-info/\nbuild/\n")
    (root / "pyproject.toml").write_text(PYPROJECT.format(module=module))
    (root / "perf_regimes.py").write_text(regimes)
    (root / "benchmarks").mkdir()
    (root / "benchmarks" / "__init__.py").write_text("")
    (root / "benchmarks" / f"bench_{module}.py").write_text(asv_bench)
    write_asv_conf(root, module)


# --- asv -------------------------------------------------------------------------

ASV_CONF = {
    "version": 1,
    "project": "{project}",
    "repo": ".",
    "branches": ["main"],
    "environment_type": "virtualenv",
    "pythons": [PYVER],
    "benchmark_dir": "benchmarks",
    "env_dir": ".asv/env",
    "results_dir": ".asv/results",
    "html_dir": ".asv/html",
}


def write_asv_conf(root: Path, project: str) -> None:
    """asv.conf.json with a virtualenv per commit and benchmarks in ``benchmarks/``."""
    conf = {**ASV_CONF, "project": project}
    (root / "asv.conf.json").write_text(json.dumps(conf, indent=2) + "\n")


def asv_env(home: Path) -> dict[str, str]:
    """The environment for asv: a private HOME, the real interpreter first on PATH."""
    real = Path(os.path.realpath(sys.executable)).parent
    path = os.pathsep.join([str(real), str(VENV_BIN), os.environ.get("PATH", "")])
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    env.update(HOME=str(home), PATH=path)
    return env


def asv_machine(root: Path, home: Path) -> None:
    """Register the benchmark machine (written under the private HOME)."""
    home.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [tool("asv"), "machine", "--yes", "--machine", ASV_MACHINE],
        cwd=root,
        env=asv_env(home),
        check=True,
        capture_output=True,
    )


_ROW = re.compile(
    r"^\|\s*(?P<mark>[+\-!x*]?)\s*\|.*\|\s*(?P<ratio>~?[\d.]+|n/a)\s*\|\s*"
    r"(?P<name>[\w.\[\]=, ]+?)\s*\|\s*$"
)


@dataclass(frozen=True)
class AsvVerdict:
    """What `asv compare` says about one benchmark."""

    mark: str  # "+" slower, "-" faster, "" unchanged, "!" failed
    ratio: float | None  # head/base as asv prints it (2 digits)


def parse_asv_table(text: str, bench: str) -> AsvVerdict | None:
    """The mark and ratio of ``bench`` in an asv compare/continuous table."""
    for line in text.splitlines():
        m = _ROW.match(line.strip())
        if m and m.group("name").strip().endswith(bench):
            raw = m.group("ratio").lstrip("~")
            ratio = None if raw == "n/a" else float(raw)
            return AsvVerdict(m.group("mark"), ratio)
    return None


def asv_compare(
    root: Path, home: Path, base: str, head: str, factor: float, bench: str
) -> AsvVerdict | None:
    """`asv compare --factor F` on stored results (the same test `continuous` applies)."""
    p = subprocess.run(
        [tool("asv"), "compare", "--machine", ASV_MACHINE, "--factor", str(factor), base, head],
        cwd=root,
        env=asv_env(home),
        capture_output=True,
        text=True,
    )
    return parse_asv_table(p.stdout, bench)


# --- statistics ------------------------------------------------------------------


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score 95% interval of a proportion k/n."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def rate(k: int, n: int) -> str:
    """``k/n = p% [lo–hi%]`` with the Wilson interval."""
    lo, hi = wilson(k, n)
    pct = 100 * k / n if n else 0.0
    return f"{k}/{n} = {pct:.0f}% [{100 * lo:.0f}–{100 * hi:.0f}%]"
