"""Bulk import at database speed: stage rows with COPY (each chunk committed, so an interrupted
import resumes), then publish the whole import in one transaction with the same upsert as the
API's writes. Where the import is at least as large as the table, the indexes that are
cheaper to build once than to grow row by row (the HNSW graphs, trigram, postings impact) are dropped and
rebuilt inside that transaction, from their own definitions in the catalog."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import asyncpg

from db.memories import COLUMNS, LOCK_NAMESPACE, MemoryRow, as_vector, upsert_sql

logger = logging.getLogger(__name__)

# Built once after the rows are in rather than grown with them (bulk builds are several times
# faster; the rows' other indexes are needed by the upsert itself).
DEFERRED_INDEXES = (
    "idx_memories_embedding_hnsw",
    "idx_memories_content_trgm",
    "idx_postings_term_impact",
    "idx_memory_vectors_hnsw",
    "idx_memory_passages_hnsw",
)

# A staged import not published within this many days is dropped by the next import.
STALE_DAYS = 7

_STAGE_COLUMNS = (
    "import_id",
    "seq",
    *COLUMNS,
    "entities",
    "entity_weights",
    "links",
    "passages_given",
)
_PASSAGE_COLUMNS = ("import_id", "seq", "ord", "start_char", "end_char", "embedding")

# Registers an import (idempotent) and drops the staging of imports abandoned long ago.
_BEGIN = """
INSERT INTO imports (import_id, namespace) VALUES ($1, $2) ON CONFLICT (import_id) DO NOTHING"""
_DROP_STALE = f"DELETE FROM imports WHERE started_at < now() - interval '{STALE_DAYS} days'"
# Returns the last staged line of an import (0 when none): chunks are committed in order.
_STAGED_UP_TO = "SELECT coalesce(max(seq), 0) FROM import_rows WHERE import_id = $1"
_COUNT_STAGED = "SELECT count(*) FROM import_rows WHERE import_id = $1"
# Returns min(rows of memories, $1): whether the table is smaller than an import, at a cost
# bounded by the import's size.
_TABLE_ROWS_UP_TO = "SELECT count(*) FROM (SELECT 1 FROM memories LIMIT $1) AS x"
# Returns the planner's row estimate of memories (sizes the index builds' memory).
_TABLE_ROWS = "SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = 'memories'::regclass"
# Returns the definitions of the deferred indexes that exist.
_INDEX_DEFS = """
SELECT indexname, indexdef FROM pg_indexes
WHERE schemaname = current_schema() AND indexname = ANY($1::text[]) ORDER BY indexname"""

# Makes the weekly vector partitions (migration 0009) of an import's rows and of now (a row
# without created_at gets now()).
_ENSURE_STAGED_WEEKS = """
SELECT memory_vectors_ensure(array_append(array(
    SELECT created_at FROM import_rows WHERE import_id = $1 AND created_at IS NOT NULL), now()))"""

# The staged rows of import $2 as the upsert's source.
_STAGED = "(SELECT * FROM import_rows AS u WHERE u.import_id = $2 AND (u.created_at IS NOT NULL) = {given}) AS u"
_PUBLISH = {
    given: f"WITH w AS ({upsert_sql(_STAGED.format(given=given), given_created_at=given)}) "
    "SELECT count(*) FILTER (WHERE inserted), count(*) FROM w"
    for given in (True, False)
}
_DELETE_ENTITIES = """
DELETE FROM memory_entities e USING import_rows r, memories m
WHERE r.import_id = $2 AND m.namespace = $1 AND m.external_id = r.external_id AND e.memory_id = m.id"""
_INSERT_ENTITIES = """
INSERT INTO memory_entities (namespace, entity, memory_id, weight)
SELECT $1, x.entity, m.id, x.weight
FROM import_rows r JOIN memories m ON m.namespace = $1 AND m.external_id = r.external_id
CROSS JOIN LATERAL unnest(r.entities, r.entity_weights) AS x(entity, weight)
WHERE r.import_id = $2
ON CONFLICT DO NOTHING"""
_DELETE_LINKS = """
DELETE FROM memory_links l USING import_rows r
WHERE r.import_id = $2 AND l.namespace = $1 AND l.from_external = r.external_id"""
_INSERT_LINKS = """
INSERT INTO memory_links (namespace, from_external, to_external, label)
SELECT $1, r.external_id, l ->> 0, l ->> 1
FROM import_rows r CROSS JOIN LATERAL jsonb_array_elements(r.links) AS l
WHERE r.import_id = $2
ON CONFLICT DO NOTHING"""
# The passages of the rows that give theirs replace the stored ones.
_DELETE_PASSAGES = """
DELETE FROM memory_passages p USING import_rows r, memories m
WHERE r.import_id = $2 AND r.passages_given AND m.namespace = $1
  AND m.external_id = r.external_id AND p.memory_id = m.id"""
_INSERT_PASSAGES = """
INSERT INTO memory_passages (memory_id, ord, namespace, start_char, end_char, embedding)
SELECT m.id, ip.ord, $1, ip.start_char, ip.end_char, ip.embedding
FROM import_passages ip
JOIN import_rows r ON r.import_id = ip.import_id AND r.seq = ip.seq
JOIN memories m ON m.namespace = $1 AND m.external_id = r.external_id
WHERE ip.import_id = $2"""
_FORGET = "DELETE FROM imports WHERE import_id = $1"


class Rebuild(StrEnum):
    """When a publish drops and rebuilds the deferred indexes."""

    AUTO = "auto"  # when the import holds more rows than the table
    ALWAYS = "always"
    NEVER = "never"


@dataclass(frozen=True)
class Published:
    inserted: int
    updated: int
    rebuilt: tuple[str, ...]  # the indexes dropped and rebuilt


async def begin(conn: asyncpg.Connection, import_id: str, namespace: str) -> int:
    """Register an import; returns the last line already staged by an interrupted run (0)."""
    await conn.execute(_DROP_STALE)
    await conn.execute(_BEGIN, import_id, namespace)
    return int(await conn.fetchval(_STAGED_UP_TO, import_id))


async def stage(
    conn: asyncpg.Connection, import_id: str, rows: Sequence[tuple[int, MemoryRow]]
) -> None:
    """COPY one chunk of (line, row) and the rows' passages into the staging tables (one
    commit)."""
    records = [
        (
            import_id,
            seq,
            *r.columns(),
            [e for e, _ in r.entities],
            [w for _, w in r.entities],
            [list(x) for x in r.links],
            r.passages is not None,
        )
        for seq, r in rows
    ]
    passages = [
        (import_id, seq, n, start, end, as_vector(v))
        for seq, r in rows
        for n, (start, end, v) in enumerate(r.passages or ())
    ]
    async with conn.transaction():
        await conn.copy_records_to_table("import_rows", records=records, columns=_STAGE_COLUMNS)
        if passages:
            await conn.copy_records_to_table(
                "import_passages", records=passages, columns=_PASSAGE_COLUMNS
            )


# Session-level lock of one import (released by unlock, or when the connection ends).
_TRY_LOCK = "SELECT pg_try_advisory_lock(hashtextextended($1, 0))"
_UNLOCK = "SELECT pg_advisory_unlock(hashtextextended($1, 0))"


async def try_lock(conn: asyncpg.Connection, import_id: str) -> bool:
    """Take the import's lock for this session; False when another session holds it."""
    return bool(await conn.fetchval(_TRY_LOCK, import_id))


