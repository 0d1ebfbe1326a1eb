"""Erasing memories for real, and purging a namespace: no row is left that holds, names or
quotes an erased memory.

Deleting a memory's row takes with it, through the store's triggers and keys: its vectors in
every weekly partition, its passages, its postings (the BM25 statistics put right: its terms'
document frequencies and the namespace's length), its entities and name keys, and the links it
made. `erase` also deletes, in the same transaction under the namespace's write lock: the links
other memories made to it, the feedback on it, the run-log entries that returned it or quote
it (a question that is a part of its text, or holds all of it), the finished write jobs that
name it, and the document frequencies it left at zero. Every process of the service is told
(NOTIFY `retrieval_forget`) and drops what its caches hold of the memories and the namespace's
cached query embeddings.

A purge of a namespace erases its memories a batch at a time (each batch one transaction, so
that a purge stopped half-way leaves whole memories, never half of one, and resumes), then
every row the namespace has elsewhere, then runs VACUUM on the tables it touched.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from db.memories import LOCK_NAMESPACE

# The channel every process of the service listens on: what to forget (JSON: the namespace,
# and the erased memories' internal ids, or every memory of the namespace).
FORGET_CHANNEL = "retrieval_forget"
# A notification's payload is at most 8,000 bytes: past this many ids, "all of the namespace".
MAX_NOTIFIED_IDS = 500

# Deletes the memories of namespace $1 with these external ids; returns their internal and
# external ids.
DELETE_MEMORIES = """
DELETE FROM memories WHERE namespace = $1 AND external_id = ANY($2::text[])
RETURNING id, external_id, content"""

# Deletes up to $2 memories of namespace $1 (a purge's batch); returns their ids and contents.
DELETE_BATCH = """
DELETE FROM memories WHERE id = ANY (ARRAY(
    SELECT id FROM memories WHERE namespace = $1 ORDER BY id LIMIT $2))
