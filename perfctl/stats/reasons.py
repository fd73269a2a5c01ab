"""The reasons decide() gives with each verdict (the rule itself: stats/decision.py)."""

from __future__ import annotations

from perfctl.model import (
    IMPROVED,
    INCONCLUSIVE,
    NO_CHANGE,
    REGRESSED,
    WITHIN_NOISE,
    Verdict,
)
from perfctl.stats.change import Change


def pct(x: float) -> str:
    """A change as a signed percentage, one decimal."""
    return f"{x * 100:+.1f}%"


def band_text(threshold: float) -> str:
    """A band as a percentage (0.01 -> '1%')."""
    return f"{threshold * 100:g}%"


def interval(change: Change) -> str:
    """The change with its interval: '+1.0% [+0.2%, +1.9%]'."""
    return f"{pct(change.change)} [{pct(change.ci_low)}, {pct(change.ci_high)}]"


def too_few(change: Change, n_min: int) -> str | None:
    """Why too few processes decide nothing, or None."""
    counts = {"base": change.n_base, "head": change.n_head}
    if all(n is None or n >= n_min for n in counts.values()):
        return None
    shown = ", ".join(f"{side} {n}" for side, n in counts.items())
    return f"too few processes: {shown} (need at least {n_min} per side)"


def noisy_sides(base_cv: float, head_cv: float, max_cv: float) -> str:
    """The sides above ``max_cv`` ('base CV 14%, head CV 12%'); empty when neither is."""
    sides = (("base", base_cv), ("head", head_cv))
    # A CV just over the limit must not read "CV 10% (limit 10%)": one decimal there.
    shown = [(side, cv * 100, ".0f" if round(cv * 100) > max_cv * 100 else ".1f")
             for side, cv in sides if cv > max_cv]  # fmt: skip
    return ", ".join(f"{side} CV {value:{spec}}%" for side, value, spec in shown)


def too_noisy(base_cv: float, head_cv: float, max_cv: float) -> str | None:
    """Which sides are above ``max_cv`` ('too noisy: head CV 14% (limit 10%)'), or None."""
    sides = noisy_sides(base_cv, head_cv, max_cv)
    return f"too noisy: {sides} (limit {max_cv * 100:g}%)" if sides else None


def significant(change: Change, p_adjusted: float, threshold: float) -> tuple[Verdict, str]:
    """The verdict of a significant change: beyond the band, or within noise."""
    where = f"{interval(change)} beyond the {band_text(threshold)} noise band"
    if change.ci_low > threshold:
        return REGRESSED, f"slower: {where} (adjusted p={p_adjusted:.2g})"
    if change.ci_high < -threshold:
        return IMPROVED, f"faster: {where} (adjusted p={p_adjusted:.2g})"
    band = f"{band_text(threshold)} noise band"
    if -threshold < change.ci_low and change.ci_high < threshold:
        return WITHIN_NOISE, f"significant but within the {band} ({interval(change)})"
    # Straddling the edge: real, not shown to exceed the band, and possibly larger.
    edge = max(change.ci_low, change.ci_high, key=abs)
    return WITHIN_NOISE, (
        f"significant, not shown beyond the {band} ({interval(change)}); "
        f"up to {pct(edge)} is not ruled out"
    )


def not_significant(
    change: Change,
    p_adjusted: float,
    threshold: float,
    noisy: str | None,
    alpha: float,
    level: float,
) -> tuple[Verdict, str]:
    """The verdict of a p above the ``level`` asked (``alpha``, or alpha / 10 in noise)."""
    if noisy:
        # A p under alpha that is not significant needs saying why.
        stricter = p_adjusted < alpha
        needs = f" (at this noise it needs p < {level:.2g})" if stricter else ""
        return INCONCLUSIVE, f"{noisy}; adjusted p={p_adjusted:.2g}{needs}"
    if change.ci_low > threshold or change.ci_high < -threshold:
        # Too few processes for the rank test to reach alpha (3 vs 3 never
        # can); calling that "no change" would hide a likely change.
        return INCONCLUSIVE, (
            f"{interval(change)} lies beyond the {band_text(threshold)} noise band but is not "
            f"significant (adjusted p={p_adjusted:.2g}); run more processes"
        )
    if -threshold < change.ci_low and change.ci_high < threshold:
        return NO_CHANGE, (
            f"no change: {interval(change)} inside the {band_text(threshold)} noise band "
            f"(adjusted p={p_adjusted:.2g})"
        )
    # Not shown either way: say how large a change the data still allows, so
    # "no change" is never read as "proved equal".
    edge = max(change.ci_low, change.ci_high, key=abs)
    return NO_CHANGE, (
        f"no change detected ({interval(change)}, adjusted p={p_adjusted:.2g}), "
        f"but {pct(edge)} is not ruled out"
    )


def dwarfed(sides: str, p_adjusted: float, threshold: float, level: float) -> str:
    """Why a p under alpha is no verdict on a narrow band: ``sides`` (:func:`noisy_sides`)
    are noisier than five times it."""
    if threshold <= 0:
        return (
            f"no noise band ({sides}): adjusted p={p_adjusted:.2g} "
            f"(without a band a change needs p < {level:.2g})"
        )
    return (
        f"noisy for the {band_text(threshold)} noise band ({sides}, over five times it); "
        f"adjusted p={p_adjusted:.2g} (at this noise it needs p < {level:.2g})"
    )
