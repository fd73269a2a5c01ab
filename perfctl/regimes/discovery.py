"""Host-side regime discovery: resolve regime sources and probe them.

Regimes files are never imported into the perfctl process: a probe worker
imports them in the target environment, so a broken file cannot take perfctl
down and ``requires`` is judged where the regimes will run.
"""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Protocol, TypeVar

from perfctl.config import Config
from perfctl.errors import ConfigError, RegimeLoadError, UsageError
from perfctl.measure import procs
from perfctl.measure.environ import scrubbed_env
from perfctl.measure.workers import WORKERS
from perfctl.model import RegimeInfo
from perfctl.stats.band import declared

PROBE_TIMEOUT = 120.0
# The probe's answer line starts with this, so output of the regimes files is never read as it.
PROBE_MARK = "perfctl-probe: "


def builtin_dir() -> Path:
    """The folder of the built-in regime suite (inside the installed package)."""
    return Path(str(resources.files("perfctl.regimes.builtin")))


def _builtin_files(spec: str) -> list[Path]:
    family = spec.partition(":")[2]
    folder = builtin_dir()
    if not family:
        return sorted(p for p in folder.glob("*.py") if not p.name.startswith("_"))
    path = folder / f"{family}.py"
    if not path.is_file():
        known = sorted(p.stem for p in folder.glob("*.py") if not p.name.startswith("_"))
        raise UsageError(
            f"unknown built-in family `{family}`", "known families: " + ", ".join(known)
        )
    return [path]


def _path_files(spec: str, root: Path) -> list[Path]:
    path = Path(spec)
    path = path if path.is_absolute() else root / path
    if path.is_dir():
        return sorted(p for p in path.rglob("*.py") if not p.name.startswith("_"))
    if path.is_file():
        return [path]
    raise RegimeLoadError(
        f"regimes file `{spec}` does not exist",
        "check the path given with --regimes or in [tool.perfctl] regimes",
    )


def regime_files(config: Config, cli_paths: Sequence[str] = ()) -> list[Path]:
    """The regimes files to load: --regimes first, else config, resolved."""
    specs = list(cli_paths) or list(config.regimes)
    if not specs:
        raise ConfigError(
            "no regimes configured for this project",
            "pass --regimes PATH (or `--regimes builtin` for the bundled suite), or set "
            "[tool.perfctl] regimes = [...] in pyproject.toml",
        )
    files: list[Path] = []
    for spec in specs:
        found = (
            _builtin_files(spec)
            if spec.split(":")[0] == "builtin"
            else _path_files(spec, config.root)
        )
        files.extend(f.resolve() for f in found if f.resolve() not in files)
    return files


def join_files(files: Sequence[Path]) -> str:
    """Files as one worker argument."""
    return os.pathsep.join(str(f) for f in files)


