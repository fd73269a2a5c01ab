"""Callgrind's call graph of a regime's steady-state loop: where its instructions ran.

``--measure instructions`` runs every process twice under callgrind, with N and
2N loops (:mod:`perfctl.measure.counters`). Subtracting the two *call graphs*,
function by function and call edge by call edge, leaves exactly the loops
N+1..2N, as subtracting the totals does for the value: start-up, imports,
set-up and the warming loops are the same instructions in both processes.
Divided by the loop's operations, that is a per-function profile per op.

A function is its name and the basename of its object (``libpython3.11.so.1.0``,
an extension's ``.so``), so functions pair across refs built in different
worktrees. Callgrind sees machine code: a pure-Python function shows as the
interpreter's C functions it runs (``_PyEval_EvalFrameDefault``,
``lookdict_unicode``...), a C extension's functions by name.

Callgrind records caller→callee edges, not whole stacks. :func:`to_stacks`
rebuilds stacks for a flame graph by sharing each node's inclusive cost among
its callees in proportion to the edges (as gprof-style tools do): exact for a
function called from one place, an estimate where a callee has several callers.
Saved as versioned JSON (``graph.json``, schema 1), checked on load.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfctl.profile.stacks import Frame, Stack, Stacks

SCHEMA = 1
KIND = "perfctl-callgrind-graph"
# Stack branches under this share of the total are folded into their caller's
# self cost: bounds the stacks a flame graph holds (a few thousand at most).
MIN_SHARE = 1e-4
MAX_DEPTH = 128
# Callgrind names a recursive call's deeper levels ``fn'2``, ``fn'3``: one function.
_RECURSION = re.compile(r"'\d+$")


@dataclass(frozen=True)
class Graph:
    """Self cost per function and inclusive cost per call edge (instructions)."""

    self_cost: Mapping[Frame, float] = field(default_factory=dict)
    calls: Mapping[tuple[Frame, Frame], float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        """Every instruction counted (the sum of the self costs)."""
        return sum(self.self_cost.values())

    def inclusive(self) -> dict[Frame, float]:
        """Self plus callees, a function's calls of itself not counted twice."""
        out: dict[Frame, float] = defaultdict(float)
        for fn, cost in self.self_cost.items():
            out[fn] += cost
        for (caller, callee), cost in self.calls.items():
            if caller != callee:
                out[caller] += cost
        return dict(out)


class _Names:
    """Callgrind's name compression: ``(id) name`` defines, ``(id)`` refers."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}

    def read(self, text: str) -> str:
        text = text.strip()
        if text.startswith("("):
            ident, _, name = text.partition(")")
            name = name.strip()
            if name:
                self.seen[ident] = name
                return name
            return self.seen.get(ident, ident + ")")
        return text


def _cost(line: str, positions: int) -> float:
    parts = line.split()
    return float(parts[positions]) if len(parts) > positions else 0.0


def parse(text: str) -> Graph:
    """The call graph of one callgrind output file (first event, ``Ir``)."""
    files, objects, fns = _Names(), _Names(), _Names()
    self_cost: dict[Frame, float] = defaultdict(float)
    calls: dict[tuple[Frame, Frame], float] = defaultdict(float)
    positions, obj, fn = 1, "", Frame("???")
    callee_obj = ""
    callee: Frame | None = None
    in_call = False
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        key, eq, value = line.partition("=")
        if line.startswith("positions:"):
            positions = len(line.split(":", 1)[1].split())
        elif eq and key in ("ob", "cob"):
            name = os.path.basename(objects.read(value))
            obj, callee_obj = (name, name) if key == "ob" else (obj, name)
        elif eq and key in ("fl", "fi", "fe", "cfi", "cfl"):
            files.read(value)  # files are not part of a function's identity here
        elif eq and key == "fn":
            fn, callee_obj = Frame(_RECURSION.sub("", fns.read(value)), obj), obj
        elif eq and key == "cfn":
            callee = Frame(_RECURSION.sub("", fns.read(value)), callee_obj)
        elif eq and key == "calls":
            in_call = True
        elif eq and key in ("jump", "jcnd"):
            continue
        elif line[0].isdigit() or line[0] in "+-*":
            if in_call and callee is not None:
                calls[(fn, callee)] += _cost(line, positions)
                in_call, callee, callee_obj = False, None, obj
            else:
                self_cost[fn] += _cost(line, positions)
    return Graph(dict(self_cost), dict(calls))


def read(path: Path) -> Graph:
    """:func:`parse` of a file."""
    return parse(path.read_text(encoding="utf-8", errors="replace"))


def loop_graph(small: Graph, big: Graph, per: float) -> Graph:
    """``(big - small) / per``: the extra loops' graph per op (residues below 0 dropped)."""

    def minus(b: Mapping[Any, float], s: Mapping[Any, float]) -> dict[Any, float]:
        out = {k: (v - s.get(k, 0.0)) / per for k, v in b.items()}
        return {k: v for k, v in out.items() if v > 0}

    return Graph(minus(big.self_cost, small.self_cost), minus(big.calls, small.calls))


