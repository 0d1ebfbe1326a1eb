"""Purging a namespace: a job (202, with progress) that erases its memories a batch at a time,
then every other row that names it, then vacuums (db.erasure). Idempotent: a purge asked for
while one runs is that one. A worker holds a purge under a lease renewed by each batch; one that
dies leaves a lease that runs out, and whichever process of the service looks next takes the
purge up where it stopped (each batch is one transaction: nothing is left half-erased)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from db import erasure as q
from db.errors import NotFound
from db.session import session
from retrieval import metrics as m

logger = logging.getLogger(__name__)

# Memories a purge erases in one transaction.
BATCH = 500
# A purge is its worker's for this long, renewed by every batch.
LEASE_S = 60.0
# How often a worker looks for a purge another left.
POLL_S = 10.0


@dataclass
class Purges:
    """Starts, runs and reports purges; `forget(namespace, ids)` drops this process's caches
    (the other processes hear of it by NOTIFY)."""

    pool: asyncpg.Pool
    owner: str
    timeout_s: float
    forget: Callable[[str, list[int] | None], None]
    batch: int = BATCH
    _running: dict[str, asyncio.Task[None]] = field(default_factory=dict)

    async def start(self, namespace: str, tenant: str) -> dict[str, Any]:
        """The namespace's purge: the one running, else a new one (started here)."""
        async with session(self.pool, self.timeout_s, transaction="write") as conn:
            row = await conn.fetchrow(
                q.START_PURGE, uuid.uuid4(), namespace, tenant, self.owner, LEASE_S,
                timeout=self.timeout_s,
            )  # fmt: skip
            if row is None:
                row = await conn.fetchrow(q.RUNNING_PURGE, namespace, timeout=self.timeout_s)
        if row is None:  # it finished between the two statements: a new one is asked for again
            return await self.start(namespace, tenant)
        if row["owner"] == self.owner:
            self._spawn(row)
        return q.purge_json(row)

    async def get(self, namespace: str, purge_id: str) -> dict[str, Any]:
        """A purge of this namespace; NotFound otherwise (another namespace's too)."""
        try:
            key = uuid.UUID(purge_id)
        except ValueError:
            raise NotFound(f"no purge {purge_id!r} in namespace {namespace!r}") from None
        async with session(self.pool, self.timeout_s) as conn:
            row = await conn.fetchrow(q.GET_PURGE, namespace, key, timeout=self.timeout_s)
        if row is None:
            raise NotFound(f"no purge {purge_id!r} in namespace {namespace!r}")
        return q.purge_json(row)

    def _spawn(self, row: asyncpg.Record) -> None:
        ns = row["namespace"]
        if ns not in self._running or self._running[ns].done():
            self._running[ns] = asyncio.create_task(self._run(row["id"], ns))

    async def wait(self, namespace: str) -> None:
        """Until this process's purge of the namespace (if any) has ended."""
        task = self._running.get(namespace)
        if task is not None:
            await asyncio.shield(task)

    async def run(self) -> None:
        """Take up purges whose worker died, until cancelled."""
        while True:
            try:
                async with session(self.pool, self.timeout_s) as conn:
                    row = await conn.fetchrow(
                        q.CLAIM_PURGE, self.owner, LEASE_S, timeout=self.timeout_s
                    )
                if row is not None:
                    logger.warning("purge %s: taken up where a stopped worker left it", row["id"])
                    self._spawn(row)
                    continue
            except Exception as exc:  # the database is away: look again later
                logger.warning("purges: cannot claim: %s", exc)
            await asyncio.sleep(POLL_S)

    async def close(self) -> None:
        """Stop this process's purges (their leases run out; another worker resumes them)."""
        for task in self._running.values():
            task.cancel()
        for task in self._running.values():
            with suppress(asyncio.CancelledError, Exception):
                await task

    async def _run(self, purge_id: uuid.UUID, namespace: str) -> None:
        try:
            while True:
                async with session(self.pool, self.timeout_s, transaction="write") as conn:
                    gone = await q.erase_batch(
                        conn, namespace, self.batch, timeout_s=self.timeout_s
                    )
                    mine = await conn.fetchval(
                        q.PURGE_PROGRESS, purge_id, self.owner, len(gone.ids), LEASE_S,
                        timeout=self.timeout_s,
                    )  # fmt: skip
                    if mine is None:  # another worker holds it now (this one was too slow)
                        raise _Lost()
                self.forget(namespace, gone.ids)
                m.ERASED.labels("purge").inc(len(gone.ids))
                if len(gone.ids) < self.batch:
                    break
            async with session(self.pool, self.timeout_s, transaction="write") as conn:
                await q.purge_rest(conn, namespace, timeout_s=self.timeout_s)
            self.forget(namespace, None)
            vacuumed = await self._vacuum()
            async with session(self.pool, self.timeout_s) as conn:
                await conn.execute(q.FINISH_PURGE, purge_id, self.owner, vacuumed)
            logger.info("purge %s of a namespace: done", purge_id)
        except _Lost:
            logger.warning("purge %s: lease taken over; left to its new worker", purge_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the lease runs out and the purge is taken up again
            logger.warning(
                "purge %s stopped: %s; it resumes when its lease runs out", purge_id, exc
            )

    async def _vacuum(self) -> bool:
        """VACUUM what erasing touched; False when it could not (the purge stands)."""
        try:
            async with self.pool.acquire() as conn:
                await q.vacuum(conn, timeout_s=max(self.timeout_s, 600.0))
            return True
        except Exception as exc:  # another session's lock, a deadline: the rows are gone anyway
            logger.warning("purge: VACUUM did not run: %s", exc)
            return False


class _Lost(Exception):
    """Another worker holds this purge now."""
