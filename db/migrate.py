"""Forward-only numbered SQL migrations, recorded in a table, under an advisory lock."""

from __future__ import annotations

import hashlib
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

import asyncpg

logger = logging.getLogger(__name__)

# Any constant works; it only has to be the same for every process of this service.
_LOCK_KEY = 7_231_904_118

_FILE_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

# Returns nothing; creates the migration record table.
_CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()[:16]


def migrations_dir() -> Path:
    """The migrations folder: RETRIEVAL_MIGRATIONS_DIR, or the one inside this package (shipped
    with it, so an installed service migrates wherever it runs)."""
    env = os.environ.get("RETRIEVAL_MIGRATIONS_DIR")
    return Path(env) if env else Path(__file__).resolve().parent / "migrations"


def load_migrations(folder: Path | None = None) -> list[Migration]:
    """Read NNNN_name.sql files in version order; a folder without any is an error (a service
    that migrated nothing would fail later, on a table or type that is not there)."""
    folder = folder or migrations_dir()
    if not any(folder.glob("*.sql")):
        raise FileNotFoundError(
            f"no migrations (NNNN_name.sql) in {folder}: set RETRIEVAL_MIGRATIONS_DIR to the "
            "service's migrations folder, or reinstall the package"
        )
    found = []
    for path in sorted(folder.glob("*.sql")):
        m = _FILE_RE.match(path.name)
        if not m:
            raise ValueError(f"migration file name must be NNNN_name.sql: {path.name}")
        found.append(Migration(int(m.group(1)), m.group(2), path.read_text(encoding="utf-8")))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise ValueError("two migrations share a version number")
    return found


def _zone_literal(timezone: str) -> str:
    """An IANA zone name as an SQL literal (the names hold letters, digits, _ + - / only)."""
    if not re.fullmatch(r"[A-Za-z0-9_+/-]{1,64}", timezone):
        raise ValueError(f"not a time zone name: {timezone!r}")
    return f"'{timezone}'"


async def migrate(
    conn: asyncpg.Connection,
    *,
    embedding_dim: int,
    timezone: str = "Asia/Tokyo",
    folder: Path | None = None,
) -> list[int]:
    """Apply pending migrations; return the versions applied now. Safe to run concurrently.
    `timezone` is where weeks start for the time partitions (0009), when that one is applied."""
    applied_now: list[int] = []
    await conn.execute("SELECT pg_advisory_lock($1)", _LOCK_KEY)
    try:
        await conn.execute(_CREATE_TABLE)
        done = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}
        for mig in load_migrations(folder):
            if mig.version in done:
                continue
            sql = mig.sql.replace("{{embedding_dim}}", str(int(embedding_dim))).replace(
                "{{timezone}}", _zone_literal(timezone)
            )
            async with conn.transaction():
                await conn.execute(sql)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                    mig.version,
                    mig.name,
                    mig.checksum,
                )
            logger.info("applied migration %04d_%s", mig.version, mig.name)
            applied_now.append(mig.version)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)
    return applied_now


async def pending(
    conn: asyncpg.Connection, folder: Path | None = None, *, timeout_s: float | None = None
) -> list[int]:
    """Versions not yet applied (all of them when the record table is missing)."""
    exists = await conn.fetchval(
        "SELECT to_regclass('schema_migrations') IS NOT NULL", timeout=timeout_s
    )
    done: set[int] = set()
    if exists:
        rows = await conn.fetch("SELECT version FROM schema_migrations", timeout=timeout_s)
        done = {r["version"] for r in rows}
    return [m.version for m in load_migrations(folder) if m.version not in done]