async def unlock(conn: asyncpg.Connection, import_id: str) -> None:
    await conn.execute(_UNLOCK, import_id)


async def discard(conn: asyncpg.Connection, import_id: str) -> None:
    """Drop an import's staged rows."""
    await conn.execute(_FORGET, import_id)


def maintenance_mem(rows: int) -> str:
    """Memory for the index builds: the HNSW graph of 384-d rows must fit, or the build slows
    about tenfold (6 GB held 1M rows); 64 MB at least, 8 GB at most."""
    return f"{min(8192, max(64, rows * 6 // 1000))}MB"


async def publish(
    conn: asyncpg.Connection,
    import_id: str,
    namespace: str,
    *,
    rebuild: Rebuild = Rebuild.AUTO,
    timeout_s: float | None = None,
) -> Published:
    """Move a staged import into `memories` (entities and links with it) in one transaction."""
    # Before, in a statement (so a transaction) of its own: the publish may run for minutes,
    # and making a week holds the default partition's lock until commit.
    await conn.execute(_ENSURE_STAGED_WEEKS, import_id, timeout=timeout_s)
    async with conn.transaction():
        await conn.execute(LOCK_NAMESPACE, namespace, timeout=timeout_s)
        staged = int(await conn.fetchval(_COUNT_STAGED, import_id))
        defs = []
        if rebuild is Rebuild.ALWAYS or (
            rebuild is Rebuild.AUTO and await conn.fetchval(_TABLE_ROWS_UP_TO, staged) < staged
        ):
            defs = list(await conn.fetch(_INDEX_DEFS, list(DEFERRED_INDEXES)))
            for d in defs:
                await conn.execute(f'DROP INDEX "{d["indexname"]}"')  # names from the catalog
        t0 = time.perf_counter()
        inserted = written = 0
        for sql in _PUBLISH.values():
            row = await conn.fetchrow(sql, namespace, import_id, timeout=timeout_s)
            inserted, written = inserted + row[0], written + row[1]
        logger.info("publish: %d rows upserted in %.1f s", written, time.perf_counter() - t0)
        for sql in (
            _DELETE_ENTITIES,
            _INSERT_ENTITIES,
            _DELETE_LINKS,
            _INSERT_LINKS,
            _DELETE_PASSAGES,
            _INSERT_PASSAGES,
        ):
            await conn.execute(sql, namespace, import_id, timeout=timeout_s)
        logger.info("publish: entities, links, passages by %.1f s", time.perf_counter() - t0)
        if defs:
            total = int(await conn.fetchval(_TABLE_ROWS)) + staged
            await conn.execute(f"SET LOCAL maintenance_work_mem = '{maintenance_mem(total)}'")
            await conn.execute("SET LOCAL max_parallel_maintenance_workers = 1")
            for d in defs:
                # A partitioned table's index reads "ON ONLY" in the catalog: built that way it
                # would cover no partition.
                ddl = d["indexdef"].replace(" ON ONLY ", " ON ", 1)
                await conn.execute(ddl, timeout=timeout_s)
                logger.info("publish: %s built by %.1f s", d["indexname"], time.perf_counter() - t0)
        await conn.execute(_FORGET, import_id)
    if defs or staged > 10_000:
        # Statistics for the planner, and the visibility map the postings' index-only scans
        # need (autovacuum would get there, minutes later).
        await conn.execute(
            "VACUUM (ANALYZE) memories, postings, memory_vectors, memory_passages",
            timeout=timeout_s,
        )
    return Published(inserted, written - inserted, tuple(d["indexname"] for d in defs))
