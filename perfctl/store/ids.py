"""Ids, timestamps and file-name slugs shared by every store backend."""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import UTC, datetime


def utcnow() -> str:
    """The current UTC time, ISO-8601 with seconds."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def new_id() -> str:
    """A sortable, unique id: UTC timestamp plus random suffix."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(3)


def slug(name: str) -> str:
    """A file-name-safe, collision-free name for a regime."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_")[:80] or "regime"
    if safe == name:
        return safe
    return f"{safe}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"
