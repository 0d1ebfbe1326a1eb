"""The write path's owner: one `Writer`, built once (retrieval.runtime) beside the `Orchestrator`,
through which every batch is written, whatever its entry: the route (`store`), a queued job and
the sample loader (`write`), an import (`rows`, staged by the importer). It also does the small
writes of one memory (`archive`, `feedback`) and the erasures.

A write reads top-down, a stage a module, each handing the next a typed object:

1. `recipe.plan`: the batch's ids (a new one where an item gives none; the batch's size and
   repeated ids checked, once), one read of what is stored (the rows under those ids, the turns
   its turns follow), what stands of each unchanged memory, each changed one's recipe and every
   text to embed, in order: a `Plan`;
2. `store` only: the cost of that embedding at the rate measured here; above
   RETRIEVAL_INLINE_EMBED_S the batch is stored as a job and answered 202 (retrieval.ingest.jobs),
   which a worker writes later through `write`; within it, after the tenant's share, written now;
3. the analysis (`index.in_threads`: terms, names, attribute) beside `recipe.embed` (an
   `Embedded`: each changed memory's vector and passages);
4. `rows.commit`: the rows, one transaction under the write deadline;
5. the report (`IngestReport`), the metrics and the write's WAL position (read-your-writes).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, tzinfo
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

import asyncpg

from db import erasure, memories
from db.erasure import Erased
from db.session import session
from retrieval import metrics as m
from retrieval.embedding.base import Embedder
from retrieval.embedding.scheduling.documents import DocumentEmbedding, Tick
from retrieval.embedding.scheduling.meter import EmbedMeter
from retrieval.errors import NotFound
from retrieval.ingest import recipe, rows
from retrieval.ingest.index import Indexed, Indexer, in_threads
from retrieval.ingest.items import MemoryItem
from retrieval.ingest.jobs import WriteJobs
from retrieval.ingest.purges import Purges
from retrieval.ingest.recipe import Embedded, Plan, Vectors
from retrieval.replicas import ReadRouter
from retrieval.settings import Settings
from retrieval.tenants import TenantShares
from retrieval.text.nlp import JapaneseNLP
from retrieval.validation import RequestLimits, check_namespace

A = TypeVar("A")
B = TypeVar("B")


@dataclass
class IngestReport:
    """What a write did (the API's answer to it: `to_json`)."""

    namespace: str
    received: int
    inserted: int
    updated: int
    embedded: int
    ids: list[str]
    seconds: float
    # Seconds each part took: lookup (the plan's read), analyse, embed, write.
    stage_s: dict[str, float] = field(default_factory=dict)
    # The primary's WAL position after the write (with replicas; read-your-writes).
    lsn: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "received": self.received,
            "inserted": self.inserted,
            "updated": self.updated,
            "embedded": self.embedded,
            "ids": self.ids,
            "seconds": round(self.seconds, 3),
            "stage_seconds": {k: round(v, 3) for k, v in self.stage_s.items()},
            "lsn": self.lsn,
        }


