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

Names keep callgrind's recursion levels (``f'2`` is ``f`` called while ``f`` is
already running), so an edge into ``f`` carries the exact inclusive cost of its
outermost activation; :meth:`Graph.functions` merges the levels for the
per-function self counts, which are exact. Callgrind records caller→callee
edges, not whole stacks: :func:`to_stacks` rebuilds stacks for a flame graph by
collapsing what is left of cycles into one node each (as gprof does) and sharing
each node's inclusive cost among its callees in proportion to the edges: exact
for a function called from one place, an estimate where a callee has several
callers. Saved as versioned JSON (``graph.json``, schema 1), checked on load.
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
# self cost: bounds the stacks a flame graph holds (each kept stack holds at least
# this share, so a few ten thousand at most, times the depth).
MIN_SHARE = 1e-4
MAX_DEPTH = 128
# Callgrind names a recursive call's deeper levels ``fn'2``, ``fn'3``: one function.
_RECURSION = re.compile(r"'\d+$")
_COMPRESSED = re.compile(r"\((\d+)\)(?:\s+(.*))?", re.S)


@dataclass(frozen=True)
class Graph:
    """Self cost per function (recursion levels apart) and inclusive cost per call edge."""

    self_cost: Mapping[Frame, float] = field(default_factory=dict)
    calls: Mapping[tuple[Frame, Frame], float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        """Every instruction counted (the sum of the self costs)."""
        return sum(self.self_cost.values())

    def functions(self) -> dict[Frame, float]:
        """Exact self cost per function, its recursion levels merged."""
        out: dict[Frame, float] = defaultdict(float)
        for fn, cost in self.self_cost.items():
            out[function_of(fn)] += cost
        return dict(out)


def function_of(frame: Frame) -> Frame:
    """The function of a recursion level: ``f'2`` -> ``f``."""
    return Frame(_RECURSION.sub("", frame.name), frame.file)


class _Names:
    """Callgrind's name compression: ``(id) name`` defines, ``(id)`` refers."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}

    def read(self, text: str) -> str:
        text = text.strip()
        m = _COMPRESSED.fullmatch(text)
        if m is None:
            return text  # not compressed (--compress-strings=no), e.g. "(anonymous namespace)::f"
        ident, name = m.groups()
        if name:
            self.seen[ident] = name
            return name
        return self.seen.get(ident, f"({ident})")


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
            fn, callee_obj = Frame(fns.read(value), obj), obj
        elif eq and key == "cfn":
            callee = Frame(fns.read(value), callee_obj)
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
    """``(big - small) / per``: the extra loops' graph per op.

    Signed: a function the N-loop process ran a few instructions more of (a
    branch of teardown) keeps its small negative residue, so the self costs still
    sum to the value exactly; only :func:`to_stacks` leaves negatives out.
    """

    def minus(b: Mapping[Any, float], s: Mapping[Any, float]) -> dict[Any, float]:
        out = {k: (b.get(k, 0.0) - s.get(k, 0.0)) / per for k in set(b) | set(s)}
        return {k: v for k, v in out.items() if v}

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
    try:
        tmp.write_text(json.dumps(to_dict(graph, meta)) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)  # no half-written file left behind
        raise


def load(path: Path) -> Graph:
    """Read a saved graph (ValueError, OSError or KeyError when it cannot be)."""
    return from_dict(json.loads(path.read_text(encoding="utf-8")))


def _sccs(nodes: list[Frame], out: Mapping[Frame, list[Frame]]) -> list[list[Frame]]:
    """Strongly connected components (Tarjan, iterative: call chains run deep)."""
    index: dict[Frame, int] = {}
    low: dict[Frame, int] = {}
    stack: list[Frame] = []
    on: set[Frame] = set()
    found: list[list[Frame]] = []
    for start in nodes:
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = len(index)
                stack.append(v)
                on.add(v)
            kids = out.get(v, [])
            if i < len(kids):
                work.append((v, i + 1))
                w = kids[i]
                if w not in index:
                    work.append((w, 0))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                found.append(comp)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return found


def _cycle_frame(members: list[Frame]) -> Frame:
    names = sorted({function_of(m).name for m in members})
    files = {m.file for m in members}
    return Frame(" / ".join(names) + " (cycle)", files.pop() if len(files) == 1 else "")


def acyclic(graph: Graph) -> tuple[dict[Frame, float], dict[tuple[Frame, Frame], float]]:
    """Self costs and edges with negatives left out and every cycle one node (gprof's way)."""
    self_cost = {f: c for f, c in graph.self_cost.items() if c > 0}
    edges = {k: c for k, c in graph.calls.items() if c > 0 and k[0] != k[1]}
    out: dict[Frame, list[Frame]] = defaultdict(list)
    for a, b in sorted(edges):
        out[a].append(b)
    nodes = sorted(set(self_cost) | {f for e in edges for f in e})
    node_of = {m: (_cycle_frame(c) if len(c) > 1 else m) for c in _sccs(nodes, out) for m in c}
    merged_self: dict[Frame, float] = defaultdict(float)
    for f, c in self_cost.items():
        merged_self[node_of[f]] += c
    merged_edges: dict[tuple[Frame, Frame], float] = defaultdict(float)
    for (a, b), c in edges.items():
        if node_of[a] != node_of[b]:
            merged_edges[(node_of[a], node_of[b])] += c
    return dict(merged_self), dict(merged_edges)


def _topological(nodes: set[Frame], edges: Mapping[tuple[Frame, Frame], float]) -> list[Frame]:
    """Callers before callees (Kahn's algorithm; the graph is acyclic)."""
    indegree = dict.fromkeys(nodes, 0)
    out: dict[Frame, list[Frame]] = defaultdict(list)
    for a, b in sorted(edges):
        out[a].append(b)
        indegree[b] += 1
    ready = sorted(n for n, d in indegree.items() if d == 0)
    order = []
    while ready:
        n = ready.pop()
        order.append(n)
        for m in out[n]:
            indegree[m] -= 1
            if indegree[m] == 0:
                ready.append(m)
    return order


def consistent(
    self_cost: Mapping[Frame, float], edges: Mapping[tuple[Frame, Frame], float]
) -> tuple[dict[Frame, float], dict[tuple[Frame, Frame], float]]:
    """Inclusive cost per node and edges rescaled so that each node's callers pass on
    exactly its inclusive cost (in proportion to their recorded edges).

    Callgrind's own graph adds up; a loop graph with its negative residues left out
    may not, and sharing weight along edges that do not add up would lose (or
    invent) instructions. Computed callees first, so every callee is settled first.
    """
    nodes = set(self_cost) | {f for e in edges for f in e}
    into: dict[Frame, float] = defaultdict(float)
    for (_, b), c in edges.items():
        into[b] += c
    incl: dict[Frame, float] = {}
    scaled: dict[tuple[Frame, Frame], float] = {}
    outgoing: dict[Frame, list[Frame]] = defaultdict(list)
    for a, b in edges:
        outgoing[a].append(b)
    for n in reversed(_topological(nodes, edges)):
        for m in outgoing[n]:
            scaled[(n, m)] = edges[(n, m)] * incl[m] / into[m]
        incl[n] = self_cost.get(n, 0.0) + sum(scaled[(n, m)] for m in outgoing[n])
    return incl, scaled


def to_stacks(graph: Graph, floor: float | None = None) -> Stacks:
    """Stacks (root first) weighted in instructions, shared out along the call edges.

    Every positive self cost is drawn once (the stacks sum to it); a function called
    from one place keeps its own count. ``floor``: branches under it fold into their
    caller (default: ``MIN_SHARE`` of the total; give two graphs the same floor so
    they fold alike; it is never below one millionth of the total).
    """
    self_cost, edges = acyclic(graph)
    incl, scaled = consistent(self_cost, edges)
    callees: dict[Frame, list[tuple[Frame, float]]] = defaultdict(list)
    for (caller, callee), cost in sorted(scaled.items()):
        callees[caller].append((callee, cost))
    called = {callee for (_, callee) in edges}
    roots = sorted(f for f in incl if f not in called and incl[f] > 0)
    total = sum(self_cost.values())
    # Never zero: with no floor, the paths through a call graph can be exponentially many.
    cut = max(MIN_SHARE * total if floor is None else floor, 1e-6 * total)
    out: dict[Stack, float] = defaultdict(float)
    todo: list[tuple[Frame, float, Stack]] = [(r, incl[r], ()) for r in roots]
    while todo:
        fn, weight, path = todo.pop()
        stack = (*path, function_of(fn))
        share = weight / incl[fn] if incl.get(fn) else 0.0
        own = self_cost.get(fn, 0.0) * share
        for callee, cost in callees.get(fn, ()):
            w = cost * share
            if w < cut or len(stack) >= MAX_DEPTH or not incl.get(callee):
                own += w  # too small or too deep: counted where it was called
            else:
                todo.append((callee, w, stack))
        if own > 0:
            out[stack] += own
    return Stacks(dict(out))
