"""The public regime API: the ``@regime`` decorator and subject look-up.

A regime is a factory that sets up a workload and hands back the timed
callable. It is a generator (``yield run``; code after the ``yield`` is the
teardown and always runs) or a plain function returning ``run``. It may hand
back ``(run, metrics)`` where ``metrics()`` returns extra named values
(latency percentiles, bytes moved...) recorded once per worker process.

This module must stay import-light: it is imported inside every worker. Its two
records are written out rather than made with ``dataclasses``, whose import (with
``inspect``) and class building were a fifth of a counter worker's instructions, run
at ~50x under callgrind in every counter process.
"""

from __future__ import annotations

import importlib
import itertools
import os
import re

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from typing import Any

# Regimes registered by the decorator, in definition order. Discovery snapshots
# and resets this list around each regimes file it imports.
REGISTRY: list[RegimeDef] = []

SUBJECTS_ENV = "PERFCTL_SUBJECTS"
CLOCKS = ("wall", "device")


class _Frozen:
    """Read-only attributes after ``__init__``, equality by value, a dataclass-like repr."""

    __slots__ = ()

    def _set(self, **values: Any) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: {type(self).__name__} is frozen")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}: {type(self).__name__} is frozen")

    def _names(self) -> tuple[str, ...]:
        return type(self).__slots__  # each record class names its own fields

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, n) for n in self._names())

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:  # as a frozen dataclass's: a RegimeDef's params dict refuses
        return hash(self._values())

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:  # pickle and copy, past __setattr__
        return type(self), self._values()

    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._names())
        return f"{type(self).__name__}({shown})"


class Timed(_Frozen):
    """What a regime that times itself hands back (``clock="device"``).

    ``time_loops(loops)`` runs ``run`` ``loops`` times and returns the seconds
    the device spent on them, measured by the subject (CUDA events recorded
    around the calls, synchronised before reading), the way pyperf's
    ``bench_time_func`` expects. Set-up a call needs but that must not be timed
    (an L2 flush) happens inside ``time_loops``, outside the events.
    """

    __slots__ = __match_args__ = ("run", "time_loops", "metrics")
    run: Callable[[], Any]
    time_loops: Callable[[int], float]
    metrics: Callable[[], dict[str, float]] | None

    def __init__(
        self,
        run: Callable[[], Any],
        time_loops: Callable[[int], float],
        metrics: Callable[[], dict[str, float]] | None = None,
    ) -> None:
        self._set(run=run, time_loops=time_loops, metrics=metrics)


class RegimeDef(_Frozen):
    """One decorated regime function, before param expansion."""

    __slots__ = __match_args__ = (
        "func", "name", "family", "ops", "params", "baseline", "requires", "timeout",
        "tags", "description", "source", "metrics", "clock", "max_peak", "threshold",
    )  # fmt: skip
    func: Callable[..., Any]
    name: str
    family: str
    ops: int
    params: Mapping[str, Sequence[Any]]
    baseline: str | None
    requires: tuple[str, ...]
    timeout: float | None
    tags: tuple[str, ...]
    description: str
    source: str
    metrics: tuple[str, ...]
    clock: str
    max_peak: int | None  # bytes: --measure memory's peak traced memory must stay below
    threshold: float | None  # the regime's own noise band (None: the comparison's)

    def __init__(  # noqa: PLR0913 - the record's fields, as a dataclass would take them
        self,
        func: Callable[..., Any],
        name: str,
        family: str,
        ops: int,
        params: Mapping[str, Sequence[Any]],
        baseline: str | None,
        requires: tuple[str, ...],
        timeout: float | None,
        tags: tuple[str, ...],
        description: str,
        source: str = "",
        metrics: tuple[str, ...] = (),
        clock: str = "wall",
        max_peak: int | None = None,
        threshold: float | None = None,
    ) -> None:
        self._set(func=func, name=name, family=family, ops=ops, params=params,
                  baseline=baseline, requires=requires, timeout=timeout, tags=tags,
                  description=description, source=source, metrics=metrics, clock=clock,
                  max_peak=max_peak, threshold=threshold)  # fmt: skip

    def replace(self, **changes: Any) -> RegimeDef:
        """A copy with some fields changed (``dataclasses.replace``)."""
        return RegimeDef(**{**{n: getattr(self, n) for n in self._names()}, **changes})

    def expand(self) -> list[tuple[str, dict[str, Any]]]:
        """Cartesian product of params as (full name, kwargs) pairs."""
        if not self.params:
            return [(self.name, {})]
        keys = list(self.params)
        out = []
        for combo in itertools.product(*(self.params[k] for k in keys)):
            kwargs = dict(zip(keys, combo, strict=True))
            out.append((full_name(self.name, kwargs), kwargs))
        return out

    def baseline_for(self, kwargs: Mapping[str, Any]) -> str | None:
        """The full name of the baseline regime with the same params.

        ``baseline="r[strategy=lock]"`` pins some params and keeps the rest, so a
        regime's variants can be set against one another (seed 004's lock-free
        queue against the locked one at each thread count); a variant that would
        be its own baseline has none.
        """
        if not self.baseline:
            return None
        root, pinned = _split(self.baseline)
        merged = {**{k: str(v) for k, v in kwargs.items()}, **pinned}
        name = full_name(root, merged)
        return None if name == full_name(self.name, kwargs) else name


def _split(name: str) -> tuple[str, dict[str, str]]:
    """``"r[a=1,b=x]"`` -> ``("r", {"a": "1", "b": "x"})``; ``"r"`` -> ``("r", {})``."""
    root, bracket, inner = name.partition("[")
    if not bracket or not inner.endswith("]"):
        return name, {}
    pairs = (p.partition("=") for p in inner[:-1].split(",") if p)
    return root, {k.strip(): v.strip() for k, _, v in pairs}


