"""A resumable pass over a store (`retrieval retokenize`, `reembed-turns`, `embed-passages`):
memories namespace by namespace in id order, a batch at a time, from where the last run of the
same pass recorded that it got to (db.meta.progress; the caller records each batch with its
work, in one transaction)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg

from db import meta
from db import pass_terms as db_terms

# Fetches the next rows of a namespace after a memory id, at most a batch of them (each has "id").
Fetch = Callable[[asyncpg.Connection, str, int, int], Awaitable[list[asyncpg.Record]]]


async def batches(
    pool: asyncpg.Pool, key: str, fetch: Fetch, *, batch: int, namespace: str | None = None
) -> AsyncIterator[tuple[str, list[asyncpg.Record]]]:
    """(namespace, rows) in order — only `namespace`'s when given — from where the run
    recorded under `key` stopped."""
    async with pool.acquire() as conn:
        start_ns, last = await meta.progress(conn, key)
        if namespace is not None:
            namespaces = [namespace]
            if start_ns != namespace:
                start_ns, last = namespace, 0
        else:
            namespaces = [
                r["namespace"] for r in await conn.fetch(db_terms.NAMESPACES_FROM, start_ns)
            ]
    for ns in namespaces:
        after = last if ns == start_ns else 0
        while True:
            async with pool.acquire() as conn:
                rows = await fetch(conn, ns, after, batch)
            if not rows:
                break
            yield ns, rows
            after = rows[-1]["id"]


async def finish(pool: asyncpg.Pool, key: str) -> None:
    """Forget a pass's progress: it is done."""
    async with pool.acquire() as conn:
        await conn.execute(meta.DELETE_VALUE, key)
