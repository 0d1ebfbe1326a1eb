"""Conversation turns embedded again in context (migration 0013, retrieval/ingest/turns.py): the
turns of a store written before it, each embedded alone, get the vector a write makes now, one
namespace and one batch at a time, recording where it got to so that a stopped run resumes there."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from db import meta
from db.memories import as_vector

# store_meta key: how far a run got ("namespace<TAB>last memory id").
PROGRESS_KEY = "reembed_turns_progress"

# Returns the next $3 memories of namespace $1 after id $2 that may follow another turn (they
# have a thread or reply to a memory), with what their context needs: the memory each replies
# to (the first by id when a memory replies to several).
NEXT_TURNS = """
SELECT m.id, m.external_id, m.title, m.content, m.thread, m.created_at,
       (SELECT min(l.to_external) FROM memory_links l
        WHERE l.namespace = m.namespace AND l.from_external = m.external_id
          AND l.label = 'reply_to') AS reply_to
FROM memories m
WHERE m.namespace = $1 AND m.id > $2
  AND (m.thread IS NOT NULL OR EXISTS (
        SELECT 1 FROM memory_links l
        WHERE l.namespace = m.namespace AND l.from_external = m.external_id
          AND l.label = 'reply_to'))
ORDER BY m.id LIMIT $3"""

# Replaces a memory's vector, unless its text changed since it was read (that write embedded
# it); the temporal leg's copy follows by trigger (migration 0009).
SET_VECTOR = "UPDATE memories SET embedding = $2 WHERE id = $1 AND content = $3"


async def next_turns(
    conn: asyncpg.Connection, namespace: str, after: int, limit: int
) -> list[asyncpg.Record]:
    return list(await conn.fetch(NEXT_TURNS, namespace, after, limit))


async def replace_vectors(
    pool: asyncpg.Pool, namespace: str, rows: Sequence[tuple[int, Any, str]], last: int
) -> None:
    """Write (id, vector, content it was made from) and record `last` as done, in one
    transaction."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.executemany(SET_VECTOR, [(i, as_vector(v), c) for i, v, c in rows])
        await meta.record_progress(conn, PROGRESS_KEY, namespace, last)