def _frame_dict(f: Frame) -> list[str]:
    return [f.name, f.file]


def to_dict(graph: Graph, meta: Mapping[str, Any]) -> dict[str, Any]:
    """The versioned JSON form; ``meta`` says what was measured (regime, ref, loops)."""
    return {
        "schema": SCHEMA,
        "kind": KIND,
        **meta,
        "self": [[*_frame_dict(f), c] for f, c in sorted(graph.self_cost.items())],
        "calls": [
            [*_frame_dict(a), *_frame_dict(b), c] for (a, b), c in sorted(graph.calls.items())
        ],
    }


def from_dict(data: Mapping[str, Any]) -> Graph:
    """Check and read :func:`to_dict`'s form (ValueError when it is not one)."""
    if data.get("kind") != KIND or data.get("schema") != SCHEMA:
        raise ValueError(f"not a {KIND} file of schema {SCHEMA}")
    self_cost = {Frame(str(n), str(o)): float(c) for n, o, c in data["self"]}
    calls = {
        (Frame(str(a), str(ao)), Frame(str(b), str(bo))): float(c)
        for a, ao, b, bo, c in data["calls"]
    }
    return Graph(self_cost, calls)


def save(graph: Graph, path: Path, meta: Mapping[str, Any]) -> None:
    """Write ``graph.json`` whole (a temporary file renamed into place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(to_dict(graph, meta)) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def load(path: Path) -> Graph:
    """Read a saved graph (ValueError, OSError or KeyError when it cannot be)."""
    return from_dict(json.loads(path.read_text(encoding="utf-8")))


def _callees(graph: Graph) -> dict[Frame, list[tuple[Frame, float]]]:
    out: dict[Frame, list[tuple[Frame, float]]] = defaultdict(list)
    for (caller, callee), cost in sorted(graph.calls.items()):
        if caller != callee:
            out[caller].append((callee, cost))
    return out


def to_stacks(graph: Graph, min_share: float = MIN_SHARE) -> Stacks:
    """Stacks (root first) weighted in instructions, shared out along the call edges."""
    incl = graph.inclusive()
    callees = _callees(graph)
    called = {callee for (caller, callee) in graph.calls if caller != callee}
    roots = sorted(f for f in incl if f not in called and incl[f] > 0)
    floor = min_share * graph.total
    out: dict[Stack, float] = defaultdict(float)
    todo: list[tuple[Frame, float, Stack]] = [(r, incl[r], ()) for r in roots]
    while todo:
        fn, weight, path = todo.pop()
        stack = (*path, fn)
        share = weight / incl[fn] if incl.get(fn) else 0.0
        own = graph.self_cost.get(fn, 0.0) * share
        for callee, cost in callees.get(fn, ()):
            w = cost * share
            if w < floor or callee in stack or len(stack) >= MAX_DEPTH or not incl.get(callee):
                own += w  # too small, recursive or too deep: counted where it was called
            else:
                todo.append((callee, w, stack))
        if own > 0:
            out[stack] += own
    return Stacks(dict(out))
