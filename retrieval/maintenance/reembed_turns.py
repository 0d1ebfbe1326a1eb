"""`retrieval reembed-turns`: embed the conversation turns a store holds from before migration
0013 (each embedded alone) after the turn each follows, as a write embeds them now (the recipe,
retrieval.ingest.recipe), resumably. Memories that follow no turn are not read again."""

from __future__ import annotations

import logging
from collections.abc import Callable

import asyncpg

from db import pass_turn_vectors as db_turns
from retrieval.embedding.base import Embedder
from retrieval.embedding.scheduling.documents import DocumentEmbedding
from retrieval.ingest.items import Link, MemoryItem
from retrieval.ingest.recipe import predecessors, recipe
from retrieval.maintenance.passes import batches, finish

logger = logging.getLogger(__name__)

BATCH = 200


def _item(r: asyncpg.Record) -> MemoryItem:
    """A stored turn as the write path sees an item (it was stored valid)."""
    links = (Link(r["reply_to"], "reply_to"),) if r["reply_to"] else ()
    return MemoryItem(
        id=r["external_id"],
        content=r["content"],
        title=r["title"],
        thread=r["thread"],
        created_at=r["created_at"],
        links=links,
    )


async def reembed_turns(
    pool: asyncpg.Pool,
    embedder: Embedder,
    *,
    namespace: str | None = None,
    batch: int = BATCH,
    log: Callable[[str], None] | None = None,
) -> int:
    """Embed every stored turn that follows another again (alone and after that turn, their
    mean), namespace by namespace in id order — only `namespace` when given — from where an
    earlier run stopped; returns how many turns got a new vector."""
    done = 0
    async for ns, rows in batches(
        pool, db_turns.PROGRESS_KEY, db_turns.next_turns, batch=batch, namespace=namespace
    ):
        items = [_item(r) for r in rows]
        ids = [str(it.id) for it in items]
        async with pool.acquire() as conn:
            before = await predecessors(conn, ns, items, ids, range(len(items)))
        # A long turn is embedded by its passages (embed-passages), not after its turn.
        planned = {i: recipe(items[i].title, items[i].content, before=before[i]) for i in before}
        follows = sorted(i for i, rc in planned.items() if rc.own is not None)
        recipes = [planned[i] for i in follows]
        texts = [str(rc.own) for rc in recipes] + [str(rc.after) for rc in recipes]
        with DocumentEmbedding() as documents:  # background threads, for this batch
            got = await documents.embed(embedder, texts, 32)
        n = len(follows)
        vectors = [
            (rows[i]["id"], rc.vector(got[k], got[n + k], []), rows[i]["content"])
            for k, (i, rc) in enumerate(zip(follows, recipes, strict=True))
        ]
        await db_turns.replace_vectors(pool, ns, vectors, rows[-1]["id"])
        done += n
        if log is not None:
            log(f"{ns}: {done} turns embedded in context")
    await finish(pool, db_turns.PROGRESS_KEY)
    return done


__all__ = ["BATCH", "reembed_turns"]
