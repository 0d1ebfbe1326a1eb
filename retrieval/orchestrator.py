"""The read path, one request: check -> analyse (the query embedded meanwhile) -> plan -> search
(retrieval.search.executor) -> rerank (retrieval.rank) -> neighbours -> budget -> respond, log and
measure."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import asyncpg

from db.run_log import insert_run
from retrieval import metrics as m
from retrieval.analysis.analyzer import QueryAnalyzer
from retrieval.analysis.strategy import PRESETS, Plan, plan, with_sources
from retrieval.cache import forget_memories
from retrieval.embedding.base import Embedder
from retrieval.embedding.scheduling.query import QueryEmbedding, QueryEmbeddings
from retrieval.models import (
    DEGRADING,
    Answered,
    Clock,
    Filters,
    Neighbour,
    Preset,
    QueryIntent,
    Result,
    RetrievalMetadata,
    RetrievalOptions,
    RetrievalResponse,
    ScoredResult,
    Source,
    SourceReport,
    TimeRange,
    result_of,
)
from retrieval.rank.budget import fit
from retrieval.rank.calibration import Calibration
from retrieval.rank.confidence import READ_RESULTS, signals_of
from retrieval.rank.expansion import choose_seeds
from retrieval.rank.final import Final, finish
from retrieval.rank.rerank import rerank
from retrieval.rank.verifier import Verifier
from retrieval.replicas import ReadRouter
from retrieval.search.contents import DEFAULT_CACHE_BYTES, Contents
from retrieval.search.executor import (
    LegRunner,
    Searched,
    require_a_whole_answer,
    require_an_answer,
)
from retrieval.search.legs import SOURCES, SourceFn
from retrieval.search.run import SearchRun
from retrieval.validation import RequestLimits, check_request

logger = logging.getLogger(__name__)


def _plan_json(p: Plan, window: TimeRange | None, window_is_filter: bool) -> dict[str, Any]:
    """The plan as the response's `params` and the run log record it."""
    out: dict[str, Any] = {**p.preset.to_json(), "limit": p.limit, "reasons": list(p.reasons)}
    if window is not None:
        out["window"] = window.to_json()
        out["window_is_filter"] = window_is_filter
    return out


