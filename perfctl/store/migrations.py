"""The PostgreSQL store's schema: ordered migrations recorded in ``schema_version``.

Each migration is applied once, in order, inside one transaction that also
records it, while holding a transaction-scoped advisory lock: several perfctl
processes opening a fresh database at once apply every migration exactly once,
and a process killed midway leaves the database at the previous version. A
database at a newer version than this perfctl knows is refused (upgrade
perfctl) rather than written with an older layout.

Records are stored as their versioned JSON text (the same text as the SQLite
store's files, so either store exports the same format); the other columns
index them. A new migration appends to :data:`MIGRATIONS`, never edits one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Any fixed 64-bit number: "perfctl" in ASCII. Serialises schema changes only.
LOCK_KEY = 0x70657266_63746C


@dataclass(frozen=True)
class Migration:
    """One schema step: its version, what it does, and its SQL statements."""

    version: int
    description: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "runs, results, comparisons, comparison regimes, pending comparisons",
        (
            """CREATE TABLE runs (
                id text PRIMARY KEY, started text NOT NULL, status text NOT NULL,
                ref text NOT NULL, sha text NOT NULL, dirty boolean NOT NULL,
                machine text NOT NULL, record text NOT NULL)""",
            """CREATE TABLE results (
                run_id text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
                regime text NOT NULL, seq bigserial, status text NOT NULL,
                pyperf_file text NOT NULL, record text NOT NULL, pyperf text,
                PRIMARY KEY (run_id, regime))""",
            """CREATE TABLE comparisons (
                id text PRIMARY KEY, created text NOT NULL, base_sha text NOT NULL,
                head_sha text NOT NULL, dirty boolean NOT NULL, shard_run text,
                shard text, record text NOT NULL)""",
            "CREATE INDEX comparisons_commits ON comparisons (base_sha, head_sha, created)",
            "CREATE INDEX comparisons_shard_run ON comparisons (shard_run)",
            """CREATE TABLE comparison_regimes (
                comparison_id text NOT NULL REFERENCES comparisons (id) ON DELETE CASCADE,
                regime text NOT NULL, verdict text NOT NULL, change double precision,
                PRIMARY KEY (comparison_id, regime))""",
            """CREATE TABLE pending (
                key text NOT NULL, host text NOT NULL, runs text NOT NULL,
                created timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (key, host))""",
        ),
    ),
)
LATEST = MIGRATIONS[-1].version


class NewerSchema(Exception):
    """The database was migrated by a newer perfctl (carries its version)."""

    def __init__(self, version: int) -> None:
        super().__init__(version)
        self.version = version


def migrate(conn: Any) -> int:
    """Bring the database to :data:`LATEST`; returns the version it was at."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version (version integer PRIMARY KEY, "
            "description text NOT NULL, applied timestamptz NOT NULL DEFAULT now())"
        )
        row = conn.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()
        current = int(row[0])
        if current > LATEST:
            raise NewerSchema(current)
        for step in MIGRATIONS:
            if step.version > current:
                for sql in step.statements:
                    conn.execute(sql)
                conn.execute(
                    "INSERT INTO schema_version (version, description) VALUES (%s, %s)",
                    (step.version, step.description),
                )
    return current
