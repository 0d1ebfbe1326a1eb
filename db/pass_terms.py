"""Index terms made again: a store whose memories were tokenised by an older tokenizer (its
version in store_meta) gets each memory's terms replaced, one namespace and one batch at a time,
recording where it got to so that a stopped run resumes there."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from db import meta
from db.memories import LOCK_NAMESPACE
from db.meta import DELETE_VALUE, GET_VALUE, SET_VALUE

# store_meta keys: the tokenizer version the stored terms were made with, and how far a
# re-tokenization got ("namespace<TAB>last memory id").
VERSION_KEY = "tokenizer_version"
PROGRESS_KEY = "retokenize_progress"

# Returns whether the store holds any memory.
ANY_MEMORY = "SELECT EXISTS (SELECT 1 FROM memories)"
# Returns the namespaces holding memories, from $1 on, in order.
NAMESPACES_FROM = """
SELECT namespace FROM namespace_stats WHERE namespace >= $1 AND doc_count > 0 ORDER BY namespace"""
# Returns the next $3 memories of namespace $1 after id $2, in id order, with their text.
NEXT_BATCH = """
SELECT id, title, content FROM memories WHERE namespace = $1 AND id > $2 ORDER BY id LIMIT $3"""
# Replaces the terms of memories ($1 ids, $2 terms joined by spaces, $3 term counts) and the
# attribute each states ($4); postings and the BM25 statistics follow by trigger, as for any
# write.
REPLACE_TERMS = """
UPDATE memories m SET search_tokens = u.tokens, token_count = u.n, fact = u.fact,
  term_tf = (SELECT coalesce(jsonb_object_agg(lexeme, array_length(positions, 1)), '{}'::jsonb)
             FROM unnest(to_tsvector('simple', u.tokens)))
FROM unnest($1::bigint[], $2::text[], $3::int[], $4::text[]) AS u(id, tokens, n, fact)
WHERE m.id = u.id
  AND (m.search_tokens IS DISTINCT FROM u.tokens OR m.fact IS DISTINCT FROM u.fact)"""


async def stored_version(conn: asyncpg.Connection, current: str) -> str | None:
    """The tokenizer version of the store's terms; an empty store is recorded as `current`.
    None: a store with memories that never recorded one (made before versions were kept)."""
    got = await conn.fetchval(GET_VALUE, VERSION_KEY)
    if got is None and not await conn.fetchval(ANY_MEMORY):
        await conn.execute(SET_VALUE, VERSION_KEY, current)
        return current
    return str(got) if got is not None else None


async def progress(conn: asyncpg.Connection) -> tuple[str, int]:
    """Where a re-tokenization stopped: (namespace, last memory id done); ("", 0) = start."""
    return await meta.progress(conn, PROGRESS_KEY)


async def replace_terms(
    pool: asyncpg.Pool,
    namespace: str,
    ids: Sequence[int],
    terms: Sequence[Sequence[str]],
    counts: Sequence[int],
    facts: Sequence[str],
) -> None:
    """Write a batch's new terms (and each memory's length for BM25, `counts`, and the
    attribute it states, `facts`) and the progress
    past it in one transaction, under the namespace's writer lock (the statistics triggers take
    term rows as every writer does)."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(LOCK_NAMESPACE, namespace)
        await conn.execute(
            REPLACE_TERMS, list(ids), [" ".join(t) for t in terms], list(counts), list(facts)
        )
        await meta.record_progress(conn, PROGRESS_KEY, namespace, max(ids))


async def finish(pool: asyncpg.Pool, version: str) -> None:
    """Record the store's terms as made by `version` and forget the progress."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(SET_VALUE, VERSION_KEY, version)
        await conn.execute(DELETE_VALUE, PROGRESS_KEY)
