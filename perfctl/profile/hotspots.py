"""What dominates a profile: self/inclusive function tables and the call tree.

Everything here works on :class:`perfctl.profile.stacks.Stacks` (sampled seconds per
stack) and is normalised per operation by the caller's ``scale`` (seconds of
wall time per op per sampled second), so the numbers of two refs compare even
when their loops ran a different number of operations.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from perfctl.profile.stacks import LOOP, MARKERS, Frame, Stacks

ROOT = Frame("(regime)")
# Deeper stacks are cut here (the rest counts as the last kept frame's self
# time), which keeps the recursive tree builders and renderers within limits.
MAX_DEPTH = 256
# The tree is rooted at the timed callable when the other top frames hold less
# than 1 - ENTRY_SHARE of the regime's samples; else at the synthetic root.
ENTRY_SHARE = 0.95
# A call passing at least this share of its time to its only callee is a "chain".
CHAIN_SHARE = 0.98
# Runtime plumbing between the worker and the user's code: perfctl's worker and
# loader, pyperf, process and thread start-up. The pruned tree's depth does not
# count these frames, so a child process's branch (a dozen multiprocessing frames
# deep before the user's function) is not cut at its run loop.
_WRAPPER_FILES = (
    "/perfctl/measure/workers/",
    "/perfctl/regimes/loader.py",
    "/perfctl/regimes/api.py",
    "/pyperf/",
    "/multiprocessing/",
    "/concurrent/futures/",
    "/threading.py",
    "/contextlib.py",
    "/runpy.py",
    "/importlib/",
)


def is_wrapper(frame: Frame) -> bool:
    """Whether ``frame`` is runtime plumbing rather than code worth a tree level."""
    if frame in MARKERS or frame.name == "<module>" or frame.file.startswith("<frozen"):
        return True
    path = "/" + frame.file.replace("\\", "/")
    return any(part in path for part in _WRAPPER_FILES)


@dataclass(frozen=True)
class FunctionStat:
    """One function's sampled seconds: where it was on top, and anywhere."""

    frame: Frame
    self_s: float
    inclusive_s: float


def function_stats(stacks: Stacks) -> dict[Frame, FunctionStat]:
    """Self and inclusive sampled seconds of every function (recursion counted once)."""
    self_s: dict[Frame, float] = defaultdict(float)
    incl_s: dict[Frame, float] = defaultdict(float)
    for stack, weight in stacks.weights.items():
        if not stack:
            continue
        self_s[stack[-1]] += weight
        for frame in set(stack):
            incl_s[frame] += weight
    return {f: FunctionStat(f, self_s.get(f, 0.0), incl_s[f]) for f in incl_s}


@dataclass(frozen=True)
class CallNode:
    """A node of the call tree: sampled seconds at and below one call path."""

    frame: Frame
    total_s: float
    self_s: float
    children: tuple[CallNode, ...] = ()

    def child(self, frame: Frame) -> CallNode | None:
        """The child node for ``frame``, if any."""
        return next((c for c in self.children if c.frame == frame), None)


class _Trie:
    __slots__ = ("total", "self_", "children")

    def __init__(self) -> None:
        self.total = 0.0
        self.self_ = 0.0
        self.children: dict[Frame, _Trie] = {}

    def freeze(self, frame: Frame) -> CallNode:
        kids = (t.freeze(f) for f, t in self.children.items())
        ordered = sorted(kids, key=lambda n: (-n.total_s, n.frame))
        return CallNode(frame, self.total, self.self_, tuple(ordered))


def call_tree(stacks: Stacks, root: Frame = ROOT) -> CallNode:
    """The call tree of all stacks under one synthetic root, children biggest first."""
    top = _Trie()
    for stack, weight in stacks.weights.items():
        node = top
        node.total += weight
        for frame in stack[:MAX_DEPTH]:
            node = node.children.setdefault(frame, _Trie())
            node.total += weight
        node.self_ += weight
    return top.freeze(root)


@dataclass(frozen=True)
class Hotspot:
    """One row of a top-functions table (``share`` of the regime's samples)."""

    function: str
    file: str
    share: float
    per_op_s: float
    samples: int

    @property
    def where(self) -> str:
        """``file:function``."""
        return f"{self.file}:{self.function}" if self.file else self.function


def top_functions(
    stats: dict[Frame, FunctionStat], *, by: str, scale: float, sample_s: float, limit: int = 15
) -> tuple[Hotspot, ...]:
    """The ``limit`` functions with most ``self`` or ``inclusive`` time."""
    total = sum(s.self_s for s in stats.values()) or 1.0

    def value(s: FunctionStat) -> float:
        return s.self_s if by == "self" else s.inclusive_s

    ranked = sorted(
        (s for s in stats.values() if value(s) > 0), key=lambda s: (-value(s), s.frame)
    )[:limit]
    return tuple(
        Hotspot(
            s.frame.name,
            s.frame.file,
            value(s) / total,
            value(s) * scale,
            round(value(s) / sample_s),
        )
        for s in ranked
    )


@dataclass(frozen=True)
class TreeEntry:
    """One node of the summary's pruned call tree, per op."""

    function: str
    file: str
    share: float
    per_op_s: float
    self_per_op_s: float
    children: tuple[TreeEntry, ...] = ()

    @property
    def label(self) -> str:
        """``function (file)``."""
        return f"{self.function} ({self.file})" if self.file else self.function


