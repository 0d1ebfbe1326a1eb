"""The retrieval run log: every run's plan, candidates, selection and latencies."""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection
from typing import Any

import asyncpg

from db.session import session

# Stores one run.
INSERT_RUN = """
INSERT INTO retrieval_runs (run_id, namespace, query, strategy, plan, candidate_ids,
                            selected_ids, latencies, degraded, request_id)
VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8::jsonb, $9, $10)"""

# Returns one run by id.
# A run, when its namespace is one of $2 (NULL: any); another namespace's run is not found.
GET_RUN = """
SELECT * FROM retrieval_runs WHERE run_id = $1 AND ($2::text[] IS NULL OR namespace = ANY($2))"""


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
    request_id: str | None = None,
    timeout_s: float = 5.0,
) -> None:
    """Write one run record, within `timeout_s` whatever the server's state."""
    async with session(pool, timeout_s) as conn:
        await conn.execute(
            INSERT_RUN,
            uuid.UUID(run_id),
            namespace,
            query,
            strategy,
            plan,
            candidate_ids,
            selected_ids,
            latencies,
            degraded,
            request_id,
            timeout=timeout_s,
        )


async def get_run(
    pool: asyncpg.Pool,
    run_id: str,
    *,
    namespaces: Collection[str] | None = None,
    timeout_s: float | None = None,
) -> dict[str, Any] | None:
    """One run as a dict, or None (also when its namespace is not one of `namespaces`)."""
    scope = sorted(namespaces) if namespaces is not None else None
    async with session(pool, timeout_s if timeout_s is not None else 60.0) as conn:
        row = await conn.fetchrow(GET_RUN, uuid.UUID(run_id), scope, timeout=timeout_s)
    if row is None:
        return None
    out = dict(row)
    out["run_id"] = str(out["run_id"])
    return json.loads(json.dumps(out, default=str))


# Deletes up to $2 rows of a table older than $1 days; returns how many (one statement per
# table: the table names are constants, never user input). Write jobs and purges go once
# finished.
_OLD = {
    "retrieval_runs": "created_at",
    "feedback": "created_at",
    "ingest_jobs": "finished_at",
    "purges": "finished_at",
}
_PURGE = {
    table: f"""
DELETE FROM {table} WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM {table} WHERE {column} < now() - make_interval(days => $1) LIMIT $2))"""
    for table, column in _OLD.items()
}


# One purge statement's deadline (a batch of old rows).
PURGE_TIMEOUT_S = 60.0


async def purge_old(pool: asyncpg.Pool, days: int, *, batch: int = 5000) -> dict[str, int]:
    """Delete run-log, feedback and finished write-job rows older than `days`, `batch` rows per
    statement (short transactions, no long lock); returns the rows deleted per table."""
    deleted = {}
    for table, sql in _PURGE.items():
        total = 0
        while True:
            async with session(pool, PURGE_TIMEOUT_S) as conn:
                status = await conn.execute(sql, days, batch, timeout=PURGE_TIMEOUT_S)
            n = int(status.split()[-1])
            total += n
            if n < batch:
                break
        deleted[table] = total
    return deleted