RETURNING id, external_id, content"""

# The links other memories of the namespace made to these memories.
DELETE_LINKS_TO = """
DELETE FROM memory_links WHERE namespace = $1 AND to_external = ANY($2::text[])"""

# The feedback given on these memories.
DELETE_FEEDBACK = "DELETE FROM feedback WHERE namespace = $1 AND external_id = ANY($2::text[])"

# The run-log entries of the namespace that returned one of these memories ($2, external ids)
# or quote one ($3, contents: a question that is part of one, or holds all of one).
DELETE_RUNS = """
DELETE FROM retrieval_runs r
WHERE r.namespace = $1
  AND (r.candidate_ids && $2::text[] OR r.selected_ids && $2::text[]
       OR EXISTS (SELECT 1 FROM unnest($3::text[]) AS c(content)
                  WHERE strpos(c.content, r.query) > 0 OR strpos(r.query, c.content) > 0))"""

# Finished write jobs that name one of these memories (a queued job's items are its own: it
# writes them when it runs).
DELETE_JOBS = """
DELETE FROM ingest_jobs
WHERE namespace = $1 AND state IN ('done', 'failed') AND ids && $2::text[]"""

# Terms no memory of the namespace holds any more.
DELETE_EMPTY_TERMS = "DELETE FROM term_df WHERE namespace = $1 AND df <= 0"

# Returns up to $1 memories past their expiry, oldest expiry first.
EXPIRED = """
SELECT namespace, external_id FROM memories
WHERE expires_at IS NOT NULL AND expires_at < now()
ORDER BY expires_at LIMIT $1"""

# What is left of a namespace once its memories are gone: every other row that names it.
PURGE_REST = [
    "DELETE FROM memory_links WHERE namespace = $1",
    "DELETE FROM feedback WHERE namespace = $1",
    "DELETE FROM retrieval_runs WHERE namespace = $1",
    "DELETE FROM ingest_jobs WHERE namespace = $1",
    "DELETE FROM term_df WHERE namespace = $1",
    "DELETE FROM namespace_stats WHERE namespace = $1",
    "DELETE FROM harness_indexes WHERE namespace = $1",
    "DELETE FROM imports WHERE namespace = $1",
]

# The tables a purge vacuums: their dead rows' space is made free and their pages pruned.
VACUUMED = (
    "memories",
    "memory_passages",
    "memory_vectors",
    "postings",
    "memory_entities",
    "memory_links",
    "term_df",
    "namespace_stats",
    "retrieval_runs",
    "feedback",
    "ingest_jobs",
)


@dataclass(frozen=True)
class Erased:
    """The memories an erase deleted: internal ids (what caches hold them by) and external
    ids (what the caller named)."""

    ids: list[int]
    external_ids: list[str]


def forget_payload(namespace: str, ids: Sequence[int]) -> str:
    """The NOTIFY payload: the namespace and the ids, or every memory of it when too many."""
    if len(ids) > MAX_NOTIFIED_IDS:
        return json.dumps({"namespace": namespace, "all": True})
    return json.dumps({"namespace": namespace, "ids": list(ids)})


async def _after(
    conn: asyncpg.Connection,
    namespace: str,
    rows: Sequence[asyncpg.Record],
    timeout_s: float | None,
    *,
    notify_all: bool = False,
) -> Erased:
    """Everything else that names or quotes the deleted rows, and the notification."""
    external = [r["external_id"] for r in rows]
    contents = [r["content"] for r in rows]
    ids = [int(r["id"]) for r in rows]
    if rows:
        await conn.execute(DELETE_LINKS_TO, namespace, external, timeout=timeout_s)
        await conn.execute(DELETE_FEEDBACK, namespace, external, timeout=timeout_s)
        await conn.execute(DELETE_RUNS, namespace, external, contents, timeout=timeout_s)
        await conn.execute(DELETE_JOBS, namespace, external, timeout=timeout_s)
        await conn.execute(DELETE_EMPTY_TERMS, namespace, timeout=timeout_s)
    if rows or notify_all:
        payload = (
            json.dumps({"namespace": namespace, "all": True})
            if notify_all
            else forget_payload(namespace, ids)
        )
        await conn.execute("SELECT pg_notify($1, $2)", FORGET_CHANNEL, payload, timeout=timeout_s)
    return Erased(ids, external)


async def erase(
    conn: asyncpg.Connection,
    namespace: str,
    external_ids: Sequence[str],
    *,
    timeout_s: float | None,
) -> Erased:
    """Erase these memories of the namespace, in the caller's transaction (module docstring);
    ids not stored are left out of what it returns."""
    await conn.execute(LOCK_NAMESPACE, namespace, timeout=timeout_s)
    rows = await conn.fetch(DELETE_MEMORIES, namespace, list(external_ids), timeout=timeout_s)
    return await _after(conn, namespace, rows, timeout_s)


async def erase_batch(
    conn: asyncpg.Connection, namespace: str, batch: int, *, timeout_s: float | None
) -> Erased:
    """Erase up to `batch` memories of the namespace (a purge's step), in the caller's
    transaction."""
    await conn.execute(LOCK_NAMESPACE, namespace, timeout=timeout_s)
    rows = await conn.fetch(DELETE_BATCH, namespace, batch, timeout=timeout_s)
    return await _after(conn, namespace, rows, timeout_s)


async def purge_rest(conn: asyncpg.Connection, namespace: str, *, timeout_s: float | None) -> None:
    """Every row that still names the namespace once its memories are gone (the caller's
    transaction), and the notification that drops its caches everywhere."""
    await conn.execute(LOCK_NAMESPACE, namespace, timeout=timeout_s)
    for sql in PURGE_REST:
        await conn.execute(sql, namespace, timeout=timeout_s)
    await _after(conn, namespace, [], timeout_s, notify_all=True)


async def vacuum(conn: asyncpg.Connection, *, timeout_s: float | None) -> None:
    """VACUUM the tables erasing touches (outside any transaction): the erased rows' space is
    freed for reuse and their pages pruned; only VACUUM FULL (an exclusive lock, not run
    here) rewrites a table without them (docs/runbook.md)."""
    await conn.execute(f"VACUUM (ANALYZE) {', '.join(VACUUMED)}", timeout=timeout_s)


# Starts a purge of namespace $2 unless one runs: returns the new one (none when one runs).
START_PURGE = """
INSERT INTO purges (id, namespace, tenant, total, owner, lease_until)
VALUES ($1, $2, $3, (SELECT count(*) FROM memories WHERE namespace = $2), $4, now() + make_interval(secs => $5))
ON CONFLICT (namespace) WHERE state = 'running' DO NOTHING
RETURNING *"""
# Returns the namespace's running purge.
RUNNING_PURGE = "SELECT * FROM purges WHERE namespace = $1 AND state = 'running'"
# Returns a purge of namespace $1 by id.
GET_PURGE = "SELECT * FROM purges WHERE namespace = $1 AND id = $2"
# Takes a running purge whose worker's lease ran out (it died): returns it.
CLAIM_PURGE = """
UPDATE purges SET owner = $1, lease_until = now() + make_interval(secs => $2)
WHERE id = (SELECT id FROM purges WHERE state = 'running' AND lease_until < now()
            ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING *"""
# Records a batch done and renews the lease; returns the purge, or nothing when another owns it.
PURGE_PROGRESS = """
UPDATE purges SET erased = erased + $3, lease_until = now() + make_interval(secs => $4)
WHERE id = $1 AND owner = $2 AND state = 'running'
RETURNING id"""
# Ends a purge.
FINISH_PURGE = """
UPDATE purges SET state = 'done', vacuumed = $3, finished_at = now(), lease_until = NULL
WHERE id = $1 AND owner = $2"""


def purge_json(row: asyncpg.Record) -> dict[str, object]:
    """A purge as the API shows it."""
    return {
        "id": str(row["id"]),
        "namespace": row["namespace"],
        "state": row["state"],
        "total": int(row["total"]),
        "erased": int(row["erased"]),
        "vacuumed": bool(row["vacuumed"]),
        "created_at": row["created_at"],
        "finished_at": row["finished_at"],
        "error": row["error"],
    }
