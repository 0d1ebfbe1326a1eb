"""`retrieval embed-passages`: the long memories a store holds from before migration 0014 (one
vector of their first 2,000 characters, no passages) get their passages and the vector a write
makes now (the mean direction of the passages'), resumably. Short memories are not read again."""

from __future__ import annotations

from collections.abc import Callable

import asyncpg

from db import pass_passages as db_passages
from retrieval.embedding.base import Embedder
from retrieval.embedding.scheduling.documents import DocumentEmbedding
from retrieval.ingest.recipe import recipe
from retrieval.maintenance.passes import batches, finish
from retrieval.text.passages import SPLIT_ABOVE

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
        recipes = [recipe(r["title"], r["content"]) for r in rows]
        with DocumentEmbedding() as documents:  # background threads, for this batch
            texts = [t for rc in recipes for t in rc.passages]
            got = iter(await documents.embed(embedder, texts, 32))
        out = []
        for r, rc in zip(rows, recipes, strict=True):
            vecs = [next(got) for _ in rc.passages]
            out.append((r["id"], r["content"], rc.vector(None, None, vecs), rc.passage_rows(vecs)))
        done += await db_passages.give_passages(pool, ns, out, rows[-1]["id"])
        if log is not None:
            log(f"{ns}: {done} long memories given passages")
    await finish(pool, db_passages.PROGRESS_KEY)
    return done
