"""Events read again: the memories written before migration 0021 (their event not read yet:
`event_read` NULL), or read by an older version of the event reader, get the event their words
place (retrieval.analysis.time.events), a batch at a time. The rows still to do are their own
progress: nothing else is recorded, and a stopped run resumes by reading them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import asyncpg

# Returns the next $2 memories after id $1 whose event is to be read (not read, or read by a
# version before $3; never the caller's, 0), with their text and time.
NEXT_UNREAD = """
SELECT id, title, content, created_at, memory_type, source_type FROM memories
WHERE id > $1 AND (event_read IS NULL OR (event_read > 0 AND event_read < $3))
ORDER BY id LIMIT $2"""

# Returns how many memories are still to be read (by version $1), counting at most $2.
COUNT_UNREAD = """
SELECT count(*) FROM (SELECT 1 FROM memories
  WHERE event_read IS NULL OR (event_read > 0 AND event_read < $1) LIMIT $2) AS x"""

# Writes the events of a batch ($1 ids, $2 ranges, $3 offsets, $4 the created_at each was read
# against, $5 the reader's version): only where the row is still unread by this version and its
# time is the one read against (a write since then has read it itself).
WRITE_EVENTS = """
UPDATE memories m SET event_time = u.event_time, event_offset = u.event_offset,
  event_read = $5
FROM unnest($1::bigint[], $2::tstzrange[], $3::int[], $4::timestamptz[])
  AS u(id, event_time, event_offset, created_at)
WHERE m.id = u.id AND m.created_at = u.created_at
  AND (m.event_read IS NULL OR (m.event_read > 0 AND m.event_read < $5))"""

# A re-read runs in one process at a time (each batch's transaction takes it, or skips).
TRY_LOCK = "SELECT pg_try_advisory_xact_lock(hashtextextended('read-events', 7231904118))"


async def next_unread(
    conn: asyncpg.Connection, after: int, batch: int, version: int
) -> list[asyncpg.Record]:
    """The next batch of memories whose event is to be read, after memory id `after`."""
    return await conn.fetch(NEXT_UNREAD, after, batch, version)


async def unread(conn: asyncpg.Connection, version: int, most: int) -> int:
    """How many memories are still to be read (at most `most` counted)."""
    return int(await conn.fetchval(COUNT_UNREAD, version, most))


async def write_events(
    pool: asyncpg.Pool,
    ids: Sequence[int],
    ranges: Sequence[asyncpg.Range | None],
    offsets: Sequence[int | None],
    read_at: Sequence[datetime],
    version: int,
) -> bool:
    """Write a batch's events in one transaction; False when another process holds the
    re-read (nothing written)."""
    async with pool.acquire() as conn, conn.transaction():
        if not await conn.fetchval(TRY_LOCK):
            return False
        await conn.execute(
            WRITE_EVENTS, list(ids), list(ranges), list(offsets), list(read_at), version
        )
    return True