def full_name(name: str, kwargs: Mapping[str, Any]) -> str:
    """``echo`` + ``{"size": 64}`` -> ``echo[size=64]``."""
    if not kwargs:
        return name
    inner = ",".join(f"{k}={v}" for k, v in kwargs.items())
    return f"{name}[{inner}]"


# C0/C1 controls (newline, ESC, BEL...), DEL, bidi controls, line/paragraph
# separators: a name holding one could rewrite a terminal line or add a line
# (a marker) to a plan; names are checked where they are defined.
_UNSAFE_NAME = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u061c\u202a-\u202e\u2066-\u2069\u2028\u2029]"
)
NAME_MAX = 200


def check_name(what: str, text: str) -> None:
    """ValueError unless ``text`` is a usable regime/family name (one printable line)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{what} must be a non-empty string, got {text!r}")
    if bad := _UNSAFE_NAME.search(text):
        raise ValueError(
            f"{what} {text!r} contains the control character U+{ord(bad.group()):04X}; "
            "names must be one printable line"
        )
    if len(text) > NAME_MAX:
        raise ValueError(f"{what} {text[:40]!r}... is {len(text)} characters (at most {NAME_MAX})")


def _check_names(d: RegimeDef) -> None:
    check_name("regime name", d.name)
    check_name("family", d.family)
    if d.baseline is not None:
        check_name("baseline", d.baseline)
    for full, _ in d.expand():  # parameter values become part of the name
        check_name("regime name", full)


def regime(
    func: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    family: str = "default",
    ops: int = 1,
    params: Mapping[str, Iterable[Any]] | None = None,
    baseline: str | None = None,
    requires: Iterable[str] = (),
    timeout: float | None = None,
    tags: Iterable[str] = (),
    metrics: Iterable[str] = (),
    clock: str = "wall",
    max_peak: int | str | None = None,
    threshold: float | None = None,
) -> Any:
    """Register a benchmark regime; usable bare (``@regime``) or with options.

    ``clock="device"`` says the regime times itself on a device (it hands back a
    :class:`Timed`, e.g. CUDA events); the worker then records host wall time
    beside it as the ``host_us`` metric. ``max_peak`` (bytes, or ``"24MB"``, ``"512 KiB"``)
    is a memory limit: ``--measure memory`` checks the timed loop's peak traced memory
    against it, and ``--fail-on-regression`` fails when it is over. ``threshold`` (0.10 =
    10%) is the regime's own noise band, in place of the comparison's ``--threshold``.
    """
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {CLOCKS}, got {clock!r}")
    limit = None if max_peak is None else parse_size(max_peak)
    band = None if threshold is None else check_band(threshold)

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        if ops < 1:
            raise ValueError(f"regime {f.__name__}: ops must be >= 1, got {ops}")
        doc = (f.__doc__ or "").strip().splitlines()
        defn = RegimeDef(
            func=f,
            name=name or f.__name__,
            family=family,
            ops=int(ops),
            params={k: list(v) for k, v in (params or {}).items()},
            baseline=baseline,
            requires=tuple(requires),
            timeout=timeout,
            tags=tuple(tags),
            description=doc[0].strip() if doc else "",
            source=getattr(f, "__module__", ""),
            metrics=tuple(metrics),
            clock=clock,
            max_peak=limit,
            threshold=band,
        )
        _check_names(defn)
        REGISTRY.append(defn)
        return f

    return wrap(func) if func is not None else wrap


def check_band(threshold: object) -> float:
    """A regime's ``threshold`` as a float: a fraction above 0 and below 1; ValueError otherwise."""
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
        raise ValueError(f"threshold must be a fraction such as 0.05 (5%), got {threshold!r}")
    from perfctl.stats.band import band_in_range  # only when a regime declares a band

    if not band_in_range(threshold):  # also refuses nan
        raise ValueError(f"threshold must be above 0 and below 1 (0.05 = 5%), got {threshold!r}")
    return float(threshold)


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9,
          "kib": 2**10, "mib": 2**20, "gib": 2**30}  # fmt: skip


def parse_size(size: int | str) -> int:
    """Bytes from ``4096``, ``"24MB"`` (10^6) or ``"24 MiB"`` (2^20); ValueError otherwise."""
    if isinstance(size, bool) or not isinstance(size, (int, str)):
        raise ValueError(f"max_peak must be bytes or a size such as '24MB', got {size!r}")
    if isinstance(size, int):
        number, unit = float(size), ""
    else:
        m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", size)
        if m is None or m.group(2).lower() not in _UNITS:
            raise ValueError(f"max_peak {size!r} is not a size such as '24MB' or '512 KiB'")
        number, unit = float(m.group(1)), m.group(2).lower()
    found = int(number * _UNITS[unit])
    if found <= 0:
        raise ValueError(f"max_peak must be above 0 bytes, got {size!r}")
    return found


def subject(family: str, default: str) -> Callable[..., Any]:
    """The factory for a family's subject: ``--subject family=module:factory``
    (passed to workers through ``PERFCTL_SUBJECTS``) or ``default``."""
    import json

    overrides = json.loads(os.environ.get(SUBJECTS_ENV) or "{}")
    return load_object(overrides.get(family, default))


def load_object(path: str) -> Any:
    """Import ``package.module:attr`` and return the attribute."""
    module_name, _, attr = path.partition(":")
    if not attr:
        raise ValueError(f"{path!r} is not of the form module:factory")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj
