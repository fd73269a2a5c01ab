"""Store URLs (``postgresql://user:password@host:port/db``): recognised and redacted.

Kept apart from :mod:`perfctl.store.postgres` so that configuration and error
paths can recognise and redact a URL without importing the database driver.
A URL's password is never printed: every message that could show the URL (or
a driver message that echoes part of it) goes through :func:`scrub` first.
"""

from __future__ import annotations

import os
from urllib.parse import unquote, urlsplit, urlunsplit

SCHEMES = ("postgresql", "postgres")
ENV_VAR = "PERFCTL_STORE_URL"
HIDDEN = "***"


def is_store_url(text: str) -> bool:
    """Whether a `store` value names a database server rather than a directory."""
    return text.split("://", 1)[0].lower() in SCHEMES and "://" in text


def from_env() -> str | None:
    """The store URL from ``PERFCTL_STORE_URL`` (unset or empty: none)."""
    value = os.environ.get(ENV_VAR, "").strip()
    return value or None


def redact(url: str) -> str:
    """The URL with its password (in the authority or the query) replaced by ``***``."""
    if "://" not in url:  # not a URL (a key=value DSN?): nothing of it is safe to show
        return HIDDEN
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, host = netloc.rsplit("@", 1)
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}:{HIDDEN}@{host}" if ":" in userinfo else f"{user}@{host}"
        query = "&".join(
            f"{k}={HIDDEN}" if k.lower() == "password" else f"{k}={v}" if sep else k
            for k, sep, v in (item.partition("=") for item in parts.query.split("&") if item)
        )
        return urlunsplit((parts.scheme, netloc, parts.path, query, ""))
    except ValueError:
        # Unparsable: show the scheme alone rather than risk the secret.
        return url.split("://", 1)[0] + "://" + HIDDEN


def secrets_of(url: str) -> list[str]:
    """The password(s) a URL carries, raw and percent-decoded, longest first."""
    found: set[str] = set()
    try:
        parts = urlsplit(url)
    except ValueError:
        return [url]
    if "@" in parts.netloc:
        userinfo = parts.netloc.rsplit("@", 1)[0]
        if ":" in userinfo:
            found.add(userinfo.split(":", 1)[1])
    for item in parts.query.split("&"):
        key, _, value = item.partition("=")
        if key.lower() == "password":
            found.add(value)
    found |= {unquote(s) for s in found}
    return sorted((s for s in found if s), key=len, reverse=True)


def scrub(text: str, url: str) -> str:
    """``text`` with the URL redacted and every trace of its password replaced."""
    text = text.replace(url, redact(url))
    for secret in secrets_of(url):
        text = text.replace(secret, HIDDEN)
    return text
