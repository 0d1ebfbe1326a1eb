"""Write jobs: a batch more than one request can embed is stored, answered 202, and written
in the background by whichever process of the service claims it first.

The write route estimates what embedding a batch costs here (`EmbedMeter`: tokens times the
measured seconds per token). Up to `RETRIEVAL_INLINE_EMBED_S` it embeds and writes inline and
answers 200; above, it stores the validated batch as a job (`db/write_jobs.py`) and
answers 202 with the job, whose state `GET /v1/jobs/{id}` reports. Either way the write
deadline bounds the transaction only, so every batch within the documented limits can be
written; a client never gets a timeout that its retry would meet again.

A job is embedded outside any transaction under a lease renewed between embedding calls; a
worker that dies leaves a lease that runs out and another claims the job. Writes are idempotent
by id, so a job written twice (a worker that died after the commit) stores the same rows.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Protocol

import asyncpg
import psutil

from db import write_jobs as q
from db.session import session
from retrieval import metrics as m
from retrieval.errors import EmbeddingError, InvalidInput, Overloaded
from retrieval.ingest.items import MemoryItem
from retrieval.tenants import TenantShares, tenant_of

logger = logging.getLogger(__name__)

# A claimed job is this worker's for this long, renewed between embedding calls.
LEASE_S = 60.0
# How often an idle worker looks for jobs other processes queued (its own wake it at once).
POLL_S = 2.0
# Claims of one job before it is given up as failed (a job that kills its worker every time).
MAX_ATTEMPTS = 8


def owner_name() -> str:
    """This worker's name in the queue: its host, process, and the process's start time (a pid
    is reused; a process's start time is not): whoever reads it on this host can tell whether
    the process still runs."""
    me = psutil.Process()
    return f"{socket.gethostname()}:{me.pid}:{int(me.create_time() * 1000)}:{uuid.uuid4().hex[:6]}"


def alive(owner: str) -> bool:
    """Whether the worker `owner` (owner_name, of this host) still runs."""
    try:
        _, pid, started, _ = owner.rsplit(":", 3)
        proc = psutil.Process(int(pid))
        return int(proc.create_time() * 1000) == int(started)
    except (ValueError, psutil.Error):
        return False


def retry_pause_s(attempts: int) -> float:
    """Seconds before a job that failed for a passing reason (the database or the embedding
    provider down) may be claimed again: 2, 4, 8 ... at most 60."""
    return float(min(60, 2**attempts))


# Writes a job's items: the Writer's `write` (items, namespace, ids=, tick=) -> its report.
class Report(Protocol):
    """What a write tells a job (the writer's IngestReport)."""

    received: int
    seconds: float

    def to_json(self) -> dict[str, Any]: ...


WriteFn = Callable[..., Awaitable[Report]]


@dataclass
class WriteJobs:
    """The queue of write jobs and this process's worker for it; a job is written through
    `write` (the Writer's, retrieval.ingest.writer)."""

    pool: asyncpg.Pool
    write: WriteFn
    write_timeout_s: float
    max_open: int
    # Whether this process writes jobs (run); off, it only queues them for other processes.
    work: bool = True
    # The tenants' shares: a job's embedding is charged to its tenant when it runs.
    shares: TenantShares | None = None

    def __post_init__(self) -> None:
        self.owner = owner_name()
        self._wake = asyncio.Event()

    async def submit(
        self,
        namespace: str,
        items: list[MemoryItem],
        ids: list[str],
        estimate_s: float,
        *,
        tenant: str | None = None,
    ) -> dict[str, Any]:
        """Store a validated batch as a job of `tenant` (default the namespace's; its ids fixed
        now); Overloaded when the tenant has `max_open` unfinished jobs already, in whatever
        namespaces."""
        tenant = tenant or tenant_of(None, namespace)
        rows = [{**it.to_json(), "id": x} for it, x in zip(items, ids, strict=True)]
        timeout = self.write_timeout_s
        async with session(self.pool, timeout, transaction="write") as conn:
            # One submitter per tenant at a time, so the count below stays true.
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended($1, 7231))",
                tenant,
                timeout=timeout,
            )
            open_jobs = await conn.fetchval(q.OPEN_JOBS, tenant, timeout=timeout)
            if open_jobs >= self.max_open:
                raise Overloaded(
                    f"this caller has {open_jobs} write jobs not finished yet "
                    f"(at most {self.max_open}); retry when one is done",
                    retry_after_s=int(max(estimate_s, 1.0)),
                )
            job_id = await q.enqueue(
                conn, namespace, tenant, rows, ids, estimate_s, timeout_s=timeout
            )
            row = await conn.fetchrow(q.GET_JOB, namespace, job_id, timeout=timeout)
        self._wake.set()
        return q.job_json(row)

    async def get(self, namespace: str, job_id: str) -> dict[str, Any] | None:
        """A job of this namespace, or None (another namespace's job is not found either)."""
        try:
            key = uuid.UUID(job_id)
        except ValueError:
            return None
        async with session(self.pool, self.write_timeout_s) as conn:
            row = await conn.fetchrow(q.GET_JOB, namespace, key, timeout=self.write_timeout_s)
        return q.job_json(row) if row is not None else None

    async def run(self) -> None:
        """Claim and write jobs until cancelled (at once when this process does not work)."""
        while self.work:
            try:
                await self.take_up_dead()
                await self._measure_queue()
                job = await self._claim()
            except Exception as exc:  # the database is away: look again later
                logger.warning("write jobs: cannot claim: %s", exc)
                job = None
            if job is None:
                self._wake.clear()
                with suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), POLL_S)
                continue
            try:
                await self.process(job)
            except Exception:  # e.g. the database went away while marking it: its lease runs out
                logger.exception("write job %s: left for a later claim", job["id"])

    async def take_up_dead(self) -> int:
        """Hand back at once the jobs that a worker of this host left running when it died (this
        service's own previous run, killed or crashed), instead of waiting for their lease;
        how many. A worker of another host is waited for (its lease runs out)."""
        host = socket.gethostname() + ":"
        async with session(self.pool, self.write_timeout_s) as conn:
            owners = [
                r["owner"]
                for r in await conn.fetch(q.RUNNING_OWNERS, host, timeout=self.write_timeout_s)
            ]
            dead = [o for o in owners if o != self.owner and not alive(o)]
            if not dead:
                return 0
            status = await conn.execute(q.RELEASE_DEAD, dead, timeout=self.write_timeout_s)
        n = int(status.split()[-1])
        if n:
            logger.warning("write jobs: %d left running by a stopped worker taken up again", n)
        return n

    async def _measure_queue(self) -> None:
        """The queue's depth and its oldest job's wait, for the metrics (and their alerts)."""
        async with session(self.pool, self.write_timeout_s) as conn:
            row = await conn.fetchrow(q.QUEUE_STATE, timeout=self.write_timeout_s)
        m.JOBS_QUEUED.set(row["queued"])
        m.JOB_OLDEST_S.set(row["oldest_s"])

    async def _claim(self) -> asyncpg.Record | None:
        async with session(self.pool, self.write_timeout_s) as conn:
            return await conn.fetchrow(q.CLAIM, self.owner, LEASE_S, timeout=self.write_timeout_s)

    async def _set(self, sql: str, *args: Any) -> str:
        async with session(self.pool, self.write_timeout_s) as conn:
            return str(await conn.execute(sql, *args, timeout=self.write_timeout_s))

    async def process(self, job: asyncpg.Record) -> None:
        """Write one claimed job: done, released for a later try, or failed."""
        job_id, namespace = job["id"], job["namespace"]
        if job["attempts"] > MAX_ATTEMPTS or job["items"] is None:
            await self._set(q.FAIL, job_id, self.owner, f"gave up after {MAX_ATTEMPTS} attempts")
            m.INGEST_JOBS.labels("failed").inc()
            return
        renewed = time.monotonic()

        async def keep_lease() -> None:
            nonlocal renewed
            if time.monotonic() - renewed < LEASE_S / 3:
                return
            async with session(self.pool, self.write_timeout_s) as conn:
                mine = await conn.fetchval(
                    q.RENEW, job_id, self.owner, LEASE_S, timeout=self.write_timeout_s
                )
            if mine is None:
                raise _LeaseLost(job_id)
            renewed = time.monotonic()

        try:
            raw = q.load_items(job["items"])
            # A memory is dated when the service took it, not when a worker got round to it
            # (after a backlog or a restart).
            items = [MemoryItem.from_json(r).dated(job["created_at"]) for r in raw]
            rep = await self.write(
                items, namespace, ids=[str(r["id"]) for r in raw], tick=keep_lease
            )
            if await self._set(q.FINISH, job_id, self.owner, q.dump(rep.to_json())) == "UPDATE 0":
                raise _LeaseLost(job_id)
            if self.shares is not None:
                self.shares.charge(job["tenant"], float(job["estimate_s"]))
            m.INGEST_JOBS.labels("done").inc()
            logger.info("write job %s: %d memories in %.1f s", job_id, rep.received, rep.seconds)
        except _LeaseLost:
            logger.warning("write job %s: lease taken over; left to its new worker", job_id)
        except (InvalidInput, ValueError) as exc:
            await self._set(q.FAIL, job_id, self.owner, str(exc))
            m.INGEST_JOBS.labels("failed").inc()
        except asyncio.CancelledError:
            # Shutting down: hand the job back at once (else its lease runs out first).
            with suppress(Exception):
                await asyncio.wait_for(
                    self._set(q.RELEASE, job_id, self.owner, 0.0, "the service restarted"), 2.0
                )
            raise
        except Exception as exc:
            await self._retry_later(job, exc)

    async def _retry_later(self, job: asyncpg.Record, exc: Exception) -> None:
        """A job that failed for a passing reason goes back to the queue, due after a pause."""
        pause = retry_pause_s(job["attempts"])
        logger.warning(
            "write job %s: %s: %s; again in %g s", job["id"], type(exc).__name__, exc, pause
        )
        # The caller reads this: what kind of failure, not a provider's or driver's text.
        why = (
            "the embedding failed"
            if isinstance(exc, EmbeddingError)
            else "the database was unavailable"
        )
        m.INGEST_JOBS.labels("retried").inc()
        with suppress(Exception):  # the database is away: the lease runs out and frees it
            await self._set(q.RELEASE, job["id"], self.owner, pause, f"{why}; trying again")


class _LeaseLost(Exception):
    """Another worker holds this job now."""
