"""Before/after comparison of two profiles of one regime, normalised per operation.

Both sides' regime stacks are scaled to wall seconds per operation (see
:class:`perfctl.profile.records.ProfileSummary`), so a real speed-up reads as less
time per op (blue) even when the faster side sampled more loop iterations.
Call paths are paired by frame (function and short file, no line numbers).

Products: the functions whose self time per op moved most; a partition of the
regime's time per op into the top call-tree nodes ("where the time moved",
summing exactly to the total change: ready for a waterfall chart); and the
paired nodes with their colour for the differential flame graphs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from perfctl.profile.hotspots import CallNode, call_tree, format_time, function_stats
from perfctl.profile.stacks import Frame, Stacks
from perfctl.render import flame

NOISE_SHARE = 0.01  # changes under 1% of the larger total per op count as "same"


@dataclass(frozen=True)
class PairNode:
    """One call path on both sides: inclusive and self seconds per op."""

    frame: Frame
    before_s: float
    after_s: float
    before_self_s: float
    after_self_s: float
    children: tuple[PairNode, ...] = ()

    @property
    def delta_self_s(self) -> float:
        """Self time per op, after minus before."""
        return self.after_self_s - self.before_self_s


def pair(
    before: CallNode | None, after: CallNode | None, before_scale: float, after_scale: float
) -> PairNode:
    """Pair two call trees node by node (a side lacking a path counts zero)."""
    node = after or before
    assert node is not None
    frames = [c.frame for c in (after.children if after else ())]
    frames += [c.frame for c in (before.children if before else ()) if c.frame not in frames]
    kids = tuple(
        pair(
            before.child(f) if before else None,
            after.child(f) if after else None,
            before_scale,
            after_scale,
        )
        for f in frames
    )
    b_total, b_self = (before.total_s, before.self_s) if before else (0.0, 0.0)
    a_total, a_self = (after.total_s, after.self_s) if after else (0.0, 0.0)
    return PairNode(
        node.frame,
        b_total * before_scale,
        a_total * after_scale,
        b_self * before_scale,
        a_self * after_scale,
        kids,
    )


def change(before: float, after: float, band: float) -> str:
    """``same`` within the band, else ``new``/``removed``/``grew``/``shrank``."""
    if abs(after - before) < band:
        return "same"
    if before == 0:
        return "new"
    if after == 0:
        return "removed"
    return "grew" if after > before else "shrank"


@dataclass(frozen=True)
class FunctionDelta:
    """One function's self and inclusive time per op on both sides."""

    function: str
    file: str
    before_self_per_op_s: float
    after_self_per_op_s: float
    before_inclusive_per_op_s: float
    after_inclusive_per_op_s: float
    delta_self_per_op_s: float
    change: str

    @property
    def where(self) -> str:
        """``file:function``."""
        return f"{self.file}:{self.function}" if self.file else self.function


def function_deltas(
    before: Stacks,
    after: Stacks,
    before_scale: float,
    after_scale: float,
    band: float,
    limit: int = 25,
) -> tuple[FunctionDelta, ...]:
    """The ``limit`` functions whose self time per op moved most."""
    b, a = function_stats(before), function_stats(after)
    out = []
    for frame in set(b) | set(a):
        bs = b[frame].self_s * before_scale if frame in b else 0.0
        as_ = a[frame].self_s * after_scale if frame in a else 0.0
        bi = b[frame].inclusive_s * before_scale if frame in b else 0.0
        ai = a[frame].inclusive_s * after_scale if frame in a else 0.0
        out.append(
            FunctionDelta(frame.name, frame.file, bs, as_, bi, ai, as_ - bs, change(bs, as_, band))
        )
    out.sort(key=lambda d: (-abs(d.delta_self_per_op_s), d.where))
    return tuple(out[:limit])


@dataclass(frozen=True)
class MovedStep:
    """One part of the regime's time per op, before and after (a waterfall step)."""

    label: str
    path: tuple[str, ...]
    before_per_op_s: float
    after_per_op_s: float

    @property
    def delta_per_op_s(self) -> float:
        """After minus before."""
        return self.after_per_op_s - self.before_per_op_s


def _size(node: PairNode) -> float:
    return max(node.before_s, node.after_s)


def _entry(root: PairNode, floor: float) -> tuple[PairNode, tuple[str, ...], float, float]:
    """Descend through wrappers (one big child, little self time) to the components.

    Returns the node, its path and the before/after seconds left behind on the way.
    """
    path: tuple[str, ...] = (root.frame.label,)
    node, left_b, left_a = root, 0.0, 0.0
    while True:
        big = [c for c in node.children if _size(c) >= floor]
        if len(big) != 1 or max(node.before_self_s, node.after_self_s) >= floor:
            return node, path, left_b, left_a
        left_b += node.before_s - big[0].before_s
        left_a += node.after_s - big[0].after_s
        node, path = big[0], (*path, big[0].frame.label)


