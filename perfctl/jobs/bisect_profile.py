"""``perfctl bisect --profile``: py-spy's differential of an answer's two ends."""

from __future__ import annotations

from collections.abc import Sequence

from perfctl.config import Config
from perfctl.model import RefInfo
from perfctl.stats.bisection import ProfileLink


def profile_ends(
    config: Config, regime: str, before: RefInfo, after: RefInfo, regimes: Sequence[str]
) -> ProfileLink:
    """py-spy profiles of both ends, diffed per op; a failure is kept as the link's error."""
    from perfctl.errors import PerfctlError
    from perfctl.jobs import profile as profiling

    try:
        a = profiling.resolve_target(config, after.sha, isolated=True)
        b = profiling.resolve_target(config, before.sha, isolated=True)
        d = profiling.profile_pair(config, regime, b, a, regimes=regimes)
    except PerfctlError as exc:
        return ProfileLink(before, after, error=exc.message)
    except OSError as exc:  # the reports folder cannot be written, say: never fatal
        return ProfileLink(before, after, error=f"{type(exc).__name__}: {exc}")
    moved = [f for f in d.diff.functions if f.change != "same"][:5]
    movers = tuple(
        f"{f.where}: self time per op {_signed_us(f.delta_self_per_op_s)} ({f.change})"
        for f in moved
    )
    files = {"diff_svg": str(d.diff_svg), "diff_reverse_svg": str(d.diff_reverse_svg)}
    return ProfileLink(before, after, {**files, "diff_json": str(d.diff_json)}, movers)


def _signed_us(seconds: float) -> str:
    return f"{seconds * 1e6:+.2f} µs"
