"""The noise band a regime is judged on, and the limits that scale with it.

A comparison has one band (``--threshold``, default ±2%); a regime may declare its
own (``@regime(threshold=0.10)``) for a workload whose noise no run on the machines it
is measured on can bring near ±2% (a round trip to a child process on a busy 2-core
runner). The rules were set and simulated for the default band: a side is "too noisy"
above a CV of 10% (five times the band), and the futility stop asks for an interval
inside ±5% (2.5 times it). Both tests are rank-based, so scaling every log mean and the
band by one factor leaves every decision as it was: a wider band with the limits scaled
alike keeps the A/A rates simulated at ±2% (``tests/test_stats.py``). The limits scale up
with a wider band and never down with a narrower one (a ±1% band keeps the 10% limit).

Pure and import-light: discovery reads a probe's declared band through it.
"""

from __future__ import annotations

DEFAULT_BAND = 0.02  # the band the limits below were set for


def declared(value: object) -> float | None:
    """A declared band (a probe's answer, a stored record): a fraction in (0, 1), or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 0 < value < 1 else None


def band_of(own: float | None, default: float) -> float:
    """The band a regime is judged on: its own declared one, else the comparison's."""
    found = declared(own)
    return default if found is None else found


def own_band(own: float | None, default: float) -> float | None:
    """A regime's own band where it differs from the comparison's (worth saying), else None."""
    return own if own is not None and own != default else None


def scaled(limit: float, band: float) -> float:
    """A limit set for the default band, scaled in proportion to a wider band."""
    return limit * max(1.0, band / DEFAULT_BAND)
