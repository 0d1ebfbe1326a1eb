"""The write-job queue (migrations 0012, 0015): enqueue, claim under a lease, renew, finish,
release, read.

A job is claimed by one worker at a time: the claim takes a due job that is queued, or running
under a lease that ran out (its worker died) — of the tenant served least recently, its oldest
— and sets a new lease. Every later change names the owner, so a worker whose lease was taken
over cannot finish a job another now holds. A worker that knows an owner is dead (its own
previous run: retrieval.ingest.jobs) hands that owner's jobs back at once.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import asyncpg

ENQUEUE = """
INSERT INTO ingest_jobs (id, namespace, tenant, items, received, ids, estimate_s)
VALUES ($1, $2, $3, $4::jsonb, $5, $6::text[], $7)"""

# Unfinished jobs of a tenant ($1).
OPEN_JOBS = """
SELECT count(*) FROM ingest_jobs WHERE tenant = $1 AND state IN ('queued', 'running')"""

# $1 owner, $2 lease seconds. The tenant served least recently goes first (one never served
# before all), then the oldest job: one tenant's long queue — in however many namespaces —
# does not hold another's single job behind it. Returns the job's items and when it was
# accepted (an undated memory is dated then).
CLAIM = """
UPDATE ingest_jobs SET state = 'running', owner = $1,
       lease_until = now() + make_interval(secs => $2), attempts = attempts + 1,
       started_at = now()
WHERE id = (SELECT j.id FROM ingest_jobs j
            WHERE j.state IN ('queued', 'running') AND j.not_before <= now()
              AND (j.state = 'queued' OR j.lease_until < now())
            ORDER BY (SELECT max(o.started_at) FROM ingest_jobs o
                      WHERE o.tenant = j.tenant) NULLS FIRST,
                     j.created_at
            LIMIT 1 FOR UPDATE OF j SKIP LOCKED)
RETURNING id, namespace, tenant, items, attempts, created_at, estimate_s"""

# The owners of running jobs whose name starts with $1 (a host's workers).
RUNNING_OWNERS = """
SELECT DISTINCT owner FROM ingest_jobs WHERE state = 'running' AND starts_with(owner, $1)"""

# Hands the running jobs of dead owners ($1) back to the queue at once; how many.
RELEASE_DEAD = """
UPDATE ingest_jobs SET state = 'queued', owner = NULL, lease_until = NULL,
       error = 'its worker stopped before finishing it; taken up again'
WHERE state = 'running' AND owner = ANY($1::text[])"""

# $1 id, $2 owner, $3 lease seconds; no row when the lease is no longer this owner's.
RENEW = """
UPDATE ingest_jobs SET lease_until = now() + make_interval(secs => $3)
WHERE id = $1 AND owner = $2 AND state = 'running' RETURNING id"""

# $1 id, $2 owner, $3 report.
FINISH = """
UPDATE ingest_jobs SET state = 'done', items = NULL, report = $3::jsonb, error = NULL,
       finished_at = now(), lease_until = NULL
WHERE id = $1 AND owner = $2 AND state = 'running' RETURNING id"""

# $1 id, $2 owner, $3 seconds before it may be claimed again, $4 what went wrong.
RELEASE = """
UPDATE ingest_jobs SET state = 'queued', owner = NULL, lease_until = NULL,
       not_before = now() + make_interval(secs => $3), error = $4
WHERE id = $1 AND owner = $2 AND state = 'running'"""

# $1 id, $2 owner, $3 why.
FAIL = """
UPDATE ingest_jobs SET state = 'failed', items = NULL, error = $3, finished_at = now(),
       lease_until = NULL
WHERE id = $1 AND owner = $2 AND state = 'running'"""

# One job of a namespace ($1 namespace, $2 id): another namespace's job is not found.
GET_JOB = """
SELECT id, namespace, state, received, ids, estimate_s, attempts, created_at, started_at,
       finished_at, report, error
FROM ingest_jobs WHERE namespace = $1 AND id = $2"""


async def enqueue(
    conn: asyncpg.Connection,
    namespace: str,
    tenant: str,
    items: list[dict[str, Any]],
    ids: list[str],
    estimate_s: float,
    *,
    timeout_s: float | None,
) -> uuid.UUID:
    """Store a validated batch as a queued job of `tenant`; its id."""
    job_id = uuid.uuid4()
    await conn.execute(
        ENQUEUE,
        job_id,
        namespace,
        tenant,
        dump(items),
        len(items),
        ids,
        estimate_s,
        timeout=timeout_s,
    )
    return job_id


def job_json(row: asyncpg.Record) -> dict[str, Any]:
    """A job row as the API reports it."""
    out = dict(row)
    out["id"] = str(out["id"])
    out["ids"] = list(out["ids"])
    if isinstance(out.get("report"), str):
        out["report"] = json.loads(out["report"])
    return out


def dump(value: Any) -> str:
    """JSON for a jsonb parameter."""
    return json.dumps(value, ensure_ascii=False)


# Returns how many jobs wait and how long the oldest has waited (seconds).
QUEUE_STATE = """
SELECT count(*) AS queued,
       coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 AS oldest_s
FROM ingest_jobs WHERE state = 'queued'"""


def load_items(value: Any) -> list[dict[str, Any]]:
    """A job's stored items (jsonb reaches asyncpg as text)."""
    got = json.loads(value) if isinstance(value, str) else value
    if not isinstance(got, list):
        raise ValueError("a write job's items are not a list")
    return got