def where_moved(
    root: PairNode,
    max_steps: int = 8,
    min_share: float = 0.05,
) -> tuple[MovedStep, ...]:
    """Inclusive time per op of the regime's components, before and after.

    The components are the children of the entry point (wrappers with a single
    big child are looked through). Small children, the entry's own self time
    and what wrappers spent beside their child are gathered in an ``other``
    step, so the steps sum exactly to the total change: a waterfall's bars.
    """
    floor = min_share * _size(root)
    node, path, other_b, other_a = _entry(root, floor)
    kids = sorted(node.children, key=lambda c: (-_size(c), c.frame))
    big = [c for c in kids if _size(c) >= floor][: max_steps - 2]
    steps = [MovedStep(c.frame.label, (*path, c.frame.label), c.before_s, c.after_s) for c in big]
    if max(node.before_self_s, node.after_self_s) >= floor or not steps:
        steps.append(
            MovedStep(
                f"{node.frame.label} (self)",
                (*path, "(self)"),
                node.before_self_s,
                node.after_self_s,
            )
        )
    else:
        other_b, other_a = other_b + node.before_self_s, other_a + node.after_self_s
    rest = [c for c in kids if c not in big]
    other_b += sum(c.before_s for c in rest)
    other_a += sum(c.after_s for c in rest)
    if other_b or other_a:
        steps.append(MovedStep("other", (*path, "(other)"), other_b, other_a))
    return tuple(sorted(steps, key=lambda s: (-abs(s.delta_per_op_s), s.label)))


@dataclass(frozen=True)
class NodeDelta:
    """One paired call path, as the differential flame graph colours it."""

    path: tuple[str, ...]
    before_inclusive_per_op_s: float
    after_inclusive_per_op_s: float
    before_self_per_op_s: float
    after_self_per_op_s: float
    delta_self_per_op_s: float
    change: str
    fill: str


def _colour(node: PairNode, band: float, scale: float) -> str:
    if abs(node.delta_self_s) < band:
        return flame.NEUTRAL
    return flame.diff_fill(node.delta_self_s, scale)


def max_delta(root: PairNode) -> float:
    """The largest absolute self-time change of any node (full colour)."""
    best, todo = 0.0, [root]
    while todo:
        node = todo.pop()
        best = max(best, abs(node.delta_self_s))
        todo.extend(node.children)
    return best


def node_deltas(
    root: PairNode, band: float, scale: float, min_share: float = 0.005, limit: int = 400
) -> tuple[NodeDelta, ...]:
    """Paired nodes of at least ``min_share`` of the larger total, biggest first."""
    floor = min_share * max(root.before_s, root.after_s)
    out: list[NodeDelta] = []
    todo: list[tuple[PairNode, tuple[str, ...]]] = [(root, (root.frame.label,))]
    while todo:
        node, path = todo.pop()
        if max(node.before_s, node.after_s) < floor:
            continue
        out.append(
            NodeDelta(
                path,
                node.before_s,
                node.after_s,
                node.before_self_s,
                node.after_self_s,
                node.delta_self_s,
                change(node.before_self_s, node.after_self_s, band),
                _colour(node, band, scale),
            )
        )
        todo.extend((c, (*path, c.frame.label)) for c in node.children)
    out.sort(key=lambda n: (-max(n.before_inclusive_per_op_s, n.after_inclusive_per_op_s), n.path))
    return tuple(out[:limit])


def _signed(fmt: Callable[[float], str], value: float) -> str:
    return ("+" if value > 0 else "") + fmt(value)


def diff_boxes(
    node: PairNode,
    *,
    after_width: bool,
    band: float,
    scale: float,
    fmt: Callable[[float], str] = format_time,
) -> flame.Box:
    """Flame boxes of the paired tree: width from after (or before), colour from self Δ.

    ``fmt`` writes a value per op (seconds by default; instructions for callgrind).
    """
    tip = (
        f"{node.frame.label}\ninclusive per op: {fmt(node.before_s)} → "
        f"{fmt(node.after_s)}\nself per op: {fmt(node.before_self_s)} → "
        f"{fmt(node.after_self_s)} ({_signed(fmt, node.delta_self_s)})"
    )
    kids = tuple(
        diff_boxes(c, after_width=after_width, band=band, scale=scale, fmt=fmt)
        for c in node.children
    )
    value = node.after_s if after_width else node.before_s
    return flame.Box(node.frame.label, value, tip, _colour(node, band, scale), kids)


def compare(
    before: Stacks,
    after: Stacks,
    before_scale: float,
    after_scale: float,
) -> tuple[PairNode, tuple[FunctionDelta, ...], float]:
    """The paired call tree, the function table and the noise band (s/op)."""
    root = pair(call_tree(before), call_tree(after), before_scale, after_scale)
    band = NOISE_SHARE * max(root.before_s, root.after_s)
    return root, function_deltas(before, after, before_scale, after_scale, band), band


def diff_svgs(
    root: PairNode,
    *,
    band: float,
    title: str,
    before_per_op_s: float,
    after_per_op_s: float,
    fmt: Callable[[float], str] = format_time,
    what: str = "self time per op",
    band_text: str = "within 1%",
) -> tuple[str, str]:
    """The differential flame graph (width from after) and its reverse (width from before)."""
    scale = max_delta(root)
    colour = f"colour: {what}, red grew, blue shrank (grey: {band_text})"
    views = []
    for after_width in (True, False):
        per_op = after_per_op_s if after_width else before_per_op_s
        views.append(
            flame.render_svg(
                diff_boxes(root, after_width=after_width, band=band, scale=scale, fmt=fmt),
                title=title + ("" if after_width else " (reverse view)"),
                subtitle=f"width: {'after' if after_width else 'before'} "
                f"({fmt(per_op)}/op); before {fmt(before_per_op_s)}/op, "
                f"after {fmt(after_per_op_s)}/op",
                legend=colour + ("" if after_width else "; removed paths are visible here"),
            )
        )
    return views[0], views[1]