def probe(
    python: Path,
    files: Sequence[Path],
    *,
    cwd: Path,
    env: dict[str, str] | None = None,
    inherit: Sequence[str] = (),
) -> list[RegimeInfo]:
    """Import the files in a worker of ``python`` and return their regimes.

    The probe runs user code, so it gets the workers' scrubbed environment:
    ``env`` and the variables named in ``inherit`` (``inherit_environ``), no more.
    """
    cmd = [str(python), str(WORKERS / "probe.py"), *map(str, files)]
    try:
        # Its own process group: a probe that times out takes its children with it.
        proc = procs.run(
            cmd,
            cwd=cwd,
            env=scrubbed_env(inherit, env),
            timeout=PROBE_TIMEOUT,
        )
    except subprocess.TimeoutExpired as exc:
        raise RegimeLoadError(
            f"importing the regimes files took over {PROBE_TIMEOUT:g} s",
            "importing must not run workloads; move work into the regime function",
        ) from exc
    data = _answer(proc, python)
    if "error" in data:
        err = data["error"]
        raise RegimeLoadError(
            f"{err['where']}: {err['message']}",
            "fix the regimes file; importing it must succeed without running workloads",
        )
    try:
        return [_info(d) for d in data["regimes"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise _garbled(python, exc) from exc


def _answer(proc: subprocess.CompletedProcess[str], python: Path) -> dict[str, Any]:
    """The probe's own answer line; whatever the regimes files print is ignored."""
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(PROBE_MARK)]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        missing = "No module named 'perfctl" in proc.stderr
        raise RegimeLoadError(
            f"cannot load regimes with {python}: {tail} (exit code {proc.returncode})",
            "check that perfctl is importable in that environment"
            if missing
            else "importing the regimes files must not exit the interpreter (sys.exit, "
            "os._exit) or crash it; run `python FILE` to see what it does",
        )
    try:
        data = json.loads(lines[-1][len(PROBE_MARK) :])
    except ValueError as exc:
        raise _garbled(python, exc) from exc
    if not isinstance(data, dict):
        raise _garbled(python, TypeError(type(data).__name__))
    return data


def _garbled(python: Path, exc: Exception) -> RegimeLoadError:
    return RegimeLoadError(
        f"the regimes probe run with {python} gave an unreadable answer ({exc})",
        "the perfctl importable in that environment may be a different version; "
        "reinstall it there (or --rebuild)",
    )


def _info(d: dict[str, object]) -> RegimeInfo:
    return RegimeInfo(
        name=str(d["name"]),
        family=str(d["family"]),
        params=dict(d["params"]),  # type: ignore[call-overload]
        ops=int(d["ops"]),  # type: ignore[call-overload]
        baseline=d["baseline"] if isinstance(d["baseline"], str) else None,
        requires=tuple(d["requires"]),  # type: ignore[arg-type]
        description=str(d["description"]),
        source=str(d["source"]),
        tags=tuple(d["tags"]),  # type: ignore[arg-type]
        timeout=d["timeout"] if isinstance(d["timeout"], (int, float)) else None,
        skip_reason=d["skip_reason"] if isinstance(d["skip_reason"], str) else None,
        clock=str(d.get("clock") or "wall"),
        max_peak=_limit(d.get("max_peak")),
        threshold=declared(d.get("threshold")),
    )


def _limit(value: object) -> int | None:
    """A probe's max_peak: a positive int of bytes, or nothing."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


class Named(Protocol):
    """What selection needs of a regime: discovered (RegimeInfo) or stored (RegimeResult)."""

    @property
    def name(self) -> str: ...

    @property
    def family(self) -> str: ...

    @property
    def baseline(self) -> str | None: ...


R = TypeVar("R", bound=Named)


def glob_hits(regimes: Sequence[R], glob: str) -> list[R]:
    """The regimes one ``--regime`` value names, by ``name`` or ``family.name``.

    An exact name (which may contain ``[...]``) wins over reading it as a glob.
    """
    return [r for r in regimes if glob in (r.name, f"{r.family}.{r.name}")] or [
        r
        for r in regimes
        if fnmatch.fnmatchcase(r.name, glob) or fnmatch.fnmatchcase(f"{r.family}.{r.name}", glob)
    ]


def select(regimes: Sequence[R], globs: Sequence[str], family: str | None = None) -> list[R]:
    """Filter by family and by name globs (each glob must match something)."""
    out = [r for r in regimes if family is None or r.family == family]
    if family is not None and not out:
        fams = sorted({r.family for r in regimes})
        raise UsageError(f"no regime in family `{family}`", "families: " + ", ".join(fams))
    if not globs:
        return out
    chosen: list[R] = []
    for g in globs:
        hits = glob_hits(out, g)
        if not hits:
            import difflib

            close = difflib.get_close_matches(g, [r.name for r in out], n=3)
            raise UsageError(
                f"no regime matches `{g}`",
                ("did you mean: " + ", ".join(close)) if close else "list them with `perfctl list`",
            )
        chosen.extend(h for h in hits if h not in chosen)
    # A selected regime's baseline comes along, so the Slowdown column has its reference.
    by_name = {r.name: r for r in out}
    for r in list(chosen):
        base = by_name.get(r.baseline or "")
        if base is not None and base not in chosen:
            chosen.append(base)
    return chosen
