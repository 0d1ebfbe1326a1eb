"""The retrieval run log: every run's plan, candidates, selection and latencies."""

from __future__ import annotations

import json
import uuid
from typing import Any

import asyncpg

# Stores one run.
INSERT_RUN = """
INSERT INTO retrieval_runs (run_id, namespace, query, strategy, plan, candidate_ids, selected_ids, latencies, degraded)
VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8::jsonb, $9)"""

# Returns one run by id.
GET_RUN = "SELECT * FROM retrieval_runs WHERE run_id = $1"


async def insert_run(
    pool: asyncpg.Pool,
    *,
    run_id: str,
    namespace: str,
    query: str,
    strategy: str,
    plan: dict[str, Any],
    candidate_ids: list[str],
    selected_ids: list[str],
    latencies: dict[str, Any],
    degraded: list[str],
) -> None:
    """Write one run record."""
    async with pool.acquire() as conn:
        await conn.execute(
            INSERT_RUN, uuid.UUID(run_id), namespace, query, strategy, plan, candidate_ids, selected_ids,
            latencies, degraded,
        )


async def get_run(pool: asyncpg.Pool, run_id: str) -> dict[str, Any] | None:
    """One run as a dict, or None."""
    async with pool.acquire() as conn:
        row = await conn.fetchrow(GET_RUN, uuid.UUID(run_id))
    if row is None:
        return None
    out = dict(row)
    out["run_id"] = str(out["run_id"])
    return json.loads(json.dumps(out, default=str))
