"""Retry decisions for the GitHub client: which answers to retry, and how long to wait.

Pure functions of the status, the headers and the attempt number, so the
rules are tested without a server: 429, a 403 that GitHub marks as a rate
limit, 5xx and network errors are retried with exponential backoff, waiting as
long as ``retry-after``/``x-ratelimit-reset`` ask.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

from perfctl.errors import UsageError

DEFAULT_MAX_WAIT_S = 60.0


@dataclass(frozen=True)
class RetryPolicy:
    """How long to keep trying: total budget, first backoff, per-request timeout."""

    max_wait_s: float = DEFAULT_MAX_WAIT_S
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    timeout_s: float = 30.0


def policy_from_env(env: Mapping[str, str]) -> RetryPolicy:
    """The retry policy, with ``PERFCTL_GITHUB_MAX_WAIT``/``_BACKOFF`` overrides."""
    return RetryPolicy(
        max_wait_s=_env_float(env, "PERFCTL_GITHUB_MAX_WAIT", DEFAULT_MAX_WAIT_S),
        backoff_s=_env_float(env, "PERFCTL_GITHUB_BACKOFF", 1.0),
    )


def _env_float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value < 0:
        raise UsageError(
            f"{name}={_clip(raw)} is not a number of seconds", f"set {name} to e.g. 60, or unset it"
        )
    return value


def _clip(text: str, limit: int = 80) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _header_seconds(value: str | None, now: float) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:  # retry-after may also be an HTTP date
        return max(0.0, parsedate_to_datetime(value).timestamp() - now)
    except (TypeError, ValueError):
        return None


def is_rate_limited(status: int, headers: Mapping[str, str]) -> bool:
    """429, or 403 that GitHub marks as a (primary or secondary) rate limit."""
    if status == 429:
        return True
    return status == 403 and (
        headers.get("x-ratelimit-remaining") == "0" or "retry-after" in headers
    )


def retry_delay(
    status: int | None, headers: Mapping[str, str], attempt: int, policy: RetryPolicy, now: float
) -> float | None:
    """Seconds to wait before retrying, or None when the answer is final.

    ``status`` None means the request never got an answer (network error).
    """
    backoff = min(policy.backoff_s * 2**attempt, policy.max_backoff_s)
    if status is not None and is_rate_limited(status, headers):
        asked = _header_seconds(headers.get("retry-after"), now)
        if asked is None and headers.get("x-ratelimit-reset"):
            reset = _header_seconds(headers.get("x-ratelimit-reset"), 0.0)
            asked = None if reset is None else max(0.0, reset - now)
        return backoff if asked is None else asked
    if status is None or status >= 500:
        return backoff
    return None
