"""Worker-side loading of regimes files: import, expand, find, open.

Runs inside benchmark, probe and profile workers (possibly in another ref's
environment), so it imports nothing beyond the standard library and
:mod:`perfctl.regimes.api`.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import inspect
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfctl.regimes import api


class LoadFailure(Exception):
    """A regimes file could not be imported; ``where`` is ``file:line``."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message


def _module_name(path: Path) -> str:
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    return f"perfctl_regimes_{path.stem}_{digest}"


def _failure_location(path: Path, exc: BaseException) -> str:
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{exc.filename}:{exc.lineno}"
    frames = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(frames):
        if Path(frame.filename).resolve() == path:
            return f"{path}:{frame.lineno}"
    return f"{path}:{frames[-1].lineno if frames else 1}"


def load_file(path: Path) -> list[api.RegimeDef]:
    """Import one regimes file and return the regimes it defines."""
    path = path.resolve()
    start = len(api.REGISTRY)
    spec = importlib.util.spec_from_file_location(_module_name(path), path)
    if spec is None or spec.loader is None:
        raise LoadFailure(str(path), "not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    # The file's own directory is importable, as it would be for `python file.py`.
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - report any import failure
        del api.REGISTRY[start:]
        msg = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, SyntaxError):
            msg = f"SyntaxError: {exc.msg}"
        raise LoadFailure(_failure_location(path, exc), msg) from exc
    finally:
        sys.path.remove(str(path.parent))
    defs = api.REGISTRY[start:]
    return [_with_source(d, path) for d in defs]


def _with_source(d: api.RegimeDef, path: Path) -> api.RegimeDef:
    from dataclasses import replace

    return replace(d, source=str(path))


def load_files(paths: Sequence[Path]) -> list[api.RegimeDef]:
    """Import every file; later definitions of the same name win."""
    out: dict[str, api.RegimeDef] = {}
    for p in paths:
        for d in load_file(p):
            out[d.name] = d
    return list(out.values())


def find(defs: Sequence[api.RegimeDef], name: str) -> tuple[api.RegimeDef, dict[str, Any]]:
    """The definition and params of one expanded regime name."""
    for d in defs:
        for full, kwargs in d.expand():
            if full == name:
                return d, kwargs
    raise KeyError(name)


@dataclass
class Instance:
    """A set-up regime: the timed callable and an optional metrics callable."""

    run: Callable[[], Any]
    metrics: Callable[[], dict[str, float]] | None = None
    time_loops: Callable[[int], float] | None = None  # the regime's own clock (api.Timed)


def _split(handed: Any) -> Instance:
    if isinstance(handed, api.Timed):
        return Instance(handed.run, handed.metrics, handed.time_loops)
    if isinstance(handed, tuple) and len(handed) == 2 and callable(handed[0]):
        return Instance(handed[0], handed[1])
    if not callable(handed):
        raise TypeError(f"regime must hand back a callable, got {type(handed).__name__}")
    return Instance(handed)


@contextlib.contextmanager
def open_regime(defn: api.RegimeDef, kwargs: dict[str, Any]) -> Iterator[Instance]:
    """Set the regime up, yield its Instance, and always run its teardown."""
    if not inspect.isgeneratorfunction(defn.func):
        yield _split(defn.func(**kwargs))
        return
    gen = defn.func(**kwargs)
    instance = _split(next(gen))
    try:
        yield instance
    finally:
        # Code after the generator's `yield` is the teardown: run it to the end.
        with contextlib.suppress(StopIteration):
            next(gen)
