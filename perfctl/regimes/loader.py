"""Worker-side loading of regimes files: import, expand, find, open.

Runs inside benchmark, probe and profile workers (possibly in another ref's
environment), so it imports nothing beyond the standard library and
:mod:`perfctl.regimes.api`; and of the standard library, nothing a counter worker
would pay for under callgrind (hashlib, inspect, dataclasses, traceback, typing).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import sys
import zlib
from pathlib import Path

from perfctl.regimes import api

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from typing import Any


class LoadFailure(Exception):
    """A regimes file could not be imported; ``where`` is ``file:line``."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message


def _module_name(path: Path) -> str:
    digest = f"{zlib.crc32(str(path).encode()):08x}"  # hashlib loads OpenSSL
    return f"perfctl_regimes_{path.stem}_{digest}"


def _failure_location(path: Path, exc: BaseException) -> str:
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{exc.filename}:{exc.lineno}"
    import traceback

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
    return d.replace(source=str(path))


def load_files(paths: Sequence[Path]) -> list[api.RegimeDef]:
    """Import every file and check the definitions together (names, timeouts, baselines)."""
    defs = [d for p in paths for d in load_file(p)]
    check_defs(defs)
    return defs


def _where(d: api.RegimeDef) -> str:
    code = getattr(d.func, "__code__", None)
    return f"{d.source}:{code.co_firstlineno}" if code is not None else d.source


def _check_timeout(d: api.RegimeDef) -> None:
    t = d.timeout
    # `not 0 < t` also refuses nan; a string ("soon") was silently ignored before.
    if t is not None and (isinstance(t, bool) or not isinstance(t, int | float) or not 0 < t):
        raise LoadFailure(
            _where(d), f"regime {d.name}: timeout must be a number of seconds above 0, got {t!r}"
        )


def check_defs(defs: Sequence[api.RegimeDef]) -> None:
    """LoadFailure for a duplicate name, a bad timeout or a baseline that is not defined."""
    seen: dict[str, api.RegimeDef] = {}
    for d in defs:
        _check_timeout(d)
        for full, _ in d.expand():
            if full in seen:
                raise LoadFailure(
                    _where(d),
                    f"duplicate regime name {full!r}, also defined at {_where(seen[full])}; "
                    "give one of them another name (@regime(name=...))",
                )
            seen[full] = d
    for d in defs:
        for full, kwargs in d.expand():
            target = d.baseline_for(kwargs)
            if target is not None and target not in seen:
                raise LoadFailure(
                    _where(d),
                    f"regime {full}: its baseline {target!r} is not a defined regime",
                )


def find(defs: Sequence[api.RegimeDef], name: str) -> tuple[api.RegimeDef, dict[str, Any]]:
    """The definition and params of one expanded regime name."""
    for d in defs:
        for full, kwargs in d.expand():
            if full == name:
                return d, kwargs
    raise KeyError(name)


class Instance:
    """A set-up regime: the timed callable and an optional metrics callable."""

    __slots__ = ("run", "metrics", "time_loops")

    def __init__(
        self,
        run: Callable[[], Any],
        metrics: Callable[[], dict[str, float]] | None = None,
        time_loops: Callable[[int], float] | None = None,  # the regime's own clock (api.Timed)
    ) -> None:
        self.run = run
        self.metrics = metrics
        self.time_loops = time_loops


_CO_GENERATOR = 0x20  # inspect.CO_GENERATOR, without importing inspect


def _is_generator_function(func: Callable[..., Any]) -> bool:
    """``inspect.isgeneratorfunction``: partials unwrapped, then the code's flags."""
    while isinstance(func, functools.partial):
        func = func.func
    code = getattr(func, "__code__", None)
    return code is not None and bool(code.co_flags & _CO_GENERATOR)


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
    if not _is_generator_function(defn.func):
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
