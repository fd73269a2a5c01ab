"""The change of head against base that every test in stats/ reports."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Change:
    """Relative change of head against base: the Hodges-Lehmann ratio minus 1.

    ``ci_low``/``ci_high`` bound the change (Moses interval); ``p_value`` is
    the raw two-sided Mann-Whitney U p-value. ``n_base``/``n_head`` are the
    process counts (None when unknown, e.g. rebuilt from an old record).
    """

    change: float
    ci_low: float
    ci_high: float
    p_value: float
    n_base: int | None = None
    n_head: int | None = None
