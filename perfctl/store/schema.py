"""Validating a comparison record's JSON before anything is built or rendered from it.

A ``comparison.json`` may come from a forked pull request (the fork-safe
``workflow_run`` job renders it with a write token), so every field is
hostile until checked: the file size is capped before parsing, ``NaN`` and
``Infinity`` are refused by the parser, and :func:`validate_comparison_dict`
then checks the whole tree against the record schema of
:mod:`perfctl.model`: verdicts and statuses from their fixed sets, numbers
finite, strings and lists bounded, nesting bounded. Anything else is a
:class:`SchemaError` that names the field (``regimes[3].verdict``); unknown
keys are ignored (never rendered), but count toward the bounds.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfctl.errors import UsageError
from perfctl.model import FAILED, OK, SKIPPED, VERDICTS, Comparison
from perfctl.stats.band import alpha_in_range, band_in_range

MAX_FILE_BYTES = 64 * 2**20  # a 2,000-regime rigorous comparison is ~20 MB
MAX_STRING = 20_000  # characters in any one string
MAX_ITEMS = 100_000  # entries in any one list or object
MAX_DEPTH = 12  # the schema itself nests 5 deep; settings may add a little
STATUSES = (OK, FAILED, SKIPPED)

Check = Callable[[Any, str], None]
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_.=\-]{1,60}$")


class SchemaError(UsageError):
    """A comparison file does not match the schema (exit 2); ``field`` says where."""


def _fail(where: str, what: str) -> SchemaError:
    return SchemaError(
        f"{where}: {what}" if where else what, "pass the comparison.json written by `perfctl ci`"
    )


def _key(key: Any) -> str:
    """A key for a field path: as it is when plain, else quoted and clipped."""
    text = str(key)
    return text if _PLAIN_KEY.match(text) else _shown(text)


def _shown(value: Any) -> str:
    text = str(value)
    # repr() escapes control and bidi characters, so the error line stays inert.
    return repr(text[:40] + ("…" if len(text) > 40 else ""))


# -- leaf checks ---------------------------------------------------------------------
def _string(value: Any, where: str) -> None:
    if not isinstance(value, str):
        raise _fail(where, f"expected a string, got {type(value).__name__}")


# JSON integers are unbounded: past int64 one would fail later, in arithmetic (internal).
INT_LIMIT = 2**63


def _number(value: Any, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(where, f"expected a number, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise _fail(where, "expected a finite number")
    if isinstance(value, int):
        _integer(value, where)


def _integer(value: Any, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(where, f"expected an integer, got {type(value).__name__}")
    if abs(value) >= INT_LIMIT:
        raise _fail(where, "a number too large (beyond ±2**63)")


def _boolean(value: Any, where: str) -> None:
    if not isinstance(value, bool):
        raise _fail(where, f"expected true or false, got {type(value).__name__}")


def _one_of(choices: tuple[str, ...], noun: str) -> Check:
    def check(value: Any, where: str) -> None:
        if value not in choices:
            raise _fail(where, f"unknown {noun} {_shown(value)} (known: {', '.join(choices)})")

    return check


def _fraction(in_range: Callable[[float], bool], low: str) -> Check:
    def check(value: Any, where: str) -> None:
        _number(value, where)
        if not in_range(value):  # stats.band's ranges, as for flags and the config
            raise _fail(where, f"must lie {low} 0 and below 1, got {value!r}")

    return check


_BAND = _fraction(band_in_range, "above")  # a regime's own: 0 is the comparison's to choose
_COMPARISON_BAND = _fraction(lambda v: band_in_range(v, none=True), "from")  # 0: no band
_ALPHA = _fraction(alpha_in_range, "above")


def _optional(inner: Check) -> Check:
    def check(value: Any, where: str) -> None:
        if value is not None:
            inner(value, where)

    return check


def _list_of(inner: Check) -> Check:
    def check(value: Any, where: str) -> None:
        if not isinstance(value, list):
            raise _fail(where, f"expected a list, got {type(value).__name__}")
        for i, item in enumerate(value):
            inner(item, f"{where}[{i}]")

    return check


def _map_of(inner: Check) -> Check:
    def check(value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise _fail(where, f"expected an object, got {type(value).__name__}")
        for key, item in value.items():
            inner(item, f"{where}.{_key(key)}")

    return check


def _anything(value: Any, where: str) -> None:
    """Free-form JSON (settings): bounded by :func:`_bounds` alone."""


def _record(fields: dict[str, Check], required: tuple[str, ...]) -> Check:
    def check(value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise _fail(where, f"expected an object, got {type(value).__name__}")
        for key in required:
            if key not in value:
                raise _fail(where, f"missing field `{key}`")
        for key, inner in fields.items():
            if key in value:
                inner(value[key], f"{where}.{key}" if where else key)

    return check


# -- the schema (mirrors perfctl.model) ----------------------------------------------
_NUMBERS = _list_of(_number)
_REF = _record(
    {"ref": _string, "sha": _string, "subject": _string, "date": _string, "dirty": _boolean},
    ("ref", "sha"),
)
_MACHINE_FIELDS: dict[str, Check] = {
    "id": _string,
    "cpu_model": _string,
    "cores": _integer,
    "memory_bytes": _integer,
    "kernel": _string,
    "governor": _string,
    "python": _string,
    "hostname": _string,
}
_MACHINE = _record(_MACHINE_FIELDS, ("id", "cpu_model", "cores", "memory_bytes"))
_SIDE_FLOATS = ("median_s", "q1_s", "q3_s", "ci_low_s", "ci_high_s", "cv")
_SIDE = _record(
    {
        **dict.fromkeys(_SIDE_FLOATS, _number),
        "n_processes": _integer,
        "baseline_ratio": _optional(_number),
    },
    (*_SIDE_FLOATS, "n_processes"),
)
_REGIME_FIELDS: dict[str, Check] = {
    **dict.fromkeys(("name", "family", "reason", "description"), _string),
    "verdict": _one_of(VERDICTS, "verdict"),
    **dict.fromkeys(("base", "head"), _optional(_SIDE)),
    **dict.fromkeys(("change", "ci_low", "ci_high", "p_value", "p_adjusted"), _optional(_number)),
    **dict.fromkeys(("base_status", "head_status"), _one_of(STATUSES, "status")),
    **dict.fromkeys(("base_values", "head_values"), _list_of(_NUMBERS)),
    **dict.fromkeys(("base_order", "head_order"), _list_of(_integer)),
    "baseline": _optional(_string),
    **dict.fromkeys(("metrics_base", "metrics_head"), _map_of(_number)),
    "artifacts": _map_of(_string),
    # A pairing this perfctl does not know (a newer one's) is analysed unpaired.
    "pairing": _string,
    "seconds": _number,
    "threshold": _optional(_BAND),  # a regime's own band
}
_COMPARISON = _record(
    {
        **dict.fromkeys(
            ("id", "created", "correction", "base_run", "head_run", "recomputed_from"),
            _string,
        ),
        **dict.fromkeys(("base", "head"), _REF),
        "machine": _MACHINE,
        "head_machine": _optional(_MACHINE),
        "regimes": _list_of(_record(_REGIME_FIELDS, ("name", "family", "verdict"))),
        "settings": _map_of(_anything),
        "threshold": _COMPARISON_BAND,
        "alpha": _ALPHA,
        "commits": _list_of(_REF),
        "warnings": _list_of(_string),
        # A kind this perfctl does not know (a newer one's) is read as "other", not refused.
        "warning_kinds": _list_of(_string),
        "schema": _integer,
    },
    ("id", "created", "base", "head", "machine", "regimes"),
)


def _bounds(value: Any, where: str = "", depth: int = 0) -> None:
    """Depth, string length, container size and finite numbers, for every node."""
    if depth > MAX_DEPTH:
        raise _fail(where, f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, str) and len(value) > MAX_STRING:
        raise _fail(where, f"a string of {len(value):,} characters (at most {MAX_STRING:,})")
    if isinstance(value, float) and not math.isfinite(value):
        raise _fail(where, "expected a finite number")
    if isinstance(value, list | dict) and len(value) > MAX_ITEMS:
        raise _fail(where, f"{len(value):,} entries (at most {MAX_ITEMS:,})")
    if isinstance(value, dict):
        for key, item in value.items():
            _bounds(key, f"{where}.{_key(key)}", depth + 1)
            _bounds(item, f"{where}.{_key(key)}" if where else _key(key), depth + 1)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _bounds(item, f"{where}[{i}]", depth + 1)


def validate_comparison_dict(data: Any) -> None:
    """Raise SchemaError (naming the field) unless ``data`` is a valid comparison record."""
    if not isinstance(data, dict):
        raise _fail("", f"expected a JSON object, got {type(data).__name__}")
    _bounds(data)
    _COMPARISON(data, "")


_RESULT = _record(
    {
        **dict.fromkeys(("name", "family", "reason", "log_path", "pyperf_file"), _string),
        **dict.fromkeys(("description", "unit", "clock", "pairing"), _string),
        "status": _one_of(STATUSES, "status"),
        **dict.fromkeys(("ops", "loops"), _integer),
        "processes": _list_of(_NUMBERS),
        "order": _list_of(_integer),
        "baseline": _optional(_string),
        "params": _map_of(_anything),
        "metrics": _map_of(_number),
        "seconds": _number,
        "threshold": _optional(_BAND),
    },
    ("name", "family", "status"),
)
_RUN = _record(
    {
        **dict.fromkeys(("id", "project", "started", "finished", "status"), _string),
        **dict.fromkeys(("python_version", "perfctl_version", "pyperf_version"), _string),
        "ref": _REF,
        "machine": _MACHINE,
        "settings": _map_of(_anything),
        "results": _list_of(_RESULT),
        "schema": _integer,
    },
    ("id", "ref", "machine", "started", "status"),
)


def validate_run_dict(data: Any) -> None:
    """Raise SchemaError (naming the field) unless ``data`` is a valid run record."""
    if not isinstance(data, dict):
        raise _fail("", f"expected a JSON object, got {type(data).__name__}")
    _bounds(data)
    _RUN(data, "")


def parse_json(raw: bytes) -> Any:
    """Parse untrusted JSON with NaN/Infinity refused (ValueError; RecursionError when deep)."""
    return json.loads(raw.decode("utf-8"), parse_constant=_no_constant)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _read_raw(path: Path, limit: int) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit + 1)  # never more: /dev/zero or a huge file stop here
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}", "check the path") from exc


def _too_large(path: Path, limit: int) -> SchemaError:
    return SchemaError(
        f"{path} is larger than {limit // 2**20} MiB", "is it really a comparison.json?"
    )


def _parse(path: Path, raw: bytes) -> Any:
    try:
        return parse_json(raw)
    except RecursionError as exc:
        raise SchemaError(f"{path}: nested too deeply", "not a perfctl comparison") from exc
    except (UnicodeDecodeError, ValueError) as exc:
        raise SchemaError(
            f"{path} is not valid JSON ({exc})", "pass the comparison.json written by `perfctl ci`"
        ) from exc


def _read_json(path: Path, limit: int) -> Any:
    raw = _read_raw(path, limit)
    if len(raw) > limit:
        raise _too_large(path, limit)
    return _parse(path, raw)


def load_comparison_json(path: Path, limit: int = MAX_FILE_BYTES) -> dict[str, Any]:
    """Read, size-check, parse and validate a comparison file; SchemaError names the field."""
    data = _read_json(path, limit)
    try:
        validate_comparison_dict(data)
    except SchemaError as exc:
        raise SchemaError(f"{path}: {exc.message}", exc.hint) from exc
    return data


def read_comparison_file(path: Path) -> Comparison:
    """A comparison from a comparison.json (maybe a fork's): size-capped, schema-checked.

    The file is hostile input (see perfctl.store.schema): anything outside the
    schema is a UsageError naming the field, before anything is rendered.
    """
    return _comparison(path, load_comparison_json(path), "")


def _comparison(path: Path, data: Any, where: str) -> Comparison:
    """Validate and build one comparison record; errors name the file (and item)."""
    from perfctl.model import comparison_from_dict

    try:
        validate_comparison_dict(data)
        return comparison_from_dict(data)
    except SchemaError as exc:
        raise SchemaError(f"{path}: {where}{exc.message}", exc.hint) from exc
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # schema drift: a bug
        raise UsageError(
            f"{path}: {where}not a perfctl comparison ({type(exc).__name__})",
            "pass the comparison.json (or signals.json) written by `perfctl ci`",
        ) from exc


SIGNALS_KIND = "perfctl-signals"  # `compare`/`ci --measure a,b`: render/signals.py
MAX_SIGNALS = 3  # time, instructions, memory: one comparison each at most
# signals_json writes schema and kind first: a big file must say so up front.
_SIGNALS_HEAD = b'"kind": "perfctl-signals"'


def read_comparisons_file(path: Path) -> tuple[Comparison, ...]:
    """One comparison (comparison.json) or several signals' (signals.json), schema-checked.

    Hostile input, as :func:`read_comparison_file`; read and parsed once. Only a file
    that says it is a signals file in its first bytes may be larger than one
    comparison's cap (one cap per signal), and it holds at most one comparison per
    signal, each validated as a comparison.json is.
    """
    raw = _read_raw(path, MAX_FILE_BYTES * MAX_SIGNALS)
    signals = _SIGNALS_HEAD in raw[:200]
    limit = MAX_FILE_BYTES * (MAX_SIGNALS if signals else 1)
    if len(raw) > limit:
        raise _too_large(path, limit)
    data = _parse(path, raw)
    if not (isinstance(data, dict) and data.get("kind") == SIGNALS_KIND):
        if len(raw) > MAX_FILE_BYTES:
            raise _too_large(path, MAX_FILE_BYTES)
        return (_comparison(path, data, ""),)
    items = data.get("comparisons")
    schema = data.get("schema")
    if (
        type(schema) is not int
        or schema != 1
        or not isinstance(items, list)
        or not (1 <= len(items) <= MAX_SIGNALS)
    ):
        raise SchemaError(
            f"{path}: a {SIGNALS_KIND} file of schema 1 holds 1 to {MAX_SIGNALS} comparisons",
            "pass the signals.json written by `perfctl ci --measure a,b`",
        )
    return tuple(_comparison(path, item, f"comparisons[{i}]: ") for i, item in enumerate(items))