class Orchestrator:
    """retrieve(query, options) -> RetrievalResponse. Create once; safe for concurrent calls."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        analyzer: QueryAnalyzer,
        embedder: Embedder,
        *,
        timezone: str = "Asia/Tokyo",
        source_timeout_ms: int = 800,
        request_timeout_ms: int | None = None,
        limits: RequestLimits | None = None,
        log_runs: bool = True,
        sources: Mapping[Source, SourceFn] = SOURCES,
        presets: Mapping[Any, Preset] = PRESETS,
        embed_cache_bytes: int = 32 * 1024 * 1024,
        content_cache_bytes: int = DEFAULT_CACHE_BYTES,
        max_request_connections: int = 4,
        run_log_max_pending: int = 64,
        run_log_timeout_s: float = 5.0,
        router: ReadRouter | None = None,
        unavailable: Mapping[Source, str] | None = None,
        verifier: Verifier | None = None,
        calibration: Calibration | None = None,
        verifier_results: int = READ_RESULTS,
    ) -> None:
        self.pool = pool
        self.router = router
        self.analyzer = analyzer
        self.embedder = embedder
        self.tz = ZoneInfo(timezone)
        self.source_timeout_ms = source_timeout_ms
        # The whole request's database work (both waves and the neighbours) ends by then: three
        # legs' deadlines unless told.
        self.request_timeout_s = (request_timeout_ms or 3 * source_timeout_ms) / 1000.0
        self.limits = limits or RequestLimits()
        self.max_request_connections = max_request_connections
        self.log_runs = log_runs
        self.sources = sources
        self.presets = presets
        self.legs = LegRunner(sources, source_timeout_ms / 1000.0, router, dict(unavailable or {}))
        self._background: set[asyncio.Task[None]] = set()
        self.run_log_max_pending = run_log_max_pending
        self.run_log_timeout_s = run_log_timeout_s
        # A context assembler asks the same question more than once; embedding is the costliest
        # stage (~10-25 ms), so repeated texts are embedded once, per namespace; each tenant's
        # embedding work is bounded (retrieval.embedding.scheduling.query).
        self.embeddings = QueryEmbeddings(embedder, cache_bytes=embed_cache_bytes)
        # The long contents the legs return by reference (retrieval.search.contents).
        self.contents = Contents(content_cache_bytes)
        # Each result's confidence that it answers (retrieval.rank.confidence); without a
        # calibration results carry none and their labels follow their scores alone.
        self.verifier = verifier
        self.verifier_results = verifier_results
        self.calibration = calibration

    def validate(self, query: str, options: RetrievalOptions) -> str:
        """Reject what cannot be answered (retrieval.validation.check_request); return the
        query stripped."""
        return check_request(query, options, self.limits, self.tz).query

    async def retrieve(
        self, query: str, options: RetrievalOptions | None = None
    ) -> RetrievalResponse:
        """Answer one query; a failing or slow leg degrades the answer, never fails it."""
        options = options or RetrievalOptions()
        t0 = time.perf_counter()
        deadline = asyncio.get_running_loop().time() + self.request_timeout_s
        checked = check_request(query, options, self.limits, self.tz)
        q, zone, options = checked.query, checked.zone, checked.options
        now = options.now or datetime.now(zone)
        clock = m.StageClock()
        # The embedding (the costliest stage) overlaps the analysis and the legs that need no
        # vector: those start as soon as the analysis has chosen the plan.
        embedding = self.embeddings.start(
            options.namespace,
            options.tenant or options.namespace,
            q,
            options.recent_conversation,
            time.monotonic() + self.source_timeout_ms / 1000.0,
        )
        try:
            intent = await asyncio.to_thread(
                clock.timed, "analyze", self.analyzer.analyze, q, now, zone
            )
        except BaseException:
            embedding.abandon()
            raise
        p = self._plan(intent, options)
        window = options.time_range or p.time_range
        run = replace(self._search_run(intent, options, p, window, now), deadline=deadline)
        searched = await self._search(run, p, embedding, options, clock)
        require_an_answer(p.preset, searched.reports)
        # Off the event loop: the n-gram signal over long uncached memories is CPU work.
        scored, before = await asyncio.to_thread(
            clock.timed, "rerank", rerank, searched.per_source, p.preset, intent, options,
            now=now, window=window,
        )  # fmt: skip
        require_a_whole_answer(p.preset, searched.reports, len(scored))
        results, answered = await self._results(
            intent, scored, run, options, clock, searched, p.preset
        )
        budget = None
        if options.max_chars is not None:
            results, budget = fit(results, options.max_chars)
        meta = RetrievalMetadata(
            strategy_used=p.strategy,
            query_intent=intent,
            total_latency_ms=(time.perf_counter() - t0) * 1000.0,
            search_breakdown=searched.reports,
            stage_latency_ms=clock.stage_ms,
            num_results_before_rerank=before,
            num_results_after_rerank=len(results),
            # Without a source this server lacks, the answer is degraded too, and says so.
            degraded=[s for s, r in searched.reports.items() if r.status in DEGRADING],
            run_id=str(uuid.uuid4()),
            params=_plan_json(p, window, options.time_range is not None),
            cost_s=clock.cpu_s + embedding.spent_s(),
            budget=budget,
            answered=answered,
        )
        m.record_retrieval(meta)
        if self.log_runs and options.log_run:
            self._log_run(q, options, meta, searched, results)
        return RetrievalResponse(results=results, metadata=meta)

    async def _results(
        self,
        intent: QueryIntent,
        scored: list[ScoredResult],
        run: SearchRun,
        options: RetrievalOptions,
        clock: m.StageClock,
        searched: Searched,
        preset: Preset,
    ) -> tuple[list[Result], Answered | None]:
        """The answer's results, each with its confidence, label and neighbours, and whether
        anything answers: the final stage (CPU, off the event loop) and the neighbours (the
        database) at once, since neither changes which results there are."""
        context: asyncio.Task[dict[int, list[Neighbour]]] | None = None
        if options.context_window > 0 and scored:
            context = asyncio.create_task(
                self._neighbours(run, scored, options.context_window, clock, searched)
            )
        ordered = not (options.diversify_by and options.per_bucket > 0)
        try:
            final = await self._final(intent, scored, run, clock, preset, ordered)
        except BaseException:
            if context is not None:
                context.cancel()
            raise
        results = [result_of(r, details=options.include_metadata_details) for r in final.results]
        if context is not None:
            got = await context
            for r, out in zip(final.results, results, strict=True):
                out.context = got.get(r.candidate.id, [])
        return results, final.answered

    def _finish(
        self,
        intent: QueryIntent,
        scored: list[ScoredResult],
        run: SearchRun,
        preset: Preset,
        ordered: bool,
    ) -> Final:
        """The final stage (retrieval.rank.final): the signals read (with a calibration), then
        the confidence, order, score and label, and whether anything answers."""
        sigs = None
        if self.calibration is not None and scored:
            sigs = signals_of(
                intent,
                scored,
                self.analyzer.nlp.terms,
                run.terms.idf,
                run.terms.unseen(),
                self.verifier,
                self.verifier_results,
            )
        return finish(scored, sigs, self.calibration, high_score=preset.high_score, ordered=ordered)

    async def _search(
        self,
        run: SearchRun,
        p: Plan,
        embedding: QueryEmbedding,
        options: RetrievalOptions,
        clock: m.StageClock,
    ) -> Searched:
        """The plan's legs, then the hops (when asked for); the embedding's time is a stage
        only when a vector leg used it."""
        expanders = (
            tuple(x for x in p.preset.expansion if x in self.sources) if options.expand else ()
        )
        t_search = time.perf_counter()
        searched = await self.legs.search(
            run,
            p.preset,
            embedding.vectors,
            expanders,
            options.seed_ids,
            choose_seeds,
            clock.stage_ms,
        )
        clock.stage_ms["search"] = (time.perf_counter() - t_search) * 1000.0
        if embedding.used():
            clock.stage_ms["embed"] = embedding.ms
        else:
            embedding.abandon()  # a text not started yet is not embedded for nobody
        return searched

    async def _final(
        self,
        intent: QueryIntent,
        scored: list[ScoredResult],
        run: SearchRun,
        clock: m.StageClock,
        preset: Preset,
        ordered: bool,
    ) -> Final:
        """The final stage, timed as `confidence` (the reading is its cost)."""
        return await asyncio.to_thread(
            clock.timed, "confidence", self._finish, intent, scored, run, preset, ordered
        )

    async def _neighbours(
        self,
        run: SearchRun,
        scored: list[ScoredResult],
        per_side: int,
        clock: m.StageClock,
        searched: Searched,
    ) -> dict[int, list[Neighbour]]:
        """The memories around each result (its `context`), by row id; a failure gives none
        and is reported."""
        t = time.perf_counter()
        got = await self.legs.neighbours(run, [r.candidate.id for r in scored], per_side)
        clock.stage_ms["context"] = (time.perf_counter() - t) * 1000.0
        if isinstance(got, SourceReport):
            searched.reports[got.source] = got
            return {}
        return got

    def _plan(self, intent: QueryIntent, options: RetrievalOptions) -> Plan:
        """The strategy's plan for this intent, with the sources the caller added."""
        p = plan(intent, limit=options.limit, force=options.force_strategy, presets=self.presets)
        if not options.add_sources:
            return p
        added = ", ".join(s.value for s in options.add_sources)
        return replace(
            p,
            preset=with_sources(p.preset, options.add_sources),
            reasons=(*p.reasons, "added: " + added),
        )

    def _search_run(
        self,
        intent: QueryIntent,
        options: RetrievalOptions,
        p: Plan,
        window: TimeRange | None,
        now: datetime,
    ) -> SearchRun:
        """What every leg reads: pool, filters, window, candidates wanted, deadline."""
        # A range by the written clock filters in SQL; by the others, once each candidate's
        # event is read (rank.window.passes_range).
        hard = options.time_range if options.time_clock is Clock.WRITTEN else None
        # Reads go to a replica that has this namespace's last write, else to the primary.
        pool, replica = (
            self.router.read_pool(options.namespace, options.after_lsn)
            if self.router
            else (self.pool, None)
        )
        return SearchRun(
            pool=pool,
            replica=replica,
            intent=intent,
            filters=Filters(
                namespace=options.namespace,
                memory_types=options.memory_types,
                source_types=options.source_types,
                start=hard.start if hard else None,
                end=hard.end if hard else None,
                # A fixed now bounds what is returned; the clock's own now does not (a memory
                # stamped a little ahead by a writer's clock is not hidden until then).
                until=options.now,
            ),
            k=max(p.preset.candidates_per_source, options.limit),
            window=window,
            timeout_s=self.source_timeout_ms / 1000.0,
            now=now,
            slots=asyncio.Semaphore(self.max_request_connections),
            contents=self.contents,
        )

    def _log_run(
        self,
        q: str,
        options: RetrievalOptions,
        meta: RetrievalMetadata,
        searched: Searched,
        results: list[Result],
    ) -> None:
        """Write the run record in the background (bounded; see _spawn)."""
        found = searched.per_source.values()
        self._spawn(
            insert_run(
                self.pool,
                run_id=meta.run_id,
                namespace=options.namespace,
                request_id=options.request_id,
                query=q,
                strategy=meta.strategy_used.value,
                plan={
                    **meta.params,
                    "intent": meta.query_intent.to_json(),
                    "expansion": searched.expansion,
                },
                candidate_ids=sorted({c.external_id for cs in found for c in cs}),
                selected_ids=[r.id for r in results],
                latencies={
                    "total_ms": meta.total_latency_ms,
                    **{f"{k}_ms": v for k, v in meta.stage_latency_ms.items()},
                    **{f"source_{k}_ms": r.latency_ms for k, r in meta.search_breakdown.items()},
                },
                degraded=meta.degraded,
            )
        )

    def _spawn(self, coro: Any) -> None:
        """Write a run in the background; when the database is slow and writes pile up past
        `run_log_max_pending`, drop this one and count it rather than hold memory for ever."""
        if len(self._background) >= self.run_log_max_pending:
            coro.close()
            m.RUN_LOG_DROPPED.inc()
            return
        task = asyncio.get_running_loop().create_task(
            asyncio.wait_for(coro, self.run_log_timeout_s)
        )
        self._background.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            m.RUN_LOG_DROPPED.inc()
            logger.error("writing a retrieval run failed: %r", task.exception())

    async def flush(self) -> None:
        """Wait for background run-log writes (tests, shutdown)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    def forget(self, namespace: str, ids: list[int] | None) -> None:
        """Drop what this process holds of erased memories (internal ids; None: every memory
        of the namespace, as a purge does) and the namespace's cached query embeddings: a
        question is personal data too."""
        self.embeddings.cache.drop(lambda key: key[0] == namespace)
        forget_memories(ids)

    async def close(self) -> None:
        """Finish background writes; stop the embedding threads (a hung one is left behind)."""
        await self.flush()
        self.embeddings.close()
