"""The Multi-Search Executor: a plan's legs run concurrently, each under its own deadline, the
vector legs once the query is embedded, the hops as a second wave from the first wave's seeds,
and the results' neighbours after the ranking. A slow or failed leg is a report (its answer is
degraded and says so), never an exception; a read replica that fails at the connection is
skipped and the primary asked instead (ReadRouter.failover).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import asyncpg
import numpy as np

from retrieval import metrics as m
from retrieval.embedding.scheduling.query import EmbeddingBusy
from retrieval.errors import StoreUnavailable
from retrieval.models import (
    ADDABLE_SOURCES,
    DEGRADING,
    FAILED,
    Candidate,
    Neighbour,
    Preset,
    Source,
    SourceReport,
    SourceStatus,
)
from retrieval.replicas import ReadRouter
from retrieval.search.legs import TEXT_ONLY_SOURCES, SourceFn
from retrieval.search.neighbours import surrounding
from retrieval.search.run import Given, SearchRun, Skip, leg_connection
from retrieval.text.passages import SPLIT_ABOVE

logger = logging.getLogger(__name__)

# The key under which the results' neighbours report (search_breakdown, degraded): the API's
# word for them, a result's `context`.
NEIGHBOURS = "context"

# The first wave's candidates -> the seeds the hops start from (retrieval.rank.expansion).
SeedChooser = Callable[
    [Mapping[Source, list[Candidate]], Preset, tuple[str, ...], str, str | None],
    tuple[tuple[str, float], ...],
]

Vectors = asyncio.Future[list[np.ndarray]]
NOTHING_GIVEN = Given()
T = TypeVar("T")


@dataclass
class Searched:
    """What the legs found, per source; each leg's report; what the second wave did."""

    per_source: dict[Source, list[Candidate]]
    reports: dict[str, SourceReport]
    expansion: dict[str, Any] = field(default_factory=lambda: {"expanded": False})


def _first_wave(preset: Preset, reports: Mapping[str, SourceReport]) -> dict[str, SourceReport]:
    """The reports of the legs of the preset's first wave."""
    first_wave = {s.value for s in preset.sources}
    return {k: r for k, r in reports.items() if k in first_wave}


def _unavailable(why: str, reports: Mapping[str, SourceReport]) -> StoreUnavailable:
    """The 503 of a search the store did not answer (counted), naming each leg's error."""
    m.UNAVAILABLE.inc()
    return StoreUnavailable(why + ": " + ", ".join(f"{k}: {r.error}" for k, r in reports.items()))


def require_an_answer(preset: Preset, reports: Mapping[str, SourceReport]) -> None:
    """Raise StoreUnavailable when every first-wave leg that ran failed: an empty 200 would
    read as "no memory matches"."""
    tried = {
        k: r
        for k, r in _first_wave(preset, reports).items()
        if r.status not in (SourceStatus.SKIPPED, SourceStatus.UNAVAILABLE)
    }
    if tried and all(r.status in FAILED for r in tried.values()):
        raise _unavailable("no search source answered", tried)


def require_a_whole_answer(preset: Preset, reports: Mapping[str, SourceReport], found: int) -> None:
    """Raise StoreUnavailable when nothing was found while a first-wave leg failed: the legs
    that answered found nothing, and the one that did not might have. An empty 200 would read
    as "no memory matches" and hide an outage from the caller and the load balancer (a
    database stopped mid-request: a leg answers before the stop, the others time out)."""
    failed = {k: r for k, r in _first_wave(preset, reports).items() if r.status in FAILED}
    if not found and failed:
        raise _unavailable("nothing found, and these sources did not answer", failed)


