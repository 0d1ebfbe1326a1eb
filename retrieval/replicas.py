"""Reads on PostgreSQL streaming replicas, with read-your-writes; writes stay on the primary.

A replica serves a namespace's reads once it has replayed the primary's WAL up to the last
write this process made to that namespace (tracked per namespace); otherwise, and whenever no
replica is healthy, the primary serves them. A background check (every `check_every_s`) reads
each replica's replay position and lag; a replica that errors, is not in recovery, or lags more
than `max_lag_s` is skipped until a check finds it healthy again. A search leg that hits a
connection error on a replica marks it failed and runs again on the primary.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import asyncpg

from db.session import session
from retrieval import metrics as m

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Errors that say the server (not the statement) is gone: the leg may run again elsewhere.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.InterfaceError,
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.CrashShutdownError,
)

# Returns whether the server is a standby, how far it has replayed the WAL, and the seconds
# since the last transaction it replayed.
REPLICA_STATE_SQL = """
SELECT pg_is_in_recovery() AS standby, pg_last_wal_replay_lsn()::text AS replay,
       extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8 AS since_replay"""

# Returns the primary's current WAL position.
PRIMARY_LSN_SQL = "SELECT pg_current_wal_lsn()::text"


def lsn_value(text: str | None) -> int:
    """'16/B374D848' -> a number that orders WAL positions (0 for None)."""
    if not text:
        return 0
    hi, _, lo = text.partition("/")
    return (int(hi, 16) << 32) + int(lo, 16)


@dataclass
class Replica:
    index: int
    dsn: str
    pool: asyncpg.Pool | None = None
    healthy: bool = False
    replay_lsn: int = 0
    lag_s: float | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "replica": self.index,
            "healthy": self.healthy,
            "lag_s": None if self.lag_s is None or math.isinf(self.lag_s) else round(self.lag_s, 3),
            "error": self.error,
        }


@dataclass
class ReadRouter:
    """Chooses the pool a read runs on; knows each replica's health and replay position."""

    primary: asyncpg.Pool
    replicas: list[Replica]
    connect: Callable[[str], Awaitable[asyncpg.Pool]]
    max_lag_s: float = 5.0
    check_every_s: float = 1.0
    check_timeout_s: float = 2.0
    _written: dict[str, int] = field(default_factory=dict)
    _turn: itertools.count[int] = field(default_factory=itertools.count)
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.replicas and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for r in self.replicas:
            if r.pool is not None:
                await r.pool.close()
                r.pool = None

    def read_pool(
        self, namespace: str, after_lsn: str | None = None
    ) -> tuple[asyncpg.Pool, Replica | None]:
        """A healthy replica that has replayed this namespace's last write here and the
        caller's `after_lsn` (a write's answer, perhaps from another process), round robin;
        else the primary (then the replica is None)."""
        need = max(self._written.get(namespace, 0), lsn_value(after_lsn))
        ready = [
            r for r in self.replicas if r.healthy and r.pool is not None and r.replay_lsn >= need
        ]
        if not ready:
            return self.primary, None
        r = ready[next(self._turn) % len(ready)]
        assert r.pool is not None
        return r.pool, r

    async def read(
        self,
        namespace: str,
        fn: Callable[..., Awaitable[T]],
        *args: Any,
        timeout: float | None = None,
        after_lsn: str | None = None,
    ) -> T:
        """`fn(conn, *args, timeout_s=timeout)` (a named read of db/) on a connection where
        read_pool says, the wait for it within `timeout`, with failover."""
        pool, replica = self.read_pool(namespace, after_lsn)

        async def on(p: asyncpg.Pool) -> T:
            async with session(p, timeout if timeout is not None else 60.0) as conn:
                return await fn(conn, *args, timeout_s=timeout)

        if replica is None:
            return await on(pool)
        return await self.failover(replica, lambda: on(pool), on)

    @staticmethod
    def lost(exc: BaseException) -> bool:
        """Whether an error says the server (not the statement) is gone."""
        return isinstance(exc, CONNECTION_ERRORS)

    async def failover(
        self,
        replica: Replica,
        attempt: Callable[[], Awaitable[T]],
        on_primary: Callable[[asyncpg.Pool], Awaitable[T]],
    ) -> T:
        """The one failover policy: `attempt()` on the replica; when it fails at the connection
        (the replica is gone, not the data), the replica is skipped until a check finds it well
        and `on_primary(primary pool)` answers instead."""
        try:
            return await attempt()
        except CONNECTION_ERRORS as exc:
            self.mark_failed(replica, exc)
            return await on_primary(self.primary)

    async def note_write(self, namespace: str) -> str | None:
        """After a committed write: the primary's WAL position, remembered for the namespace
        (reads of it wait for a replica to reach it), as PostgreSQL prints it; None (and no
        round trip) without replicas."""
        if not self.replicas:
            return None
        row = await _fetchrow(self.primary, PRIMARY_LSN_SQL, (), self.check_timeout_s)
        lsn = str(row[0]) if row is not None else ""
        self._written[namespace] = max(self._written.get(namespace, 0), lsn_value(lsn))
        return lsn

    def mark_failed(self, replica: Replica, exc: BaseException) -> None:
        """A read on the replica failed at the connection: skip it until a check finds it well."""
        if replica.healthy:
            logger.warning(
                "replica %d failed (%s): reads go elsewhere until it is healthy", replica.index, exc
            )
        replica.healthy = False
        replica.error = type(exc).__name__
        m.REPLICA_HEALTHY.labels(str(replica.index)).set(0)

    async def check(self) -> None:
        """Read every replica's state once (and the primary's WAL position to compare)."""
        try:
            row = await _fetchrow(self.primary, PRIMARY_LSN_SQL, (), self.check_timeout_s)
            primary_lsn = lsn_value(row[0] if row is not None else None)
        except Exception as exc:  # the primary is down: replicas keep their last state
            logger.warning("replica check: primary unreachable: %s", exc)
            return
        await asyncio.gather(*(self._check_one(r, primary_lsn) for r in self.replicas))

    async def _check_one(self, r: Replica, primary_lsn: int) -> None:
        try:
            if r.pool is None:
                r.pool = await asyncio.wait_for(self.connect(r.dsn), self.check_timeout_s * 5)
            pool: asyncpg.Pool = r.pool
            row = await _fetchrow(pool, REPLICA_STATE_SQL, (), self.check_timeout_s)
            assert row is not None
            if not row["standby"]:
                raise RuntimeError("not a standby (promoted?): writes would not reach it")
            r.replay_lsn = lsn_value(row["replay"])
            # Caught up means no lag, however long ago the last transaction was.
            r.lag_s = 0.0 if r.replay_lsn >= primary_lsn else float(row["since_replay"] or math.inf)
            r.healthy = r.lag_s <= self.max_lag_s
            r.error = None if r.healthy else f"lag {r.lag_s:.1f} s > {self.max_lag_s:g} s"
        except Exception as exc:
            if r.healthy:
                logger.warning("replica %d unhealthy: %s", r.index, exc)
            # The driver's text names hosts and ports: logged, not shown (/readyz has no auth).
            logger.warning("replica %d: %s: %s", r.index, type(exc).__name__, exc)
            r.healthy, r.lag_s, r.error = False, None, type(exc).__name__
        m.REPLICA_HEALTHY.labels(str(r.index)).set(1 if r.healthy else 0)
        if r.lag_s is not None and not math.isinf(r.lag_s):
            m.REPLICA_LAG.labels(str(r.index)).set(r.lag_s)

    async def _loop(self) -> None:
        while True:
            await self.check()
            await asyncio.sleep(self.check_every_s)

    def status(self) -> list[dict[str, Any]]:
        return [r.to_json() for r in self.replicas]


async def _fetchrow(
    pool: asyncpg.Pool, query: str, args: tuple[Any, ...], timeout: float | None
) -> asyncpg.Record | None:
    async with session(pool, timeout if timeout is not None else 60.0) as conn:
        return await conn.fetchrow(query, *args, timeout=timeout)
