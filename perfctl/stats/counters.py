"""The change test for counters (instructions/op, blocks/op): Welch's t on process means.

Counts are near-deterministic: identical code gives the same count in every
process (CV ~0), so three processes a side must be able to show a 1% change.
Mann-Whitney U cannot (3 vs 3 never reaches p < 0.05: its smallest two-sided
p is 0.1), while a t interval can, and with a spread this small the normality
it assumes costs nothing. The change is relative to the base mean, floored at
one unit, so a regime that allocated no blocks and now keeps two per op reads
+200%, not a division by zero. Zero spread on both sides means any difference
is real: its interval is the point itself (p = 0), and the noise band decides.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from perfctl.stats.decision import Change, process_means


def _welch(b: Sequence[float], h: Sequence[float]) -> tuple[float, float]:
    """Standard error of the mean difference and Welch-Satterthwaite degrees of freedom."""
    nb, nh = len(b), len(h)
    vb = sum((x - sum(b) / nb) ** 2 for x in b) / (nb - 1) if nb > 1 else 0.0
    vh = sum((x - sum(h) / nh) ** 2 for x in h) / (nh - 1) if nh > 1 else 0.0
    sb, sh = vb / nb, vh / nh
    se = math.sqrt(sb + sh)
    if se == 0.0:
        return 0.0, math.inf
    parts = [s**2 / (n - 1) for s, n in ((sb, nb), (sh, nh)) if n > 1 and s > 0]
    return se, (sb + sh) ** 2 / sum(parts)


def compare_counts(
    base: Sequence[Sequence[float]], head: Sequence[Sequence[float]], confidence: float = 0.95
) -> Change:
    """Relative change of the head mean against the base mean, its t interval and p."""
    from scipy import special  # t's quantile and tail, without scipy.stats' imports

    b, h = list(process_means(base)), list(process_means(head))
    if not b or not h:
        raise ValueError("no process produced a value")
    mb, mh = sum(b) / len(b), sum(h) / len(h)
    scale = max(abs(mb), 1.0)
    change = (mh - mb) / scale
    se, df = _welch(b, h)
    if se == 0.0:
        p = 1.0 if change == 0.0 else 0.0
        return Change(change, change, change, p, len(b), len(h))
    t = (mh - mb) / se
    half = float(special.stdtrit(df, 0.5 + confidence / 2)) * se / scale
    p = float(2 * special.stdtr(df, -abs(t)))
    return Change(change, change - half, change + half, p, len(b), len(h))