def hottest_path(node: CallNode) -> tuple[Frame, ...]:
    """The frames from below ``node`` down to the node with the most self time."""
    best: tuple[float, tuple[Frame, ...]] = (node.self_s, ())
    todo: list[tuple[CallNode, tuple[Frame, ...]]] = [(node, ())]
    while todo:  # iterative: stacks may be MAX_DEPTH deep
        current, path = todo.pop()
        for child in current.children:
            child_path = (*path, child.frame)
            if child.self_s > best[0]:
                best = (child.self_s, child_path)
            todo.append((child, child_path))
    return best[1]


@dataclass(frozen=True)
class _Prune:
    scale: float
    total_s: float
    min_share: float
    max_children: int


def prune_tree(
    node: CallNode,
    *,
    scale: float,
    total_s: float,
    min_share: float = 0.02,
    max_depth: int = 8,
    max_children: int = 6,
) -> TreeEntry:
    """The call tree as TreeEntry, keeping nodes of at least ``min_share``.

    ``max_depth`` counts meaningful frames only (see :func:`is_wrapper`), and
    the path to the node with the most self time is always kept, so the
    tree's "most self time" mark lands on the real maximum.
    """
    rule = _Prune(scale, total_s, min_share, max_children)
    return _prune(node, rule, max_depth, hottest_path(node))


def _prune(node: CallNode, rule: _Prune, depth: int, hot: tuple[Frame, ...]) -> TreeEntry:
    kids = []
    for i, c in enumerate(node.children):
        on_hot = bool(hot) and c.frame == hot[0]
        keep = depth > 0 and i < rule.max_children and c.total_s >= rule.min_share * rule.total_s
        if keep or on_hot:
            left = depth if is_wrapper(c.frame) else depth - 1
            kids.append(_prune(c, rule, max(left, 0), hot[1:] if on_hot else ()))
    return TreeEntry(
        node.frame.name,
        node.frame.file,
        node.total_s / (rule.total_s or 1.0),
        node.total_s * rule.scale,
        node.self_s * rule.scale,
        tuple(kids),
    )


def format_time(seconds: float) -> str:
    """A duration with a readable unit: ``812 ns``, ``12.3 µs``, ``4.56 ms``, ``1.2 s``."""
    from perfctl.render.tables import fmt_time

    # One formatter for every table, so profile and compare figures read alike.
    return fmt_time(seconds)


def signed_time(seconds: float) -> str:
    """A change with its sign: ``+8.2 µs``, ``-120 ns``."""
    return ("+" if seconds > 0 else "") + format_time(seconds)


def _walk(entry: TreeEntry) -> list[TreeEntry]:
    out = [entry]
    for child in entry.children:
        out.extend(_walk(child))
    return out


def format_tree(entry: TreeEntry) -> list[str]:
    """Seed-001-style lines: ``├─ name (file) [12.3 µs/op, 45%]``, hottest self marked.

    A chain of calls that pass (almost) all their time to one callee is
    printed on one line, ``a → b → c (file of c)``, to keep the tree short.
    """
    hottest = max(_walk(entry), key=lambda e: e.self_per_op_s)
    last = _chain_end(entry)
    lines = [_tree_line(entry, last, hottest)]
    _tree_children(last, "", hottest, lines.append)
    return lines


def _chain_end(e: TreeEntry) -> TreeEntry:
    while len(e.children) == 1 and e.children[0].per_op_s >= CHAIN_SHARE * e.per_op_s:
        e = e.children[0]
    return e


def _tree_line(first: TreeEntry, last: TreeEntry, hottest: TreeEntry) -> str:
    chain = _chain(first, last)
    names = [e.function for e in chain]
    if len(names) > 3:
        names = [names[0], "…", names[-1]]
    label = " → ".join(names) + (f" ({last.file})" if last.file else "")
    marked = any(e is hottest for e in chain) and hottest.self_per_op_s > 0
    mark = " ← most self time" if marked else ""
    return f"{label} [{format_time(first.per_op_s)}/op, {first.share:.0%}]{mark}"


def _chain(first: TreeEntry, last: TreeEntry) -> list[TreeEntry]:
    out = [first]
    while out[-1] is not last:
        out.append(out[-1].children[0])
    return out


def _tree_children(
    e: TreeEntry, prefix: str, hottest: TreeEntry, out: Callable[[str], None]
) -> None:
    for i, child in enumerate(e.children):
        end, last = _chain_end(child), i == len(e.children) - 1
        out(prefix + ("└─ " if last else "├─ ") + _tree_line(child, end, hottest))
        _tree_children(end, prefix + ("   " if last else "│  "), hottest, out)


def tables(
    regime: Stacks,
    *,
    scale: float,
    sample_s: float,
    limit: int = 15,
) -> tuple[tuple[Hotspot, ...], tuple[Hotspot, ...], TreeEntry | None]:
    """Top functions by self and by inclusive time, and the pruned call tree."""
    stats = function_stats(regime)
    top_self = top_functions(stats, by="self", scale=scale, sample_s=sample_s, limit=limit)
    top_incl = top_functions(stats, by="inclusive", scale=scale, sample_s=sample_s, limit=limit)
    tree = call_tree(regime)
    if not tree.children:
        return top_self, top_incl, None
    # Usually one child besides the loop's own samples: the regime's timed
    # callable, which is the entry point to show. A stray sample caught in
    # another frame (a wake-up, a signal handler) must not hide it.
    main = sorted((c for c in tree.children if c.frame != LOOP), key=lambda c: -c.total_s)
    rest = sum(c.total_s for c in main[1:])
    entry = main[0] if main and rest <= (1 - ENTRY_SHARE) * tree.total_s else tree
    return top_self, top_incl, prune_tree(entry, scale=scale, total_s=tree.total_s)
