"""The read path: analyse -> select strategy -> concurrent searches -> rerank -> log and measure."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import asyncpg
import numpy as np

from db.runs import insert_run
from retrieval import metrics as m
from retrieval.analysis.analyzer import QueryAnalyzer
from retrieval.analysis.passages import SPLIT_ABOVE
from retrieval.analysis.strategy import PRESETS, Plan, Preset, plan, with_sources
from retrieval.embedding.providers import Embedder
from retrieval.embedding.query import EmbeddingBusy, QueryEmbeddings, cut_texts
from retrieval.errors import InvalidInput, StoreUnavailable
from retrieval.models import (
    ADDABLE_SOURCES,
    DEGRADING,
    FAILED,
    Candidate,
    Filters,
    QueryIntent,
    RetrievalMetadata,
    RetrievalOptions,
    RetrievalResponse,
    RetrievalResult,
    ScoredResult,
    Source,
    SourceReport,
    SourceStatus,
    TimeRange,
)
from retrieval.rank.budget import MAX_BUDGET_CHARS, fit
from retrieval.rank.rerank import (
    blend_lex,
    fuse_first_wave,
    highlights,
    lex_inputs,
    lex_signal,
    rerank,
)
from retrieval.replicas import CONNECTION_ERRORS, ReadRouter
from retrieval.search.contents import DEFAULT_CACHE_BYTES, Contents
from retrieval.search.legs import (
    SOURCES,
    TEXT_ONLY_SOURCES,
    SearchContext,
    Skip,
    SourceFn,
    leg_connection,
)
from retrieval.search.neighbours import MAX_CONTEXT_WINDOW, surrounding
from retrieval.validation import check_instant

logger = logging.getLogger(__name__)

# The key under which the results' context fetch reports (search_breakdown, degraded).
CONTEXT = "context"

# ref-llmless-hybrid-rerank Phase 1: the last three exchanges make the context query.
MAX_CONTEXT_MESSAGES = 6


def context_query(text: str, conversation: tuple[tuple[str, str], ...]) -> str | None:
    """`context + "---" + text` from the recent conversation, or None without one."""
    msgs = [
        f"{role}: {content}"
        for role, content in conversation[-MAX_CONTEXT_MESSAGES:]
        if content.strip()
    ]
    return "\n".join(msgs) + "\n---\n" + text if msgs else None


# Seeds pass on (their fused score / the best one's) to this power.
SEED_SHARPNESS = 4.0


def choose_seeds(
    per_source: Mapping[Source, list[Candidate]],
    preset: Preset,
    given: tuple[str, ...] = (),
    query: str = "",
) -> tuple[tuple[str, float], ...]:
    """The first wave's best `expand_seeds` candidates, scored as the reranker scores them
    (fused, then the character n-gram signal on the best `rerank_top`, a long memory's on its
    highlight as far as the first wave can tell) and scaled so the best is 1; after the
    memories the caller named (the current turn's context), which count as 1."""
    fused = sorted(
        fuse_first_wave(per_source, preset).values(), key=lambda f: f.score, reverse=True
    )
    top = [(f.candidate, f.score) for f in fused[: preset.rerank_top]]
    cands = [c for c, _ in top]
    lex = (
        lex_signal(query, *lex_inputs(cands, highlights(query, cands, per_source)), preset)
        if preset.lex_weight > 0
        else {}
    )
    scored = [(c, blend_lex(s, lex[c.id], preset) if lex else s) for c, s in top]
    best = sorted(scored, key=lambda x: x[1], reverse=True)[: preset.expand_seeds]
    high = best[0][1] if best and best[0][1] > 0 else 1.0
    seeds = {x: 1.0 for x in given}
    for c, score in best:
        # Sharpened: a runner-up that matched half the query (山口翔太 for 山口健太) must not
        # pass on nearly as much as the seed that matched all of it.
        seeds.setdefault(c.external_id, (max(score, 0.0) / high) ** SEED_SHARPNESS)
    return tuple(seeds.items())


def _aware(value: datetime | None, zone: ZoneInfo) -> datetime | None:
    """A naive instant read in `zone` (a library caller's; the API takes only aware ones)."""
    return value if value is None or value.tzinfo else value.replace(tzinfo=zone)


def _in_zone(tr: TimeRange | None, zone: ZoneInfo) -> TimeRange | None:
    """A caller's window with its naive ends read in `zone`."""
    if tr is None:
        return None
    return replace(tr, start=_aware(tr.start, zone), end=_aware(tr.end, zone))


class _StageClock:
    """Milliseconds per stage of one retrieve, and the CPU seconds of the stages it timed
    (on the thread that ran them: other requests' work on the machine is not counted)."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = {}
        self.cpu_s = 0.0

    def timed(self, name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        s, c = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            self.ms[name] = (time.perf_counter() - s) * 1000.0
            self.cpu_s += time.thread_time() - c


def _embedding_spent(embedding: asyncio.Future[Any], costs: list[float]) -> float:
    """What a request's embedding cost (estimated): nothing when it was refused as busy."""
    refused = (
        embedding.done()
        and not embedding.cancelled()
        and isinstance(embedding.exception(), EmbeddingBusy)
    )
    return 0.0 if refused else sum(costs)


def _require_an_answer(p: Plan, reports: Mapping[str, SourceReport]) -> None:
    """Raise StoreUnavailable when every first-wave source that ran failed: an empty 200
    would read as "no memory matches"."""
    first_wave = {s.value for s in p.preset.sources}
    tried = {
        k: r
        for k, r in reports.items()
        if k in first_wave and r.status not in (SourceStatus.SKIPPED, SourceStatus.UNAVAILABLE)
    }
    if tried and all(r.status in FAILED for r in tried.values()):
        m.UNAVAILABLE.inc()
        raise StoreUnavailable(
            "no search source answered: " + ", ".join(f"{k}: {r.error}" for k, r in tried.items())
        )


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
        max_query_chars: int = 2000,
        max_limit: int = 100,
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
    ) -> None:
        self.pool = pool
        self.router = router
        # Sources this server cannot run (pg_trgm missing): reported, never tried.
        self.unavailable = dict(unavailable or {})
        self.analyzer = analyzer
        self.embedder = embedder
        self.tz = ZoneInfo(timezone)
        self.source_timeout_ms = source_timeout_ms
        self.max_request_connections = max_request_connections
        self.max_query_chars = max_query_chars
        self.max_limit = max_limit
        self.log_runs = log_runs
        self.sources = sources
        self.presets = presets
        self._background: set[asyncio.Task[None]] = set()
        self.run_log_max_pending = run_log_max_pending
        self.run_log_timeout_s = run_log_timeout_s
        # A context assembler asks the same question more than once; embedding is the costliest
        # stage (~10-25 ms), so repeated texts are embedded once, per namespace; each tenant's
        # embedding work is bounded (retrieval.embedding.query).
        self.embeddings = QueryEmbeddings(embedder, cache_bytes=embed_cache_bytes)
        # The long contents the legs return by reference (retrieval.search.contents).
        self.contents = Contents(content_cache_bytes)

    def validate(self, query: str, options: RetrievalOptions) -> str:
        """Reject what cannot be answered; return the query stripped."""
        errors: list[dict[str, object]] = []
        q = query.strip() if isinstance(query, str) else ""
        if not q:
            errors.append({"field": "query", "reason": "must not be empty or whitespace"})
        elif len(q) > self.max_query_chars:
            errors.append(
                {"field": "query", "reason": f"longer than {self.max_query_chars} characters"}
            )
        if not 0 <= options.context_window <= MAX_CONTEXT_WINDOW:
            errors.append(
                {
                    "field": "options.context_window",
                    "reason": f"must be between 0 and {MAX_CONTEXT_WINDOW}",
                }
            )
        if not 1 <= options.limit <= self.max_limit:
            errors.append(
                {"field": "options.limit", "reason": f"must be between 1 and {self.max_limit}"}
            )
        if options.max_chars is not None and not 1 <= options.max_chars <= MAX_BUDGET_CHARS:
            errors.append(
                {
                    "field": "options.max_chars",
                    "reason": f"must be between 1 and {MAX_BUDGET_CHARS}",
                }
            )
        try:
            zone = self._zone(options)
        except ValueError:
            errors.append({"field": "options.timezone", "reason": "not a known IANA time zone"})
            zone = self.tz
        tr = _in_zone(options.time_range, zone)
        if tr and tr.start and tr.end and tr.start >= tr.end:
            errors.append({"field": "options.time_range", "reason": "start must be before end"})
        for name, value in (
            ("options.now", _aware(options.now, zone)),
            ("options.time_range.start", tr.start if tr else None),
            ("options.time_range.end", tr.end if tr else None),
        ):
            try:
                check_instant(value)
            except ValueError as exc:
                errors.append({"field": name, "reason": str(exc)})
        if errors:
            raise InvalidInput(errors)
        return q

    def _zone(self, options: RetrievalOptions) -> ZoneInfo:
        """The calendar the request's time words are read in; ValueError for an unknown zone."""
        if options.timezone is None:
            return self.tz
        try:
            return ZoneInfo(options.timezone)
        except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
            raise ValueError(f"unknown time zone {options.timezone!r}") from exc

    async def retrieve(
        self, query: str, options: RetrievalOptions | None = None
    ) -> RetrievalResponse:
        """Answer one query; a failing or slow source degrades the answer, never fails it:
        plan -> search -> rerank -> respond."""
        options = options or RetrievalOptions()
        t0 = time.perf_counter()
        q = self.validate(query, options)
        zone = self._zone(options)
        now = _aware(options.now, zone) or datetime.now(zone)
        # A naive time_range is read in the request's zone too (as its time words are).
        options = replace(options, time_range=_in_zone(options.time_range, zone))
        clock = _StageClock()
        # The embedding (the costliest stage) overlaps the analysis and the sources that need
        # no vector: those start as soon as the analysis has chosen the plan.
        texts = cut_texts(q, context_query(q, options.recent_conversation))
        given_up = threading.Event()  # set when the request no longer waits for the vectors
        t_embed = time.perf_counter()
        embed_costs = self.embeddings.costs(options.namespace, texts)
        embedding = self.embeddings.submit(
            options.namespace,
            texts,
            time.monotonic() + self.source_timeout_ms / 1000.0,
            given_up,
            embed_costs,
        )

        def timed(_: object) -> None:  # on the loop, while this request still waits for it
            if not given_up.is_set():
                clock.ms["embed"] = (time.perf_counter() - t_embed) * 1000.0

        embedding.add_done_callback(timed)
        try:
            intent = await asyncio.to_thread(
                clock.timed, "analyze", self.analyzer.analyze, q, now, zone
            )
        except BaseException:
            given_up.set()
            embedding.cancel()
            raise
        p = self._plan(intent, options)
        window = options.time_range or p.time_range
        ctx = self._context(intent, options, p, window, now)
        expanders = (
            tuple(x for x in p.preset.expansion if x in self.sources) if options.expand else ()
        )
        t_search = time.perf_counter()
        per_source, reports, expansion_log = await self._search(
            ctx, p, embedding, expanders, options.seed_ids, clock.ms
        )
        clock.ms["search"] = (time.perf_counter() - t_search) * 1000.0
        if not (embedding.done() and not embedding.cancelled() and embedding.exception() is None):
            given_up.set()  # a text not started yet is not embedded for nobody
            embedding.cancel()  # no vector source ran (or the embedding failed, and they say so)
            clock.ms.pop("embed", None)
        _require_an_answer(p, reports)
        # Off the event loop: the n-gram signal over long uncached memories is CPU work.
        scored, counts = await asyncio.to_thread(
            clock.timed, "rerank", rerank, per_source, p.preset, now=now, window=window,
            limit=options.limit, query=q, diversify_by=options.diversify_by,
            per_bucket=options.per_bucket, named_seeds=options.seed_ids,
        )  # fmt: skip
        results = [RetrievalResult.of(r, details=options.include_metadata_details) for r in scored]
        if options.context_window > 0 and results:
            t_ctx = time.perf_counter()
            report = await self._add_context(ctx, scored, results, options.context_window)
            clock.ms["context"] = (time.perf_counter() - t_ctx) * 1000.0
            if report is not None:
                reports[report.source] = report
        budget = None
        if options.max_chars is not None:
            results, budget = fit(results, options.max_chars)
        meta = RetrievalMetadata(
            strategy_used=p.strategy,
            query_intent=intent,
            total_latency_ms=(time.perf_counter() - t0) * 1000.0,
            search_breakdown=reports,
            stage_latency_ms=clock.ms,
            num_results_before_rerank=counts["before"],
            num_results_after_rerank=len(results),
            # Without a source this server lacks, the answer is degraded too, and says so.
            degraded=[s for s, r in reports.items() if r.status in DEGRADING],
            run_id=str(uuid.uuid4()),
            params=_plan_json(p, window, options.time_range is not None),
            cost_s=clock.cpu_s + _embedding_spent(embedding, embed_costs),
            budget=budget,
        )
        m.record_retrieval(meta)
        if self.log_runs and options.log_run:
            self._log_run(q, options.namespace, meta, per_source, expansion_log, results)
        return RetrievalResponse(results=results, metadata=meta)

    async def _add_context(
        self,
        ctx: SearchContext,
        scored: list[ScoredResult],
        results: list[RetrievalResult],
        window: int,
    ) -> SourceReport | None:
        """Give each result the memories around it (retrieval.search.neighbours), under the sources'
        deadline; a failure leaves the results without context and is reported (None: fine)."""
        timeout = self.source_timeout_ms / 1000.0
        t = time.perf_counter()
        try:
            async with leg_connection(_with_timeout(ctx, timeout), generic_plan=True) as conn:
                got = await asyncio.wait_for(
                    surrounding(
                        conn,
                        ctx.filters.namespace,
                        [r.candidate.id for r in scored],
                        window,
                        timeout=timeout,
                    ),
                    timeout,
                )
        except (TimeoutError, asyncpg.exceptions.QueryCanceledError):
            ms = (time.perf_counter() - t) * 1000.0
            m.SOURCE_TIMEOUTS.labels(CONTEXT).inc()
            why = f"timed out after {timeout * 1000:.0f} ms"
            return SourceReport(CONTEXT, ms, 0, SourceStatus.TIMEOUT, why)
        except Exception as exc:  # the results stand without their context (a source's rule)
            if (
                ctx.replica is not None
                and self.router is not None
                and isinstance(exc, CONNECTION_ERRORS)
            ):
                # The replica is gone, not the data: as a source does, ask the primary.
                self.router.mark_failed(ctx.replica, exc)
                primary = replace(ctx, pool=self.router.primary, replica=None)
                return await self._add_context(primary, scored, results, window)
            ms = (time.perf_counter() - t) * 1000.0
            m.SOURCE_ERRORS.labels(CONTEXT).inc()
            logger.warning("context of the results failed: %r", exc)
            return SourceReport(CONTEXT, ms, 0, SourceStatus.ERROR, type(exc).__name__)
        for r, out in zip(scored, results, strict=True):
            out.context = got.get(r.candidate.id, [])
        return None

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

    def _context(
        self,
        intent: QueryIntent,
        options: RetrievalOptions,
        p: Plan,
        window: TimeRange | None,
        now: datetime,
    ) -> SearchContext:
        """What every source reads: pool, filters, window, candidates wanted."""
        hard = options.time_range
        # Reads go to a replica that has this namespace's last write, else to the primary.
        pool, replica = (
            self.router.read_pool(options.namespace, options.after_lsn)
            if self.router
            else (self.pool, None)
        )
        return SearchContext(
            pool=pool,
            replica=replica,
            intent=intent,
            vectors=[],
            filters=Filters(
                namespace=options.namespace,
                memory_types=options.memory_types,
                source_types=options.source_types,
                start=hard.start if hard else None,
                end=hard.end if hard else None,
            ),
            k=max(p.preset.candidates_per_source, options.limit),
            window=window,
            now=now,
            slots=asyncio.Semaphore(self.max_request_connections),
            contents=self.contents,
        )

    def _log_run(
        self,
        q: str,
        namespace: str,
        meta: RetrievalMetadata,
        per_source: Mapping[Source, list[Candidate]],
        expansion_log: dict[str, Any],
        results: list[RetrievalResult],
    ) -> None:
        """Write the run record in the background (bounded; see _spawn)."""
        self._spawn(
            insert_run(
                self.pool,
                run_id=meta.run_id,
                namespace=namespace,
                query=q,
                strategy=meta.strategy_used.value,
                plan={
                    **meta.params,
                    "intent": meta.query_intent.to_json(),
                    "expansion": expansion_log,
                },
                candidate_ids=sorted({c.external_id for cs in per_source.values() for c in cs}),
                selected_ids=[r.id for r in results],
                latencies={
                    "total_ms": meta.total_latency_ms,
                    **{f"{k}_ms": v for k, v in meta.stage_latency_ms.items()},
                    **{f"source_{k}_ms": r.latency_ms for k, r in meta.search_breakdown.items()},
                },
                degraded=meta.degraded,
            )
        )

    async def _search(
        self,
        ctx: SearchContext,
        p: Plan,
        embedding: asyncio.Future[list[np.ndarray]],
        expanders: tuple[Source, ...],
        given_seeds: tuple[str, ...],
        stages: dict[str, float],
    ) -> tuple[dict[Source, list[Candidate]], dict[str, SourceReport], dict[str, Any]]:
        """Run the plan's sources concurrently, each under its own timeout, then expand.

        Expansion needs seeds but not the query's vector: it starts as soon as the sources that
        need no embedding have answered, and seeds from them, so that it runs while the query is
        still being embedded. Only when those found nothing does it wait for every source."""
        first = p.preset.sources
        tasks = {s: asyncio.ensure_future(self._run_source(ctx, s, embedding)) for s in first}
        more: dict[Source, asyncio.Future[tuple[list[Candidate], SourceReport]]] = {}
        log: dict[str, Any] = {"expanded": False}
        found: dict[Source, list[Candidate]] = {}
        try:
            if expanders:
                # Seeds come from the sources that match the query: not from the newest memories.
                text_first = [
                    s for s in first if s in TEXT_ONLY_SOURCES and s not in ADDABLE_SOURCES
                ]
                await asyncio.gather(*(tasks[s] for s in text_first))
                found = {s: tasks[s].result()[0] for s in text_first}
                states = [tasks[s].result()[1].status for s in text_first]
                down = any(x in FAILED for x in states) and all(x in DEGRADING for x in states)
                if down:  # the store is not answering: another wave would only wait longer
                    expanders = ()
                elif not any(found.values()) and not given_seeds:
                    await asyncio.gather(*tasks.values())
                    found = {s: t.result()[0] for s, t in tasks.items()}
            if expanders:
                t_exp = time.perf_counter()
                # Off the event loop: the n-gram signal is CPU work (as in rerank).
                seeds = await asyncio.to_thread(
                    choose_seeds, found, p.preset, given_seeds, ctx.intent.query
                )
                named = {x for x, _ in seeds}
                long_seeds = frozenset(
                    c.external_id
                    for cands in found.values()
                    for c in cands
                    if c.external_id in named and len(c.content) > SPLIT_ABOVE
                )
                sctx = replace(ctx, seeds=seeds, long_seeds=long_seeds)
                more = {
                    s: asyncio.ensure_future(self._run_source(sctx, s, embedding))
                    for s in expanders
                }
                await asyncio.gather(*more.values())
                stages["expand"] = (time.perf_counter() - t_exp) * 1000.0
                log = {
                    "expanded": True,
                    "seeds": [x for x, _ in seeds],
                    "seeded_from": sorted(s.value for s, c in found.items() if c),
                    "contributed": {s.value: len(t.result()[0]) for s, t in more.items()},
                }
            await asyncio.gather(*tasks.values())
        finally:
            for t in (*tasks.values(), *more.values()):
                t.cancel()
        done = {**tasks, **more}
        per_source = {s: t.result()[0] for s, t in done.items()}
        reports = {s.value: t.result()[1] for s, t in done.items()}
        return per_source, reports, log

    async def _vectors_for(
        self, source: Source, embedding: asyncio.Future[list[np.ndarray]], timeout: float
    ) -> list[np.ndarray] | SourceReport:
        """The query's vectors for a vector leg, waited for at most the leg's own timeout (a
        hung or slow embedder degrades the vector legs, it does not hold the request); or the
        report of why the leg cannot run."""
        t = time.perf_counter()
        try:
            return list(await asyncio.wait_for(asyncio.shield(embedding), timeout=timeout))
        except TimeoutError:
            ms = (time.perf_counter() - t) * 1000.0
            m.SOURCE_TIMEOUTS.labels(source.value).inc()
            logger.warning("source %s: no query embedding after %.0f ms", source.value, ms)
            why = f"embedding not ready after {timeout * 1000:.0f} ms"
            return SourceReport(source.value, ms, 0, SourceStatus.TIMEOUT, why)
        except Exception as exc:  # the embedding failed: the vector legs cannot run
            m.SOURCE_ERRORS.labels(source.value).inc()
            logger.warning("source %s skipped: embedding failed: %s", source.value, exc)
            # This tenant's own backlog is said as such; another failure by its kind only.
            why = (
                str(exc)
                if isinstance(exc, EmbeddingBusy)
                else f"embedding failed: {type(exc).__name__}"
            )
            return SourceReport(source.value, 0.0, 0, SourceStatus.ERROR, why)

    async def _run_source(
        self, ctx: SearchContext, source: Source, embedding: asyncio.Future[list[np.ndarray]]
    ) -> tuple[list[Candidate], SourceReport]:
        """One source under its own timeout; a source that needs the query's vectors waits for
        the embedding first, at most that timeout. Never raises: failures are reported."""
        fn = self.sources.get(source)
        if fn is None:
            return [], SourceReport(source.value, 0.0, 0, SourceStatus.ERROR, "no such source")
        if source in self.unavailable:
            return [], SourceReport(
                source.value, 0.0, 0, SourceStatus.UNAVAILABLE, self.unavailable[source]
            )
        timeout = self.source_timeout_ms / 1000.0
        sctx = ctx
        if source not in TEXT_ONLY_SOURCES:
            got_vectors = await self._vectors_for(source, embedding, timeout)
            if isinstance(got_vectors, SourceReport):
                return [], got_vectors
            sctx = replace(ctx, vectors=got_vectors)
        t = time.perf_counter()
        m.DB_QUERIES.labels("primary" if sctx.replica is None else "replica").inc()
        try:
            got = await asyncio.wait_for(fn(_with_timeout(sctx, timeout)), timeout=timeout)
            ms = (time.perf_counter() - t) * 1000.0
            m.SEARCH_LATENCY.labels(source.value).observe(ms)
            return got, SourceReport(source.value, ms, len(got), SourceStatus.OK)
        except Skip as why:
            return [], SourceReport(source.value, 0.0, 0, SourceStatus.SKIPPED, str(why))
        except (TimeoutError, asyncpg.exceptions.QueryCanceledError):
            ms = (time.perf_counter() - t) * 1000.0
            m.SOURCE_TIMEOUTS.labels(source.value).inc()
            logger.warning("source %s timed out after %.0f ms", source.value, ms)
            return [], SourceReport(
                source.value,
                ms,
                0,
                SourceStatus.TIMEOUT,
                f"timed out after {timeout * 1000:.0f} ms",
            )
        except Exception as exc:  # a broken source must not fail the request
            if (
                sctx.replica is not None
                and self.router is not None
                and isinstance(exc, CONNECTION_ERRORS)
            ):
                # The replica is gone, not the data: skip it from now on, ask the primary.
                self.router.mark_failed(sctx.replica, exc)
                return await self._run_source(
                    replace(ctx, pool=self.router.primary, replica=None), source, embedding
                )
            ms = (time.perf_counter() - t) * 1000.0
            m.SOURCE_ERRORS.labels(source.value).inc()
            logger.exception("source %s failed", source.value)
            return [], SourceReport(source.value, ms, 0, SourceStatus.ERROR, type(exc).__name__)

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

    async def close(self) -> None:
        """Finish background writes; stop the embedding threads (a hung one is left behind)."""
        await self.flush()
        self.embeddings.close()


def _with_timeout(ctx: SearchContext, timeout: float) -> SearchContext:
    return replace(ctx, timeout_s=timeout)