async def _both(a: Awaitable[A], b: Awaitable[B]) -> tuple[A, B]:
    """Both results; when one fails, the other is cancelled (and waited for) first."""
    ta, tb = asyncio.ensure_future(a), asyncio.ensure_future(b)
    try:
        return await ta, await tb
    finally:
        for t in (ta, tb):
            if not t.done():
                t.cancel()
        await asyncio.gather(ta, tb, return_exceptions=True)


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
    shares: TenantShares | None = None
    # Drops what this process's caches hold of erased memories (the read path's; a namespace
    # and internal ids, None: all of the namespace's).
    forget: Callable[[str, list[int] | None], None] = lambda _ns, _ids: None
    # The queue of larger batches and the purges of namespaces (`of` makes them).
    jobs: WriteJobs | None = None
    purges: Purges | None = None
    # The threads a write's documents are embedded on (closed with the writer).
    documents: DocumentEmbedding = field(default_factory=DocumentEmbedding)
    # The calendar a memory written without created_at is read in (its event's days).
    zone: tzinfo = UTC

    @classmethod
    def of(
        cls,
        settings: Settings,
        pool: asyncpg.Pool,
        nlp: JapaneseNLP,
        embedder: Embedder,
        router: ReadRouter,
        shares: TenantShares | None = None,
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
            shares=shares,
            zone=ZoneInfo(settings.timezone),
        )
        if forget is not None:
            writer.forget = forget
        writer.jobs = WriteJobs(
            pool,
            writer.write,
            write_timeout_s=settings.write_timeout_s,
            max_open=settings.max_open_jobs,
            work=settings.job_worker,
            shares=shares,
        )
        writer.purges = Purges(pool, writer.jobs.owner, settings.write_timeout_s, writer.forget)
        return writer

    def using(self, embedder: Embedder) -> Writer:
        """The same writer with another embedder (the evaluation's cached one), on the same
        threads."""
        return replace(self, embedder=embedder)

    async def close(self) -> None:
        """Stop the purges and the write path's embedding threads."""
        if self.purges is not None:
            await self.purges.close()
        self.documents.close()

    async def store(self, items: list[MemoryItem], namespace: str, tenant: str) -> Stored:
        """Store a validated batch: written now, or queued as a job (module docstring)."""
        t0, clock = time.perf_counter(), m.StageClock()
        planned = await self._plan(items, namespace, clock, max_batch=self.limits.max_batch)
        texts = planned.texts
        estimate = await asyncio.to_thread(self.meter.estimate_s, texts) if texts else 0.0
        if estimate > self.inline_embed_s and self.jobs is not None:
            job = await self.jobs.submit(namespace, items, planned.ids, estimate, tenant=tenant)
            m.INGEST_JOBS.labels("queued").inc()
            return Stored(job=job)
        # A write's embedding is the tenant's processing time too: it waits for its share.
        advance = await self.shares.admit(tenant) if self.shares is not None else 0.0
        try:
            report = await self._written(planned, clock, t0)
        finally:
            if self.shares is not None:
                self.shares.settle(tenant, advance, estimate)
        return Stored(report=report)

    async def write(
        self,
        items: list[MemoryItem],
        namespace: str,
        *,
        ids: list[str] | None = None,
        vectors: Vectors | None = None,
        tick: Tick | None = None,
    ) -> IngestReport:
        """Store items idempotently (by id) in one transaction; nothing is written on any error.
        `ids` fixed already (else assigned), `vectors` given per item (None: embedded), `tick`
        awaited between embedding calls. The write deadline bounds the transaction and the read
        before it, not the embedding."""
        t0, clock = time.perf_counter(), m.StageClock()
        planned = await self._plan(items, namespace, clock, ids=ids, vectors=vectors)
        return await self._written(planned, clock, t0, tick=tick)

    async def _plan(
        self, items: list[MemoryItem], namespace: str, clock: m.StageClock, **given: Any
    ) -> Plan:
        """The write's plan (recipe.plan, its read under the write deadline), timed as lookup."""
        check_namespace(namespace)
        planned = await recipe.plan(
            self.pool, namespace, items, timeout_s=self.timeout_s, zone=self.zone, **given
        )
        clock.lap("lookup")
        return planned

    async def _written(
        self, planned: Plan, clock: m.StageClock, t0: float, *, tick: Tick | None = None
    ) -> IngestReport:
        """The plan analysed and embedded, its rows written, the report."""
        analysed, embedded = await self._prepared(planned, in_threads(self.nlp), clock, tick)
        inserted = await rows.commit(self.pool, planned, analysed, embedded, self.timeout_s)
        clock.lap("write")
        received = len(planned.items)
        m.INGESTED.labels("insert").inc(inserted)
        m.INGESTED.labels("update").inc(received - inserted)
        return IngestReport(
            namespace=planned.namespace,
            received=received,
            inserted=inserted,
            updated=received - inserted,
            embedded=len(planned.need),
            ids=planned.ids,
            seconds=time.perf_counter() - t0,
            stage_s=clock.seconds(),
            # With replicas: the primary's WAL position after the write; this namespace's reads
            # wait for a replica that has replayed it (read-your-writes).
            lsn=await self.router.note_write(planned.namespace),
        )

    async def _prepared(
        self,
        planned: Plan,
        analyse: Indexer,
        clock: m.StageClock | None = None,
        tick: Tick | None = None,
    ) -> tuple[list[Indexed], Embedded]:
        """The plan's analysis and embedding, side by side: the analysis on a thread of the
        default executor, the embedding on the write path's background threads (each timed
        into `clock`: analyse, embed; the embedding's rate into the meter when timed)."""

        async def timed(stage: str, work: Awaitable[A]) -> A:
            t = time.perf_counter()
            try:
                return await work
            finally:
                if clock is not None:
                    clock.add(stage, (time.perf_counter() - t) * 1000.0)

        meter = self.meter if clock is not None else None
        embedding = recipe.embed(
            planned, self.embedder, self.documents, self.batch_size, meter=meter, tick=tick
        )
        got = await _both(
            timed("analyse", analyse(planned.read, planned.want_entities, planned.clocks)),
            timed("embed", embedding),
        )
        if clock is not None:
            clock.mark()  # the two have their own times, above
        return got

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
        planned = await recipe.plan(
            self.pool, namespace, items, ids=ids, vectors=vectors, zone=self.zone
        )
        analysed, embedded = await self._prepared(planned, analyse)
        return rows.make_rows(planned, analysed, embedded), len(planned.need)

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
    ) -> bool:
        """Record feedback on a memory (negative: it leaves every future search; positive: it
        comes back); whether a search may return it now. NotFound when the memory, or the run
        named, is not this namespace's."""
        async with session(self.pool, self.timeout_s, transaction="write") as conn:
            searchable = await memories.record_feedback(
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
        return searchable

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