@dataclass
class LegRunner:
    """Runs legs for requests; create once (it holds no request's state)."""

    sources: Mapping[Source, SourceFn]
    timeout_s: float
    router: ReadRouter | None = None
    # Sources this server cannot run (pg_trgm missing): reported, never tried.
    unavailable: Mapping[Source, str] = field(default_factory=dict)

    async def search(
        self,
        run: SearchRun,
        preset: Preset,
        embedding: Vectors,
        expanders: tuple[Source, ...],
        named_seeds: tuple[str, ...],
        choose_seeds: SeedChooser,
        stages: dict[str, float],
    ) -> Searched:
        """Run the preset's legs concurrently, then the hops (`expanders`) from the seeds.

        The hops need seeds but not the query's vector: they start as soon as the legs that
        need no embedding have answered, and seed from them, so that they run while the query
        is still being embedded. Only when those found nothing do they wait for every leg."""
        first = preset.sources
        tasks = {s: asyncio.ensure_future(self.leg(run, s, embedding)) for s in first}
        more: dict[Source, asyncio.Future[tuple[list[Candidate], SourceReport]]] = {}
        log: dict[str, Any] = {"expanded": False}
        try:
            found = await self._seeding(tasks, first, named_seeds) if expanders else None
            if found is not None:  # None: no hops, or the store is not answering
                t_exp = time.perf_counter()
                # Off the event loop: the n-gram signal is CPU work (as in the reranker).
                seeds = await asyncio.to_thread(
                    choose_seeds, found, preset, named_seeds, run.intent.query, run.intent.speaker
                )
                given = Given(seeds=seeds, long_seeds=_long(found, {x for x, _ in seeds}))
                more = {
                    s: asyncio.ensure_future(self.leg(run, s, embedding, given)) for s in expanders
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
        return Searched(
            {s: t.result()[0] for s, t in done.items()},
            {s.value: t.result()[1] for s, t in done.items()},
            log,
        )

    async def _seeding(
        self,
        tasks: Mapping[Source, asyncio.Future[tuple[list[Candidate], SourceReport]]],
        first: Sequence[Source],
        named_seeds: tuple[str, ...],
    ) -> dict[Source, list[Candidate]] | None:
        """What the seeds are chosen from: the text legs' candidates (not the newest memories'),
        or every leg's when those found nothing and the caller named no seed; None when the
        store is not answering."""
        text_first = [s for s in first if s in TEXT_ONLY_SOURCES and s not in ADDABLE_SOURCES]
        await asyncio.gather(*(tasks[s] for s in text_first))
        found = {s: tasks[s].result()[0] for s in text_first}
        states = [tasks[s].result()[1].status for s in text_first]
        if any(x in FAILED for x in states) and all(x in DEGRADING for x in states):
            return None
        if not any(found.values()) and not named_seeds:
            await asyncio.gather(*tasks.values())
            found = {s: t.result()[0] for s, t in tasks.items()}
        return found

    async def leg(
        self, run: SearchRun, source: Source, embedding: Vectors, given: Given = NOTHING_GIVEN
    ) -> tuple[list[Candidate], SourceReport]:
        """One leg under its own deadline; a leg that needs the query's vectors waits for the
        embedding first, at most that deadline. Never raises: failures are reported."""
        fn = self.sources.get(source)
        if fn is None:
            return [], SourceReport(source.value, 0.0, 0, SourceStatus.ERROR, "no such source")
        if source in self.unavailable:
            why = self.unavailable[source]
            return [], SourceReport(source.value, 0.0, 0, SourceStatus.UNAVAILABLE, why)
        if source not in TEXT_ONLY_SOURCES:
            got_vectors = await self._vectors_for(run, source, embedding)
            if isinstance(got_vectors, SourceReport):
                return [], got_vectors
            given = replace(given, vectors=tuple(got_vectors))
        if run.leg_timeout(self.timeout_s) <= 0:
            return [], self._past_deadline(source.value)

        async def attempt(on: SearchRun) -> tuple[list[Candidate], SourceReport]:
            return await self._attempt(on, source, fn, given)

        return await self.failover(run, attempt)

    async def _attempt(
        self, run: SearchRun, source: Source, fn: SourceFn, given: Given
    ) -> tuple[list[Candidate], SourceReport]:
        """One try of a leg on run's pool; a connection error is raised (for failover), any
        other failure reported."""
        t = time.perf_counter()
        timeout = run.leg_timeout(self.timeout_s)
        run = replace(run, timeout_s=timeout)
        m.DB_QUERIES.labels("primary" if run.replica is None else "replica").inc()
        try:
            got = await asyncio.wait_for(fn(run, given), timeout=timeout)
            ms = (time.perf_counter() - t) * 1000.0
            m.SEARCH_LATENCY.labels(source.value).observe(ms)
            return got, SourceReport(source.value, ms, len(got), SourceStatus.OK)
        except Skip as why:
            return [], SourceReport(source.value, 0.0, 0, SourceStatus.SKIPPED, str(why))
        except (TimeoutError, asyncpg.exceptions.QueryCanceledError):
            return [], self._timed_out(source.value, t, timeout)
        except Exception as exc:  # a broken leg must not fail the request
            if run.replica is not None and self.router is not None and self.router.lost(exc):
                raise
            ms = (time.perf_counter() - t) * 1000.0
            m.SOURCE_ERRORS.labels(source.value).inc()
            logger.exception("source %s failed", source.value)
            return [], SourceReport(source.value, ms, 0, SourceStatus.ERROR, type(exc).__name__)

    async def failover(self, run: SearchRun, attempt: Callable[[SearchRun], Awaitable[T]]) -> T:
        """`attempt(run)`; when run reads a replica that fails at the connection, the replica is
        skipped from now on and the attempt made again on the primary."""
        if self.router is None or run.replica is None:
            return await attempt(run)
        return await self.router.failover(
            run.replica, lambda: attempt(run), lambda primary: attempt(primary_run(run, primary))
        )

    def _timed_out(self, name: str, since: float, timeout: float) -> SourceReport:
        ms = (time.perf_counter() - since) * 1000.0
        m.SOURCE_TIMEOUTS.labels(name).inc()
        logger.warning("source %s timed out after %.0f ms", name, ms)
        why = f"timed out after {timeout * 1000:.0f} ms"
        return SourceReport(name, ms, 0, SourceStatus.TIMEOUT, why)

    def _past_deadline(self, name: str) -> SourceReport:
        m.SOURCE_TIMEOUTS.labels(name).inc()
        why = "the request's deadline passed before it could run"
        return SourceReport(name, 0.0, 0, SourceStatus.TIMEOUT, why)

    async def _vectors_for(
        self, run: SearchRun, source: Source, embedding: Vectors
    ) -> list[np.ndarray] | SourceReport:
        """The query's vectors for a vector leg, waited for at most the leg's own deadline (a
        hung or slow embedder degrades the vector legs, it does not hold the request); or the
        report of why the leg cannot run."""
        t = time.perf_counter()
        wait = max(run.leg_timeout(self.timeout_s), 0.0)
        try:
            return list(await asyncio.wait_for(asyncio.shield(embedding), wait))
        except TimeoutError:
            ms = (time.perf_counter() - t) * 1000.0
            m.SOURCE_TIMEOUTS.labels(source.value).inc()
            logger.warning("source %s: no query embedding after %.0f ms", source.value, ms)
            why = f"embedding not ready after {wait * 1000:.0f} ms"
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

    async def neighbours(
        self, run: SearchRun, ids: Sequence[int], per_side: int
    ) -> dict[int, list[Neighbour]] | SourceReport:
        """The memories around each result (retrieval.search.neighbours), under the legs'
        deadline; a failure is reported (the results stand without them)."""
        t = time.perf_counter()
        timeout = run.leg_timeout(self.timeout_s)
        if timeout <= 0:
            return self._past_deadline(NEIGHBOURS)
        run = replace(run, timeout_s=timeout)

        async def attempt(on: SearchRun) -> dict[int, list[Neighbour]]:
            async with leg_connection(on, generic_plan=True) as conn:
                return await asyncio.wait_for(
                    surrounding(
                        conn,
                        on.filters.namespace,
                        ids,
                        per_side,
                        timeout=timeout,
                        before=on.filters.written_before(),
                    ),
                    timeout,
                )

        try:
            return await self.failover(run, attempt)
        except (TimeoutError, asyncpg.exceptions.QueryCanceledError):
            return self._timed_out(NEIGHBOURS, t, timeout)
        except Exception as exc:  # the results stand without their neighbours (a leg's rule)
            ms = (time.perf_counter() - t) * 1000.0
            m.SOURCE_ERRORS.labels(NEIGHBOURS).inc()
            logger.warning("context of the results failed: %r", exc)
            return SourceReport(NEIGHBOURS, ms, 0, SourceStatus.ERROR, type(exc).__name__)


def primary_run(run: SearchRun, primary: asyncpg.Pool) -> SearchRun:
    """The same search on the primary."""
    return replace(run, pool=primary, replica=None)


def _long(found: Mapping[Source, list[Candidate]], named: set[str]) -> frozenset[str]:
    """The seeds that are long memories (split into passages)."""
    return frozenset(
        c.external_id
        for cands in found.values()
        for c in cands
        if c.external_id in named and len(c.content) > SPLIT_ABOVE
    )
