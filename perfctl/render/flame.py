"""Flame graphs as plain SVG, rendered here (no flamegraph.pl, no scripts).

A graph is a tree of :class:`Box` (label, width value, tooltip, fill). Each box
becomes ``<g><title>tooltip</title><rect/><text>label</text></g>``, root at
the bottom; every string is XML-escaped and stripped of characters XML cannot
hold, because frame names come from arbitrary user code. Widths are
proportional to ``value`` relative to the root; boxes narrower than a third of
a pixel are left out (their time still counts in their parent's width).

Colours: :func:`warm_fill` gives the classic flame palette, stable per
function name; :func:`diff_fill` gives red for grown and blue for shrunk, with
intensity proportional to the change.
"""

from __future__ import annotations

import html
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from perfctl.profile.hotspots import CallNode
from perfctl.profile.stacks import MARKERS

WIDTH = 1200
ROW = 17  # pixels per stack level
PAD = 10
HEADER = 48  # title and subtitle
FOOTER = 22  # legend line
CHAR_W = 6.6  # width of one 11px monospace character
MIN_PX = 0.33
NEUTRAL = "#dddddd"
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


@dataclass(frozen=True)
class Box:
    """One frame of a flame graph; ``value`` sets its width."""

    label: str
    value: float
    tooltip: str
    fill: str
    children: tuple[Box, ...] = ()


def esc(text: str) -> str:
    """Text safe inside an SVG element or a double-quoted attribute."""
    return html.escape(_INVALID_XML.sub("?", text), quote=True)


def warm_fill(name: str) -> str:
    """A flame colour (red-orange-yellow) chosen by a stable hash of ``name``."""
    h = zlib.crc32(name.encode("utf-8", "replace"))
    r = 205 + (h & 0x31)
    g = 80 + ((h >> 8) % 140)
    b = 30 + ((h >> 16) % 50)
    return f"#{r:02x}{g:02x}{b:02x}"


def diff_fill(delta: float, scale: float) -> str:
    """Red when ``delta`` > 0 (grew), blue when < 0 (shrank); ``scale`` is full colour."""
    if scale <= 0 or delta == 0:
        return NEUTRAL
    t = min(1.0, abs(delta) / scale)
    fade = int(225 - 190 * t)
    return f"#ff{fade:02x}{fade:02x}" if delta > 0 else f"#{fade:02x}{fade:02x}ff"


def tree_boxes(
    node: CallNode,
    tooltip: Callable[[CallNode], str],
    fill: Callable[[CallNode], str] | None = None,
) -> Box:
    """Boxes for a call tree, width from ``total_s`` (markers drawn grey)."""
    colour = fill or (lambda n: NEUTRAL if n.frame in MARKERS else warm_fill(n.frame.name))
    kids = tuple(tree_boxes(c, tooltip, fill) for c in node.children)
    return Box(node.frame.label, node.total_s, tooltip(node), colour(node), kids)


def _depth(root: Box) -> int:
    depth, todo = 0, [(root, 1)]
    while todo:
        box, level = todo.pop()
        depth = max(depth, level)
        todo.extend((c, level + 1) for c in box.children)
    return depth


def _fit(label: str, px: float) -> str:
    chars = int((px - 6) / CHAR_W)
    if chars < 3:
        return ""
    return label if len(label) <= chars else label[: chars - 2] + ".."


def _box_svg(box: Box, x: float, y: float, px: float) -> str:
    text = _fit(box.label, px)
    label = f'<text x="{x + 3:.2f}" y="{y + 12}">{esc(text)}</text>' if text else ""
    return (
        f'<g><title>{esc(box.tooltip)}</title><rect x="{x:.2f}" y="{y}" '
        f'width="{px:.2f}" height="{ROW - 1}" fill="{esc(box.fill)}" rx="2"/>{label}</g>'
    )


def _frames(root: Box, width: int, base_y: int) -> list[str]:
    scale = (width - 2 * PAD) / root.value if root.value > 0 else 0.0
    out: list[str] = []
    todo = [(root, float(PAD), 0)]
    while todo:
        box, x, level = todo.pop()
        px = box.value * scale
        if px < MIN_PX:
            continue
        out.append(_box_svg(box, x, base_y - (level + 1) * ROW, px))
        offset = x
        for child in box.children:
            todo.append((child, offset, level + 1))
            offset += child.value * scale
    return out


def render_svg(
    root: Box, *, title: str, subtitle: str = "", legend: str = "", width: int = WIDTH
) -> str:
    """A complete standalone SVG document for the flame graph of ``root``."""
    height = HEADER + _depth(root) * ROW + FOOTER + PAD
    base_y = height - FOOTER
    head = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="Menlo, Consolas, monospace" '
        f'font-size="11">',
        f'<rect width="{width}" height="{height}" fill="#fafafa"/>',
        f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="15">{esc(title)}</text>',
        f'<text x="{width / 2}" y="38" text-anchor="middle" fill="#555">{esc(subtitle)}</text>',
    ]
    tail = [f'<text x="{PAD}" y="{height - 8}" fill="#555">{esc(legend)}</text>', "</svg>"]
    return "\n".join([*head, *_frames(root, width, base_y), *tail]) + "\n"
