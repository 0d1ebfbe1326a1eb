"""One asyncpg pool with pgvector's codec and the session settings searches rely on."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
from pgvector.asyncpg import register_vector


def _make_init(ef_search: int) -> Any:
    async def init(conn: asyncpg.Connection) -> None:
        await register_vector(conn)
        await conn.set_type_codec(
            "jsonb",
            encoder=lambda v: json.dumps(v, ensure_ascii=False),
            decoder=json.loads,
            schema="pg_catalog",
        )

    return init


async def create_pool(dsn: str, *, min_size: int = 2, max_size: int = 10, ef_search: int = 200) -> asyncpg.Pool:
    """Create the pool; the vector extension must exist (run migrations first)."""
    pool = await asyncpg.create_pool(
        dsn,
        # Startup parameters, not SET: the pool runs RESET ALL when a connection is released.
        server_settings={
            # Iterative scans keep HNSW from returning too few rows when namespace or type
            # filters discard part of the graph walk (pgvector 0.8); relaxed order is re-sorted.
            "hnsw.ef_search": str(int(ef_search)),
            "hnsw.iterative_scan": "relaxed_order",
            # Filters are written as `$n IS NULL OR ...`; a generic plan would not know which
            # are set, so each execution is planned with its values.
            "plan_cache_mode": "force_custom_plan",
        },
        min_size=min_size,
        max_size=max_size,
        init=_make_init(ef_search),
        command_timeout=60,
    )
    assert pool is not None
    return pool
