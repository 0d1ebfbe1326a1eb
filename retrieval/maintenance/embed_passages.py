"""`retrieval embed-passages`: the long memories a store holds from before migration 0014 (one
vector of their first 2,000 characters, no passages) get their passages and the vector a write
makes now (the mean direction of the passages'), resumably. Short memories are not read again."""

from __future__ import annotations

from collections.abc import Callable

import asyncpg

from db import passages as db_passages
from retrieval.analysis.passages import SPLIT_ABOVE, passage_embedding_text, split_passages
from retrieval.embedding.providers import Embedder
from retrieval.ingest.write import embed_texts, mean_direction
from retrieval.maintenance.passes import batches, finish

# Long memories per transaction (each tens of passages).
BATCH = 20


async def embed_passages(
    pool: asyncpg.Pool,
    embedder: Embedder,
    *,
    namespace: str | None = None,
    batch: int = BATCH,
    log: Callable[[str], None] | None = None,
) -> int:
    """Give every long memory without passages its passages, namespace by namespace in id
    order — only `namespace` when given — from where an earlier run stopped; returns how many
    memories got them."""
    done = 0
    fetch = db_passages.fetch_longer_than(SPLIT_ABOVE)
    async for ns, rows in batches(
        pool, db_passages.PROGRESS_KEY, fetch, batch=batch, namespace=namespace
    ):
        spans = [split_passages(r["content"]) for r in rows]
        texts = [
            passage_embedding_text(r["title"], r["content"], sp)
            for r, ss in zip(rows, spans, strict=True)
            for sp in ss
        ]
        got = iter(await embed_texts(embedder, texts, 32))
        out = []
        for r, ss in zip(rows, spans, strict=True):
            parts = [(sp.start, sp.end, next(got)) for sp in ss]
            out.append((r["id"], r["content"], mean_direction([v for *_, v in parts]), parts))
        done += await db_passages.give_passages(pool, ns, out, rows[-1]["id"])
        if log is not None:
            log(f"{ns}: {done} long memories given passages")
    await finish(pool, db_passages.PROGRESS_KEY)
    return done
