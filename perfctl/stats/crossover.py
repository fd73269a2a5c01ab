"""Crossover points: the smallest size at which a regime beats its baseline.

Seed 001's CPU-vs-GPU table ends in a sentence ("the GPU wins from 4 MB") that
readers used to work out across rows. Here it is computed: for a regime with a
``baseline=`` and one size-like parameter (``gpu.page_apply[size=…]`` against
``gpu.page_apply.cpu[size=…]``), the ratio regime/baseline of the medians is
interpolated between neighbouring sizes on log-log axes where it crosses 1.
Its interval comes from the two sides' 95% intervals: the pessimistic curve
(regime's high end over baseline's low end) crosses later, the optimistic one
earlier. A bound that never crosses inside the measured sizes stays open.
The same rule gives seed 004's single- vs multi-thread trade-off line: a regime whose
``baseline=`` pins a parameter of its own (``r[strategy=lock]``) is set against its
other variant along ``threads``. When the regime wins at small sizes and loses at large
ones, the sentence is turned round (the baseline beats it from the crossing).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMG]?)(?:i?B)?\s*$", re.IGNORECASE)
_NAME = re.compile(r"^(?P<root>[^\[]+)\[(?P<params>.*)\]$")


@dataclass(frozen=True)
class Point:
    """One size of a regime and its baseline: medians and 95% CIs in seconds."""

    regime: str
    baseline: str
    median: float
    low: float
    high: float
    base_median: float
    base_low: float
    base_high: float


@dataclass(frozen=True)
class Crossover:
    """Where ``regime`` starts to beat ``baseline`` along ``param`` (None: open bound)."""

    regime: str
    baseline: str
    param: str
    at: float | None  # interpolated value; None when the ratio never crosses 1
    low: float | None  # earliest crossing the intervals allow (None: below the range)
    high: float | None  # latest (None: beyond the range)
    sizes: tuple[float, ...]
    ratios: tuple[float, ...]  # regime/baseline per size

    def sentence(self) -> str:
        """One line for a table's notes, e.g. ``… beats … from size ≈ 1.1M (CI 0.9M–1.4M)``."""
        head = f"{self.regime} beats {self.baseline}"
        span = f"{fmt_size(self.sizes[0])}–{fmt_size(self.sizes[-1])}"
        if self.at is None:
            if all(r < 1 for r in self.ratios):
                return f"{head} at every measured value of {self.param} ({span})"
            return f"{head} at no measured value of {self.param} ({span})"
        low = "below the range" if self.low is None else fmt_size(self.low)
        high = "beyond the range" if self.high is None else fmt_size(self.high)
        return f"{head} from {self.param} ≈ {fmt_size(self.at)} (95% CI {low} – {high})"


def parse_size(text: str) -> float | None:
    """``"4K"`` -> 4096.0, ``"1M"`` -> 1048576.0, ``"512"`` -> 512.0; None if not a size."""
    m = _SIZE.match(str(text))
    return None if m is None else float(m.group(1)) * _UNITS[m.group(2).upper()]


def fmt_size(value: float) -> str:
    """The inverse of :func:`parse_size`, to about 3 significant digits (``1.03M``, ``812K``)."""
    for suffix in ("G", "M", "K", ""):
        if value >= _UNITS[suffix] or suffix == "":
            v = value / _UNITS[suffix]
            return (f"{v:.0f}" if v >= 100 else f"{v:.3g}") + suffix
    raise AssertionError("unreachable")


def split_name(name: str) -> tuple[str, dict[str, str]]:
    """``"a.b[size=1K,mode=x]"`` -> ``("a.b", {"size": "1K", "mode": "x"})``."""
    m = _NAME.match(name)
    if m is None:
        return name, {}
    pairs = (p.partition("=") for p in m.group("params").split(","))
    return m.group("root"), {k: v for k, _, v in pairs}


def _label(root: str, params: dict[str, str], leave_out: set[str]) -> str:
    rest = ",".join(f"{k}={v}" for k, v in sorted(params.items()) if k not in leave_out)
    return f"{root}[{rest}]" if rest else root


def _sized(params: dict[str, str]) -> list[tuple[str, float]]:
    found = ((k, parse_size(v)) for k, v in params.items())
    return [(k, x) for k, x in found if x is not None and x > 0]  # log axes: sizes above 0


def crossovers(points: Iterable[Point]) -> list[Crossover]:
    """One Crossover per (regime, baseline, other params) with ≥ 2 sizes on one size param."""
    groups: dict[tuple[str, str, str], list[tuple[float, Point]]] = {}
    for p in points:
        root, params = split_name(p.regime)
        base_root, base_params = split_name(p.baseline)
        sized = _sized(params)
        if len(sized) != 1 or min(p.median, p.base_median, p.low, p.base_low) <= 0:
            continue
        param, x = sized[0]
        # The baseline's own size parameter may have another name (r[size=1K] vs c[n=1K]).
        base_sized = {k for k, _ in _sized(base_params)} | {param}
        key = (_label(root, params, {param}), _label(base_root, base_params, base_sized), param)
        groups.setdefault(key, []).append((x, p))
    out = []
    for (name, base, param), found in sorted(groups.items()):
        if len({x for x, _ in found}) < 2:
            continue
        found.sort(key=lambda item: item[0])
        out.append(_crossover(name, base, param, found))
    return out


def _crossover(name: str, base: str, param: str, found: list[tuple[float, Point]]) -> Crossover:
    sizes = [x for x, _ in found]
    mid = [p.median / p.base_median for _, p in found]
    late = [p.high / p.base_low for _, p in found]  # the regime at its slowest
    early = [p.low / p.base_high for _, p in found]  # ... and at its fastest
    if mid[0] < 1 <= mid[-1]:  # wins small, loses large: say it as the baseline winning from
        name, base = base, name
        mid, late, early = [1 / r for r in mid], [1 / r for r in early], [1 / r for r in late]
    at = _first_crossing(sizes, mid)
    if at is None:
        return Crossover(name, base, param, None, None, None, tuple(sizes), tuple(mid))
    return Crossover(
        name,
        base,
        param,
        at,
        _first_crossing(sizes, early),
        _first_crossing(sizes, late),
        tuple(sizes),
        tuple(mid),
    )


def _first_crossing(sizes: Sequence[float], ratios: Sequence[float]) -> float | None:
    """The size from which the ratio stays below 1, log-log interpolated.

    None when it never gets there inside the range, or is there from the start.
    """
    if ratios[-1] >= 1:
        return None  # never wins inside the range (or loses again at the top)
    i = len(ratios) - 1
    while i > 0 and ratios[i - 1] < 1:
        i -= 1
    if i == 0:
        return None  # wins at every size: the crossing lies below the range
    r0, r1 = math.log(ratios[i - 1]), math.log(ratios[i])
    x0, x1 = math.log(sizes[i - 1]), math.log(sizes[i])
    t = r0 / (r0 - r1) if r0 != r1 else 0.0
    return math.exp(x0 + t * (x1 - x0))
