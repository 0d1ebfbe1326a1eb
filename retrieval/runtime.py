"""Builds the shared resources once (pool, NLP, embedder, orchestrator) from Settings."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, TypeVar

import asyncpg

from db import migrate as migrations
from db.erasure import FORGET_CHANNEL
from db.extensions import TRIGRAM_READY, check_vector
from db.meta import check_embedding_model
from db.pool import create_pool, wait_for_server
from retrieval.analysis.analyzer import CueDictionary, QueryAnalyzer
from retrieval.embedding.base import Embedder
from retrieval.embedding.providers import create_embedder
from retrieval.ingest.jobs import WriteJobs
from retrieval.ingest.writer import Writer
from retrieval.maintenance.retokenize import outdated
from retrieval.models import Source
from retrieval.orchestrator import Orchestrator
from retrieval.rank.calibration import Calibration
from retrieval.rank.verifier import Verifier
from retrieval.replicas import ReadRouter, Replica
from retrieval.settings import Settings, parse_replica_urls
from retrieval.tenants import TenantShares
from retrieval.text.nlp import JapaneseNLP
from retrieval.validation import RequestLimits

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass
class Runtime:
    settings: Settings
    dsn: str
    pool: asyncpg.Pool
    nlp: JapaneseNLP
    analyzer: QueryAnalyzer
    embedder: Embedder
    # The read path's owner and the write path's.
    orchestrator: Orchestrator
    writer: Writer
    router: ReadRouter
    # Each namespace's share of the processing time of retrievals (admit before, settle after).
    shares: TenantShares
    # What this server lacks, by the name to report it under (pg_trgm), with what it costs.
    missing: dict[str, str] = field(default_factory=dict)
    # The connection that hears of erasures in the other processes (NOTIFY retrieval_forget).
    listener: asyncpg.Connection | None = None

    @property
    def jobs(self) -> WriteJobs:
        """The queue of write jobs (the writer's)."""
        assert self.writer.jobs is not None
        return self.writer.jobs

    async def close(self) -> None:
        await self.writer.close()
        if self.listener is not None:
            with suppress(Exception):  # the server is away: the connection is gone anyway
                await asyncio.wait_for(self.listener.close(), 5.0)
        await self.orchestrator.close()
        await self.router.close()
        await self.pool.close()


async def migrate_database(dsn: str, embedding_dim: int, timezone: str = "Asia/Tokyo") -> list[int]:
    """Check that pgvector computes distances on this server (updating an older version in
    place), then apply pending migrations on a dedicated connection."""
    await check_vector(dsn)
    conn = await asyncpg.connect(dsn)
    try:
        return await migrations.migrate(conn, embedding_dim=embedding_dim, timezone=timezone)
    finally:
        await conn.close()


async def wait_for_migrations(dsn: str, every_s: float = 2.0, say_every_s: float = 30.0) -> None:
    """Until no migration is pending (RETRIEVAL_MIGRATE_AT_START=false: another process, the
    migration Job, applies them): the service serves /healthz meanwhile and is not ready."""
    said = -say_every_s
    while True:
        conn = await asyncpg.connect(dsn)
        try:
            left = await migrations.pending(conn)
        finally:
            await conn.close()
        if not left:
            return
        if time.monotonic() - said >= say_every_s:
            logger.warning(
                "%d migration(s) pending (%s): waiting for `retrieval migrate` (the migration "
                "Job) to apply them",
                len(left),
                ", ".join(map(str, left)),
            )
            said = time.monotonic()
        await asyncio.sleep(every_s)


async def _check_store(pool: asyncpg.Pool, embedder: Embedder) -> dict[str, str]:
    """Refuse a store of another embedding model; warn of terms made by another tokenizer;
    name what this server lacks (pg_trgm)."""
    async with pool.acquire() as conn:
        await check_embedding_model(conn, embedder.name, embedder.dim)
        trgm = await conn.fetchrow(TRIGRAM_READY)
    stale = await outdated(pool)
    if stale is not None:
        logger.warning("%s", stale)
    if trgm["indexed"]:
        return {}
    why = "is not installed" if not trgm["extension"] else "has no index on memories.content"
    msg = f"pg_trgm {why} on this server: the trigram (names) search leg is off"
    logger.warning("%s; names are still matched by the keyword and vector legs", msg)
    return {"pg_trgm": msg}


async def _or_load(have: T | None, make: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`have`, else made on a thread."""
    return have if have is not None else await asyncio.to_thread(make, *args, **kwargs)


async def _reader(settings: Settings) -> Verifier | None:
    """The reader (retrieval.rank.verifier), when the confidence reads with it."""
    if not (settings.confidence and settings.verifier):
        return None
    return await asyncio.to_thread(Verifier)


async def open_runtime(
    settings: Settings, *, embedder: Embedder | None = None, nlp: JapaneseNLP | None = None
) -> Runtime:
    """Start (or reach) PostgreSQL, migrate, load models, and refuse a foreign embedding model."""
    dsn = await asyncio.to_thread(settings.dsn)
    await wait_for_server(dsn, within_s=settings.db_wait_s, log=logger.warning)
    if settings.migrate_at_start:
        await migrate_database(dsn, settings.embedding_dim, settings.timezone)
    else:
        await wait_for_migrations(dsn)
    # The two models load side by side (spaCy's ~1.7 s covers the embedder's graph).
    models = await asyncio.gather(
        _or_load(nlp, JapaneseNLP, settings.spacy_model, ner=settings.ner == "spacy"),
        _or_load(embedder, create_embedder, settings),
    )
    nlp = models[0]
    embedder = models[1]
    pool = await _connect(settings, dsn)
    try:
        missing = await _check_store(pool, embedder)
    except BaseException:
        await pool.close()
        raise
    analyzer = QueryAnalyzer(
        nlp,
        timezone=settings.timezone,
        recent_days=settings.recent_days,
        dictionary=CueDictionary.load(settings.dictionary_path),
    )
    router = await _router(settings, pool)
    orch = Orchestrator(
        pool,
        analyzer,
        embedder,
        timezone=settings.timezone,
        source_timeout_ms=settings.source_timeout_ms,
        request_timeout_ms=settings.request_timeout_ms,
        limits=RequestLimits.of(settings),
        log_runs=settings.log_runs,
        embed_cache_bytes=settings.embed_cache_bytes,
        content_cache_bytes=settings.content_cache_bytes,
        max_request_connections=settings.max_request_connections,
        router=router,
        unavailable={Source.TRIGRAM: missing["pg_trgm"]} if "pg_trgm" in missing else {},
        verifier=await _reader(settings),
        calibration=Calibration.load() if settings.confidence else None,
        verifier_results=settings.verifier_results,
    )
    shares = TenantShares(
        settings.tenant_cpu_share,
        max_wait_s=settings.tenant_max_wait_s,
        max_in_flight=settings.tenant_max_in_flight,
    )
    writer = Writer.of(settings, pool, nlp, embedder, router, shares, forget=orch.forget)
    listener = await _forget_listener(dsn, orch)
    return Runtime(
        settings,
        dsn,
        pool,
        nlp,
        analyzer,
        embedder,
        orch,
        writer,
        router,
        shares,
        missing,
        listener,
    )


async def _forget_listener(dsn: str, orch: Orchestrator) -> asyncpg.Connection:
    """A connection that listens for erasures (db.erasure.FORGET_CHANNEL, sent by whichever
    process erased) and drops what this process's caches hold of them."""

    def heard(_conn: object, _pid: int, _channel: str, payload: str) -> None:
        try:
            what = json.loads(payload)
            orch.forget(str(what["namespace"]), None if what.get("all") else list(what["ids"]))
        except (ValueError, KeyError, TypeError):
            logger.warning("an erasure notice that could not be read: %.100s", payload)

    conn = await asyncpg.connect(dsn)
    await conn.add_listener(FORGET_CHANNEL, heard)
    return conn


async def _connect(settings: Settings, target: str, min_size: int | None = None) -> asyncpg.Pool:
    """A pool to `target` with the service's session settings."""
    return await create_pool(
        target,
        min_size=settings.pool_min if min_size is None else min_size,
        max_size=settings.pool_max,
        ef_search=settings.hnsw_ef_search,
        statement_timeout_ms=settings.statement_timeout_ms,
        idle_in_transaction_timeout_ms=settings.idle_in_transaction_timeout_ms,
    )


async def _router(settings: Settings, pool: asyncpg.Pool) -> ReadRouter:
    """The read router over the configured replicas; they are checked from the start, and one
    that is down now is retried by every check and used once healthy."""
    router = ReadRouter(
        pool,
        [Replica(i, d) for i, d in enumerate(parse_replica_urls(settings.replica_urls))],
        lambda d: _connect(settings, d, min_size=1),
        max_lag_s=settings.replica_max_lag_s,
        check_every_s=settings.replica_check_s,
    )
    if router.replicas:
        await router.check()
        router.start()
    return router
