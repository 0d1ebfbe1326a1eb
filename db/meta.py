"""The store's own facts, kept in `store_meta`: the embedding model it holds, and where each
resumable maintenance pass got to."""

from __future__ import annotations

import asyncpg

from db.errors import EmbeddingModelMismatch

# Returns the stored embedding model and dimension, if any.
GET_META = "SELECT key, value FROM store_meta WHERE key IN ('embedding_model', 'embedding_dim')"
# Records a meta value once (first start).
PUT_META = "INSERT INTO store_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING"

# A store_meta value by key: read, set, forget.
GET_VALUE = "SELECT value FROM store_meta WHERE key = $1"
SET_VALUE = """
INSERT INTO store_meta (key, value) VALUES ($1, $2)
ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"""
DELETE_VALUE = "DELETE FROM store_meta WHERE key = $1"


async def progress(conn: asyncpg.Connection, key: str) -> tuple[str, int]:
    """Where a resumable pass over the store (re-tokenizing, re-embedding turns) stopped, as
    recorded under `key`: (namespace, last memory id done); ("", 0) = from the start."""
    got = await conn.fetchval(GET_VALUE, key)
    if not got:
        return "", 0
    namespace, _, last = str(got).rpartition("\t")
    return namespace, int(last)


async def record_progress(conn: asyncpg.Connection, key: str, namespace: str, last: int) -> None:
    """Record under `key` that a pass got to memory id `last` of `namespace`."""
    await conn.execute(SET_VALUE, key, f"{namespace}\t{last}")


async def check_embedding_model(conn: asyncpg.Connection, model: str, dim: int) -> None:
    """Record the model on first start; refuse a different model or dimension later."""
    async with conn.transaction():
        await conn.execute("LOCK TABLE store_meta IN SHARE ROW EXCLUSIVE MODE")
        meta = {r["key"]: r["value"] for r in await conn.fetch(GET_META)}
        if not meta:
            await conn.execute(PUT_META, "embedding_model", model)
            await conn.execute(PUT_META, "embedding_dim", str(dim))
            return
    if meta.get("embedding_model") != model or meta.get("embedding_dim") != str(dim):
        raise EmbeddingModelMismatch(
            f"the store holds vectors from {meta.get('embedding_model')} "
            f"({meta.get('embedding_dim')} dims) but the service is configured with {model} "
            f"({dim} dims); use the same model, or a new database (DATABASE_URL / "
            "RETRIEVAL_DATA_DIR) and re-ingest"
        )
