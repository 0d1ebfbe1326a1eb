"""`retrieval retokenize`: make every memory's index terms again with this version's tokenizer
(after an upgrade that changed them: English stemming in tokenizer 4, English phrases that
Sudachi reads as one katakana word split into their words in 5, names keyed across scripts in
6), and read again the changing attribute each states (since 8: retrieval.analysis.facts),
resumably."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import asyncpg

from db import pass_terms as db_terms
from retrieval.ingest.index import index_texts, word_count
from retrieval.ingest.recipe import memory_text
from retrieval.maintenance.passes import batches
from retrieval.text.nlp import TOKENIZER_VERSION, JapaneseNLP

logger = logging.getLogger(__name__)

BATCH = 500


async def outdated(pool: asyncpg.Pool) -> str | None:
    """A sentence saying the store's terms were made by another tokenizer, or None."""
    async with pool.acquire() as conn:
        got = await db_terms.stored_version(conn, TOKENIZER_VERSION)
        _, resumed = await db_terms.progress(conn)
    if got == TOKENIZER_VERSION and not resumed:
        return None
    made = f"tokenizer {got}" if got else "a tokenizer before version 4"
    return (
        f"the stored memories' keyword terms were made by {made}, this is {TOKENIZER_VERSION}: "
        "run `retrieval retokenize` (English words are stemmed since 4, English phrases read "
        "as one katakana word are words since 5, people's names are keyed across scripts "
        "since 6, and their sounds match only across scripts since 7; until then they match "
        "less; the attribute each memory states is stored since 8, and read from the text at "
        "every question about now until then)"
    )


async def retokenize(
    pool: asyncpg.Pool,
    nlp: JapaneseNLP,
    *,
    batch: int = BATCH,
    log: Callable[[str], None] | None = None,
) -> int:
    """Replace the terms of every memory, namespace by namespace in id order, from where an
    earlier run stopped; returns how many memories were read."""
    done = 0
    async for ns, rows in batches(pool, db_terms.PROGRESS_KEY, _next_batch, batch=batch):
        texts = [memory_text(r["title"], r["content"]) for r in rows]
        read = await asyncio.to_thread(index_texts, nlp, texts, [False] * len(texts))
        new, facts = [r.terms for r in read], [r.fact for r in read]
        counts = [word_count(t) for t in new]
        await db_terms.replace_terms(pool, ns, [r["id"] for r in rows], new, counts, facts)
        done += len(rows)
        if log is not None:
            log(f"{ns}: {done} memories re-tokenized")
    await db_terms.finish(pool, TOKENIZER_VERSION)
    return done


async def _next_batch(
    conn: asyncpg.Connection, namespace: str, after: int, limit: int
) -> list[asyncpg.Record]:
    return list(await conn.fetch(db_terms.NEXT_BATCH, namespace, after, limit))


__all__ = ["BATCH", "outdated", "retokenize"]
