"""The noise band a regime is judged on, and the limits that scale with it.

A comparison has one band (``--threshold``, default ±1%); a regime may declare its
own (``@regime(threshold=0.10)``) for a workload whose noise no run on the machines it
is measured on can bring near it (a round trip to a child process on a busy 2-core
runner). The limits were set and simulated for a ±2% band (``LIMITS_BAND``): a side is
"too noisy" above a CV of 10% (five times it), and the futility stop asks for an
interval inside ±5% (2.5 times it). Both tests are rank-based, so scaling every log mean
and the band by one factor leaves every decision as it was: a wider band with the limits
scaled alike keeps the A/A rates simulated at ±2% (``tests/test_stats.py``).

Those two limits scale up with a wider band and never down with a narrower one
(:func:`scaled`): at the ±1% default a CV up to 10% may still end ``no change`` and
the futility stop still asks for ±5%, so that a busy machine reaches a verdict. Two
guards against false verdicts follow the band down instead: above a CV of five times
the band (:func:`proportional`) the band no longer filters chance results, so
significance needs alpha / 10 (a band of 0, too: every CV is over it); and below ±2%
(:func:`narrow`) an early stop on a change needs p < alpha / 100, not 50
(``decision.look_level``). Counters (``--measure instructions|memory``, 0.5%) meet the
first from a CV of 2.5%. Without those two, A/A false verdicts at ±1% read 1.1-1.3%
at process CVs of 8-12% (simulated; ``benchmarks/README.md``).

Why ±1% and not ±2%: a true +2% change can never be shown wholly beyond a ±2% band, so
that default hid the changes the noisy-machine benchmark asks to see (+2% quiet: 1 of
20 at ±2%, 20 of 20 at ±1%; ``benchmarks/README.md``).

Pure and import-light: discovery reads a probe's declared band through it.
"""

from __future__ import annotations

DEFAULT_BAND = 0.01  # --threshold's default
LIMITS_BAND = 0.02  # the band MAX_CV and the futility bound were set and simulated for


def band_in_range(value: float, *, none: bool = False) -> bool:
    """Whether ``value`` is a usable band: above 0 and below 1 (``none``: 0, no band, too).

    The one range every band is checked against (flags, config, stored records, a regime's
    own): a band of 100% or more would call everything ``no change``. A regime's own band
    may not be 0, since "no band" is the comparison's to choose. nan is out of range.
    """
    return (0 <= value if none else 0 < value) and value < 1


def alpha_in_range(value: float) -> bool:
    """Whether ``value`` is a usable significance level: above 0 and below 1 (nan is not).

    0 would never find a change, and 1 would call every noise one.
    """
    return 0 < value < 1


def declared(value: object) -> float | None:
    """A declared band (a probe's answer, a stored record): a fraction in (0, 1), or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if band_in_range(value) else None


def band_of(own: float | None, default: float) -> float:
    """The band a regime is judged on: its own declared one, else the comparison's."""
    found = declared(own)
    return default if found is None else found


def own_band(own: float | None, default: float) -> float | None:
    """A regime's own band where it differs from the comparison's (worth saying), else None."""
    return own if own is not None and own != default else None


def scaled(limit: float, band: float) -> float:
    """A limit set for LIMITS_BAND, scaled in proportion to a wider band (never narrowed)."""
    return limit * max(1.0, band / LIMITS_BAND)


def proportional(limit: float, band: float) -> float:
    """A limit set for LIMITS_BAND, scaled in proportion to any band, narrower ones too
    (the same product as :func:`scaled`, so the two agree exactly from LIMITS_BAND up)."""
    return limit * (band / LIMITS_BAND)


def narrow(band: float) -> bool:
    """Whether ``band`` is narrower than the one the limits were set for."""
    return band < LIMITS_BAND
