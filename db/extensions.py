"""The extensions the store needs. pg_trgm: whether it is there, with the index the names leg
reads (TRIGRAM_READY; without it that leg is off, said at start). pgvector, checked at start,
whatever the server: an extension built for another CPU (the
AVX-512 build an older embedded wheel shipped) kills its backend on the first distance. Found
mid-request or mid-import that reads as a pool error; found here it is one sentence. An older
extension version is updated in place (`ALTER EXTENSION vector UPDATE`)."""

from __future__ import annotations

import logging

import asyncpg

from db.errors import StoreError

logger = logging.getLogger(__name__)

# Returns pgvector's installed version (NULL: not created in this database) and the version
# the server's files provide (NULL: not available at all).
VECTOR_VERSIONS = """
SELECT (SELECT extversion FROM pg_extension WHERE extname = 'vector') AS installed,
       (SELECT default_version FROM pg_available_extensions WHERE name = 'vector') AS available"""

# Returns a 384-dimension cosine distance: the first thing a build for another CPU cannot do.
DISTANCE = "SELECT $1::vector <=> $1::vector"
PROBE_VECTOR = "[" + ",".join(["0.5"] * 384) + "]"

# What a backend that died under us looks like from here.
_DIED = (
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.InterfaceError,
    asyncpg.exceptions.CrashShutdownError,
    ConnectionError,
    OSError,
)


class VectorExtensionError(StoreError):
    """pgvector is missing on this server, or it crashes the backend computing a distance."""


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".") if x.isdigit())


async def check_vector(dsn: str, *, probe: str = DISTANCE) -> str:
    """Make sure pgvector can compute a distance on this server (updating an older installed
    version first); return the version in use. Raises VectorExtensionError naming the cause."""
    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow(VECTOR_VERSIONS)
        installed, available = row["installed"], row["available"]
        if available is None:
            raise VectorExtensionError(
                "the pgvector extension is not available on this PostgreSQL server: install "
                "pgvector there (or leave DATABASE_URL unset for the embedded server, which has it)"
            )
        if installed is not None and _version(installed) < _version(available):
            try:
                await conn.execute("ALTER EXTENSION vector UPDATE")
                logger.warning("pgvector updated in place from %s to %s", installed, available)
            except asyncpg.exceptions.InsufficientPrivilegeError as exc:
                # A server whose operator owns the extension (DATABASE_URL): theirs to update.
                logger.warning(
                    "pgvector %s is installed and %s available, but this role may not update "
                    "it (%s); the service goes on with %s",
                    installed,
                    available,
                    exc,
                    installed,
                )
        tx = conn.transaction()
        await tx.start()
        try:
            # On a new database the extension does not exist yet: made for the probe only,
            # and rolled back (migration 0001 makes it for good).
            await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            await conn.fetchval(probe, PROBE_VECTOR)
            version = await conn.fetchval(VECTOR_VERSIONS)
        except _DIED as exc:
            raise VectorExtensionError(
                f"pgvector {installed or available} crashed a PostgreSQL backend computing a "
                "vector distance: its library was built for another CPU (for example with "
                "AVX-512 instructions this CPU lacks) or is broken; install a pgvector build "
                f"for this machine ({type(exc).__name__})"
            ) from exc
        await tx.rollback()
        return str(version or available)
    finally:
        if not conn.is_closed():
            await conn.close()


# Returns whether the server has pg_trgm and the trigram index the names leg reads.
TRIGRAM_READY = """
SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') AS extension,
       to_regclass('idx_memories_content_trgm') IS NOT NULL AS indexed"""
