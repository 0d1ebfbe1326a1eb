"""One asyncpg pool with pgvector's codec and the session settings searches rely on."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import asyncpg
from pgvector.asyncpg import register_vector


async def _init(conn: asyncpg.Connection) -> None:
    await register_vector(conn)
    # Binary (a version byte, then the text), which COPY needs (db.bulk stages with COPY).
    await conn.set_type_codec(
        "jsonb",
        encoder=lambda v: b"\x01" + json.dumps(v, ensure_ascii=False).encode(),
        decoder=lambda b: json.loads(b[1:]),
        schema="pg_catalog",
        format="binary",
    )


class PooledConnection(asyncpg.Connection):
    """A pooled connection that knows when the session it served left nothing behind.

    The pool resets a connection given back to it (asyncpg's default: advisory locks,
    cursors, LISTEN and session settings, one more round trip to the server). A read-only
    transaction that ended in ROLLBACK leaves none of those: its SETs, cursors and LISTENs end
    with it, and no read session takes a session advisory lock. db.session says so with
    left_clean(), and the release skips the reset: a request's legs each saved a round trip
    (10k bench: 28 a request before)."""

    # Set by db.session after a read-only transaction ended in ROLLBACK; read once, at release.
    _clean = False

    def left_clean(self) -> None:
        """The session ended with no state of its own left on the connection."""
        self._clean = True

    def take_clean(self) -> bool:
        """Whether the last session said it left nothing, forgetting it."""
        clean, self._clean = self._clean, False
        return clean


async def _reset(conn: PooledConnection) -> None:
    """What the pool runs on a connection given back, after asyncpg's own step (which rolls
    back a transaction left open): the default reset query, unless the session left nothing."""
    if not conn.take_clean():
        await conn.execute(conn.get_reset_query())


# New connections one pool opens at a time. Past it, a caller waits for an attempt to end.
CONNECTING_AT_ONCE = 2


class Connector:
    """Opens a pool's new connections, at most `limit` attempts at a time.

    A server that does not answer (stopped, a frozen VM, a partition) still has its kernel take
    each connection attempt into its listen queue. Without a limit, every leg and probe that
    gave up on the pool during an outage left one attempt there: 77-95 after a 6 s stop under
    the fault test's load. The resumed server then started a backend for each before it
    reached the first live one, and a new connection took 87-127 ms instead of a few.
    Here an attempt runs to its own end (the pool's connect timeout) even when its caller gives
    up, so it keeps its place; a connection it opens for nobody is closed at once."""

    def __init__(self, limit: int = CONNECTING_AT_ONCE) -> None:
        if limit < 1:
            raise ValueError("at least one connection attempt at a time")
        self._slots = asyncio.Semaphore(limit)

    async def __call__(self, *args: Any, **kwargs: Any) -> asyncpg.Connection:
        await self._slots.acquire()
        attempt = asyncio.ensure_future(asyncpg.connect(*args, **kwargs))
        attempt.add_done_callback(lambda _: self._slots.release())
        try:
            return await asyncio.shield(attempt)
        except asyncio.CancelledError:
            attempt.add_done_callback(_unclaimed)
            raise


def _unclaimed(attempt: asyncio.Future[asyncpg.Connection]) -> None:
    """An attempt whose caller gave up: its connection, if it opened one, is closed."""
    if not attempt.cancelled() and attempt.exception() is None:
        attempt.result().terminate()


async def create_pool(
    dsn: str,
    *,
    min_size: int = 2,
    max_size: int = 10,
    ef_search: int = 200,
    statement_timeout_ms: int = 30_000,
    idle_in_transaction_timeout_ms: int = 10_000,
    connect_timeout_s: float = 5.0,
    connecting_at_once: int = CONNECTING_AT_ONCE,
) -> asyncpg.Pool:
    """Create the pool; the vector extension must exist (run migrations first).

    The server stops any statement after `statement_timeout_ms` and ends a session left idle
    inside a transaction after `idle_in_transaction_timeout_ms` (0 = never), so work whose
    caller has given up does not run on. Search legs set a tighter timeout of their own.
    Opening a connection (after a restart, every pooled one is new) takes at most
    `connect_timeout_s`, and a statement without a timeout of its own at most 60 s; at most
    `connecting_at_once` connections are being opened at a time (Connector)."""
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
            "statement_timeout": str(int(statement_timeout_ms)),
            "idle_in_transaction_session_timeout": str(int(idle_in_transaction_timeout_ms)),
            # A connection given up on is terminated (db.session), not cancelled: the server
            # notices the closed socket at its next read, so a running statement checks for it
            # every second instead of running on to its own timeout.
            "client_connection_check_interval": "1000",
        },
        min_size=min_size,
        max_size=max_size,
        init=_init,
        reset=_reset,
        connection_class=PooledConnection,
        connect=Connector(connecting_at_once),
        command_timeout=60,
        timeout=connect_timeout_s,
    )
    assert pool is not None
    return pool


# What a server that is not there yet (or is starting) answers a connection with.
_NOT_YET = (
    OSError,
    TimeoutError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
)


async def wait_for_server(
    dsn: str, *, within_s: float, log: Callable[[str], None] | None = None
) -> None:
    """Return once the server at dsn accepts a connection, trying again with a growing pause
    (0.5 s doubling to 5 s) for at most `within_s`; a database started beside the service (a
    compose file, a pod) may come up after it, and a healthcheck does not run everywhere.
    Raises the last connection error when the time is up."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    pause = 0.5
    while True:
        try:
            conn = await asyncpg.connect(dsn, timeout=min(5.0, max(within_s, 0.1)))
        except _NOT_YET as exc:
            left = deadline - loop.time()
            if left <= 0:
                raise
            if log is not None:
                log(
                    f"the database is not reachable yet ({type(exc).__name__}); again in {pause:g} s"
                )
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, 5.0)
            continue
        await conn.close()
        return
