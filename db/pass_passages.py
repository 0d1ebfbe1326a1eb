"""Passages of long memories given to a store written before migration 0014 (`retrieval
embed-passages`): each long memory without passages gets them and the vector a write makes now,
a batch at a time, recording where it got to so that a stopped run resumes there."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from db import meta
from db.memories import MemoryRow, as_vector, write_passages

# store_meta key: how far a run got ("namespace<TAB>last memory id").
PROGRESS_KEY = "embed_passages_progress"

# Returns the next $3 memories of namespace $1 after id $2 whose content is longer than $4
# characters and that have no passages.
NEXT_LONG = """
SELECT m.id, m.external_id, m.title, m.content FROM memories m
WHERE m.namespace = $1 AND m.id > $2 AND char_length(m.content) > $4
  AND NOT EXISTS (SELECT 1 FROM memory_passages p WHERE p.memory_id = m.id)
ORDER BY m.id LIMIT $3"""

# Replaces a memory's vector unless its text changed since it was read (that write made its
# passages); returns its id when it did. The temporal leg's copy follows by trigger.
SET_VECTOR = "UPDATE memories SET embedding = $2 WHERE id = $1 AND content = $3 RETURNING id"


def fetch_longer_than(chars: int) -> Any:
    """A batch fetch (retrieval.maintenance.passes.Fetch) of the long memories without passages."""

    async def fetch(
        conn: asyncpg.Connection, namespace: str, after: int, limit: int
    ) -> list[asyncpg.Record]:
        return list(await conn.fetch(NEXT_LONG, namespace, after, limit, chars))

    return fetch


async def give_passages(
    pool: asyncpg.Pool,
    namespace: str,
    rows: Sequence[tuple[int, str, Any, Sequence[tuple[int, int, Any]]]],
    last: int,
) -> int:
    """Write each (id, content it was made from, vector, passages) whose memory still holds
    that content, and record `last` as done, in one transaction; returns how many."""
    async with pool.acquire() as conn, conn.transaction():
        done = []
        for mid, content, vector, passages in rows:
            if await conn.fetchval(SET_VECTOR, mid, as_vector(vector), content) is not None:
                done.append(
                    (mid, MemoryRow(external_id="", content=content, embedding=vector,
                                    search_tokens="", token_count=0, passages=passages))
                )  # fmt: skip
        await write_passages(conn, namespace, done, None)
        await meta.record_progress(conn, PROGRESS_KEY, namespace, last)
    return len(done)
