"""The write path's owner: one `Writer`, built once (retrieval.runtime) beside the `Orchestrator`,
through which every batch is written, whatever its entry: the route (`store`), a queued job and
the sample loader (`write`), an import (`rows`, staged by the importer). It also does the small
writes of one memory (`archive`, `feedback`).

`store(items, namespace, tenant)`:

1. the batch's bounds and its ids (a new one where an item gives none);
2. what is stored under those ids (an unchanged text keeps its vector and terms);
3. the cost of its embedding, estimated by the recipe at the rate measured here;
4. within RETRIEVAL_INLINE_EMBED_S, written now (`write`: analysis, embedding, rows, one
   transaction, metrics, the write's WAL position for read-your-writes), after the tenant's
   share; above it, stored as a job and answered 202 (retrieval.ingest.jobs), which a worker
   writes later through `write` too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import asyncpg

from db import erasure, memories
from db.erasure import Erased
from db.session import session
from retrieval import metrics as m
from retrieval.embedding.base import Embedder
from retrieval.embedding.meter import EmbedMeter
from retrieval.errors import NotFound
from retrieval.ingest.index import Indexer, in_threads
from retrieval.ingest.items import MemoryItem
from retrieval.ingest.jobs import WriteJobs
from retrieval.ingest.purges import Purges
from retrieval.ingest.write import (
    IngestReport,
    Lookup,
    Vectors,
    assign_ids,
    embedding_load,
    look_up,
    prepare_rows,
    write_rows,
)
from retrieval.replicas import ReadRouter
from retrieval.settings import Settings
from retrieval.tenants import TenantBudget
from retrieval.text.nlp import JapaneseNLP
from retrieval.validation import RequestLimits, check_batch, check_namespace


@dataclass(frozen=True)
class Stored:
    """What `store` did: written now (`report`), or queued as a job (`job`)."""

    report: IngestReport | None = None
    job: dict[str, Any] | None = None


@dataclass
class Writer:
    """Writes memories; see the module's docstring."""

    pool: asyncpg.Pool
    nlp: JapaneseNLP
    embedder: Embedder
    meter: EmbedMeter
    router: ReadRouter
    limits: RequestLimits
    batch_size: int
    timeout_s: float
    inline_embed_s: float
    # The tenants' shares: an inline write's embedding waits for its tenant's share.
    budget: TenantBudget | None = None
    # Drops what this process's caches hold of erased memories (the read path's; a namespace
    # and internal ids, None: all of the namespace's).
    forget: Callable[[str, list[int] | None], None] = lambda _ns, _ids: None
    # The queue of larger batches and the purges of namespaces (`of` makes them).
    jobs: WriteJobs | None = None
    purges: Purges | None = None

    @classmethod
    def of(
        cls,
        settings: Settings,
        pool: asyncpg.Pool,
        nlp: JapaneseNLP,
        embedder: Embedder,
        router: ReadRouter,
        budget: TenantBudget | None = None,
        forget: Callable[[str, list[int] | None], None] | None = None,
    ) -> Writer:
        """The writer the settings describe, with its queue of write jobs (whose worker
        writes through it) and its purges; `forget` drops erased memories from the read
        path's caches."""
        writer = cls(
            pool,
            nlp,
            embedder,
            EmbedMeter(embedder),
            router,
            RequestLimits.of(settings),
            batch_size=settings.embed_batch_size,
            timeout_s=settings.write_timeout_s,
            inline_embed_s=settings.inline_embed_s,
            budget=budget,
        )
        if forget is not None:
            writer.forget = forget
        writer.jobs = WriteJobs(
            pool,
            writer.write,
            write_timeout_s=settings.write_timeout_s,
            max_open=settings.max_open_jobs,
            work=settings.job_worker,
            budget=budget,
        )
        writer.purges = Purges(pool, writer.jobs.owner, settings.write_timeout_s, writer.forget)
        return writer

    def using(self, embedder: Embedder) -> Writer:
        """The same writer with another embedder (the evaluation's cached one)."""
        return replace(self, embedder=embedder)

    async def store(self, items: list[MemoryItem], namespace: str, tenant: str) -> Stored:
        """Store a validated batch: written now, or queued as a job (module docstring)."""
        check_batch([it.id for it in items], self.limits)
        ids = assign_ids(items)
        found = await look_up(self.pool, namespace, items, ids, timeout_s=self.timeout_s)
        texts = embedding_load(items, found.need)
        estimate = await asyncio.to_thread(self.meter.estimate_s, texts) if texts else 0.0
        if estimate > self.inline_embed_s and self.jobs is not None:
            job = await self.jobs.submit(namespace, items, ids, estimate, tenant=tenant)
            m.INGEST_JOBS.labels("queued").inc()
            return Stored(job=job)
        # A write's embedding is the tenant's processing time too: it waits for its share.
        advance = await self.budget.admit(tenant) if self.budget is not None else 0.0
        try:
            report = await self.write(items, namespace, ids=ids, lookup=found)
        finally:
            if self.budget is not None:
                self.budget.settle(tenant, advance, estimate)
        return Stored(report=report)

    async def write(
        self,
        items: list[MemoryItem],
        namespace: str,
        *,
        ids: list[str] | None = None,
        vectors: Vectors | None = None,
        lookup: Lookup | None = None,
        tick: Callable[[], Awaitable[None]] | None = None,
    ) -> IngestReport:
        """Store items idempotently (by id) in one transaction; nothing is written on any error.
        `ids` fixed already (else assigned), `vectors` given per item (None: embedded),
        `lookup` what look_up gave, `tick` awaited between embedding calls. The write deadline
        bounds the transaction and each read before it, not the embedding."""
        t0 = time.perf_counter()
        check_namespace(namespace)
        ids = ids if ids is not None else assign_ids(items)
        clock = m.StageClock()
        rows, embedded = await prepare_rows(
            self.pool,
            self.embedder,
            in_threads(self.nlp),
            items,
            ids,
            namespace=namespace,
            vectors=vectors,
            batch_size=self.batch_size,
            lookup=lookup,
            meter=self.meter,
            tick=tick,
            clock=clock,
            timeout_s=self.timeout_s,
        )
        inserted = await write_rows(self.pool, namespace, rows, self.timeout_s)
        clock.lap("write")
        m.INGESTED.labels("insert").inc(inserted)
        m.INGESTED.labels("update").inc(len(items) - inserted)
        return IngestReport(
            namespace=namespace,
            received=len(items),
            inserted=inserted,
            updated=len(items) - inserted,
            reembedded=embedded,
            ids=ids,
            seconds=time.perf_counter() - t0,
            stage_s=clock.seconds(),
            # With replicas: the primary's WAL position after the write; this namespace's reads
            # wait for a replica that has replayed it (read-your-writes).
            lsn=await self.router.note_write(namespace),
        )

    async def rows(
        self,
        items: list[MemoryItem],
        ids: list[str],
        namespace: str,
        *,
        vectors: Vectors | None,
        analyse: Indexer,
    ) -> tuple[list[memories.MemoryRow], int]:
        """The rows of a chunk of an import (staged, then published by the importer), and how
        many were embedded; `analyse` runs the analysis (in the import's processes)."""
        return await prepare_rows(
            self.pool,
            self.embedder,
            analyse,
            items,
            ids,
            namespace=namespace,
            vectors=vectors,
            batch_size=self.batch_size,
        )

    async def archive(self, namespace: str, memory_id: str) -> None:
        """Archive a memory: kept, never returned by a search again; NotFound when absent."""
        async with session(self.pool, self.timeout_s) as conn:
            got = await memories.archive(conn, namespace, memory_id, timeout_s=self.timeout_s)
        if not got:
            raise NotFound(f"no memory {memory_id!r} in namespace {namespace!r}")
        await self.router.note_write(namespace)

    async def feedback(
        self,
        namespace: str,
        memory_id: str,
        *,
        negative: bool,
        run_id: str | None,
        comment: str | None,
    ) -> None:
        """Record feedback on a memory (negative: it leaves every future search); NotFound
        when the memory, or the run named, is not this namespace's."""
        async with session(self.pool, self.timeout_s, transaction="write") as conn:
            await memories.record_feedback(
                conn,
                namespace,
                memory_id,
                negative=negative,
                run_id=run_id,
                comment=comment,
                timeout_s=self.timeout_s,
            )
        await self.router.note_write(namespace)
        m.FEEDBACK.labels("negative" if negative else "positive").inc()

    async def erase(self, namespace: str, memory_ids: list[str], *, how: str = "erase") -> Erased:
        """Erase these memories for real, in one transaction (db.erasure: the row and all that
        is derived from it, the links to it, its feedback, the run-log entries that returned or
        quote it); this process's caches now, the others' by NOTIFY. Ids not stored are left
        out of what it returns. `how`: the metric's label (erase, expired)."""
        async with session(self.pool, self.timeout_s, transaction="write") as conn:
            gone = await erasure.erase(conn, namespace, memory_ids, timeout_s=self.timeout_s)
        self.forget(namespace, gone.ids)
        await self.router.note_write(namespace)
        m.ERASED.labels(how).inc(len(gone.ids))
        return gone

    async def erase_expired(self, batch: int = 500) -> int:
        """Erase the memories past their `expires_at` (the retention's hourly pass), a batch
        of a namespace at a time, as `erase` does; how many."""
        total = 0
        while True:
            async with session(self.pool, self.timeout_s) as conn:
                due = await conn.fetch(erasure.EXPIRED, batch, timeout=self.timeout_s)
            if not due:
                return total
            by_ns: dict[str, list[str]] = {}
            for r in due:
                by_ns.setdefault(r["namespace"], []).append(r["external_id"])
            for ns, ids in by_ns.items():
                total += len((await self.erase(ns, ids, how="expired")).ids)
            if len(due) < batch:
                return total
