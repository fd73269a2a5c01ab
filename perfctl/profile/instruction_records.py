"""The record of an instructions diff: ``functions.json``, its reader and its lines.

Written by :mod:`perfctl.profile.instructions`; read by the renderers. Schema
(version 1, checked on load)::

    {"schema": 1, "kind": "perfctl-instructions-diff", "regime": str,
     "before_run": str, "after_run": str, "unit": "instructions/op",
     "before_total": float, "after_total": float,
     "functions": [{"function", "object", "before_self", "after_self",
                    "before_inclusive", "after_inclusive"}]}

Self counts are exact (callgrind counts them); inclusive ones are estimated from
call edges (see :func:`perfctl.profile.callgrind.to_stacks`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from perfctl.profile.stacks import Frame

SCHEMA = 1
KIND = "perfctl-instructions-diff"


@dataclass(frozen=True)
class FunctionMove:
    """One function's instructions per op on both sides (self exact, inclusive estimated)."""

    function: str
    object: str
    before_self: float
    after_self: float
    before_inclusive: float
    after_inclusive: float

    @property
    def delta_self(self) -> float:
        """Self instructions per op, after minus before."""
        return self.after_self - self.before_self

    @property
    def label(self) -> str:
        """``function (object)``."""
        return Frame(self.function, self.object).label


@dataclass(frozen=True)
class InstructionsDiff:
    """One regime's per-function instruction changes; saved as ``functions.json``."""

    regime: str
    before_run: str
    after_run: str
    before_total: float
    after_total: float
    functions: tuple[FunctionMove, ...]
    unit: str = "instructions/op"


def count(value: float) -> str:
    """Instructions per op as a table shows them: ``12,345`` or ``0.25``."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def to_dict(d: InstructionsDiff) -> dict[str, Any]:
    """The versioned JSON form (the module docstring is its schema)."""
    body = asdict(d)
    body["functions"] = [asdict(m) for m in d.functions]
    return {"schema": SCHEMA, "kind": KIND, **body}


def load_diff(path: Path) -> InstructionsDiff:
    """Read and check ``functions.json`` (ValueError/KeyError/TypeError/OSError if not one)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("kind") != KIND or data.get("schema") != SCHEMA:
        raise ValueError(f"{path} is not a {KIND} file of schema {SCHEMA}")
    funcs = tuple(
        FunctionMove(
            str(m["function"]),
            str(m["object"]),
            *(float(m[k]) for k in ("before_self", "after_self")),
            *(float(m[k]) for k in ("before_inclusive", "after_inclusive")),
        )
        for m in data["functions"]
    )
    return InstructionsDiff(
        str(data["regime"]),
        str(data["before_run"]),
        str(data["after_run"]),
        float(data["before_total"]),
        float(data["after_total"]),
        funcs,
    )


def format_moves(d: InstructionsDiff, limit: int = 5) -> list[str]:
    """The biggest self-instruction changes as aligned lines (``+1,024  lookdict (libpython…)``)."""
    shown = [m for m in d.functions if m.delta_self][:limit]
    if not shown:
        return ["no function's self instructions per op changed"]
    deltas = [("+" if m.delta_self > 0 else "-") + count(abs(m.delta_self)) for m in shown]
    width = max(len(text) for text in deltas)
    return [
        f"{text:>{width}}  {m.label}  ({count(m.before_self)} → {count(m.after_self)})"
        for text, m in zip(deltas, shown, strict=True)
    ]
