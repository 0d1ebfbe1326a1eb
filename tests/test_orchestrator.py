"""Orchestrator with fake sources swapped into the registry: partial answers, degraded sources."""

import asyncio
import threading
import time
from datetime import UTC, datetime
from types import MappingProxyType

import pytest

from retrieval.embedding.scheduling.query import (
    QUERY_EMBED_MAX_CHARS,
    QueryEmbeddings,
    conversation_text,
    query_texts,
)
from retrieval.errors import InvalidInput, StoreUnavailable
from retrieval.models import RetrievalOptions, Source, Strategy, TimeRange
from retrieval.orchestrator import Orchestrator
from tests.fakes import FakeEmbedder, cand, failing_source, fixed_source

NOW = datetime(2026, 11, 22, 3, tzinfo=UTC)


def _orch(analyzer, sources, timeout_ms=200):
    return Orchestrator(
        None,
        analyzer,
        FakeEmbedder(),
        source_timeout_ms=timeout_ms,
        log_runs=False,
        sources=MappingProxyType(sources),
    )


async def test_slow_source_is_skipped_and_reported(analyzer):
    sources = {
        Source.VECTOR: fixed_source([cand(1, 0.9, Source.VECTOR)]),
        Source.KEYWORD: fixed_source([cand(2, 3.0, Source.KEYWORD)], delay=2.0),
        Source.TRIGRAM: fixed_source([]),
    }
    orch = _orch(analyzer, sources)
    resp = await orch.retrieve(
        "宏啓さんがレビューしたPRは誰が書いた？", RetrievalOptions(now=NOW, context_window=0)
    )
    md = resp.metadata
    assert md.strategy_used == Strategy.KEYWORD_BOOST
    assert md.degraded == ["keyword"]
    assert md.search_breakdown["keyword"].status == "timeout"
    assert md.search_breakdown["keyword"].latency_ms < 1500
    assert [r.id for r in resp.results] == ["m1"]


async def test_failing_source_degrades_not_fails(analyzer):
    sources = {
        Source.VECTOR: failing_source(RuntimeError("boom")),
        Source.KEYWORD: fixed_source([cand(2, 3.0, Source.KEYWORD)]),
        Source.TRIGRAM: fixed_source([]),
    }
    resp = await _orch(analyzer, sources).retrieve(
        "PRは誰が書いた？", RetrievalOptions(now=NOW, context_window=0)
    )
    assert resp.metadata.degraded == ["vector"]
    assert resp.metadata.search_breakdown["vector"].error == "RuntimeError"
    assert [r.id for r in resp.results] == ["m2"]


async def test_nothing_found_while_a_source_failed_is_unavailable(analyzer):
    """The legs that answered found nothing and another failed (a database stopped
    mid-request): no empty 200, which would read as "no memory matches", but a 503."""
    sources = {
        Source.VECTOR: failing_source(TimeoutError()),
        Source.KEYWORD: fixed_source([]),
        Source.TRIGRAM: fixed_source([]),
    }
    with pytest.raises(
        StoreUnavailable, match="nothing found, and these sources did not answer: vector"
    ):
        await _orch(analyzer, sources).retrieve(
            "PRは誰が書いた？", RetrievalOptions(now=NOW, context_window=0)
        )
    # Nothing found with every source answering is an honest empty answer.
    sources[Source.VECTOR] = fixed_source([])
    resp = await _orch(analyzer, sources).retrieve(
        "PRは誰が書いた？", RetrievalOptions(now=NOW, context_window=0)
    )
    assert resp.results == [] and resp.metadata.degraded == []


async def test_all_sources_failing_is_unavailable(analyzer):
    sources = {s: failing_source(OSError("db down")) for s in Source}
    with pytest.raises(StoreUnavailable):
        await _orch(analyzer, sources).retrieve(
            "PRは誰が書いた？", RetrievalOptions(now=NOW, context_window=0)
        )


async def test_sources_run_concurrently(analyzer):
    running: set[Source] = set()
    overlapped: set[Source] = set()

    def tracked(s: Source):
        async def fn(run, given):
            running.add(s)
            await asyncio.sleep(0.05)
            if len(running) > 1:
                overlapped.update(running)
            running.discard(s)
            return [cand(1, 0.5, s)]

        return fn

    orch = _orch(analyzer, {s: tracked(s) for s in Source}, timeout_ms=5000)
    resp = await orch.retrieve(
        "ベクトル検索とキーワード検索の違い", RetrievalOptions(now=NOW, context_window=0)
    )
    assert resp.metadata.strategy_used == Strategy.HYBRID and not resp.metadata.degraded
    ran = {Source(k) for k, r in resp.metadata.search_breakdown.items() if r.status == "ok"}
    # Every source that ran was running while another one was (none waited for the others).
    assert {Source.VECTOR, Source.KEYWORD} <= ran and ran <= overlapped


@pytest.mark.parametrize(
    "query,opts,field",
    [
        ("   ", RetrievalOptions(), "query"),
        ("x" * 5000, RetrievalOptions(), "query"),
        ("ok", RetrievalOptions(limit=0), "options.limit"),
        ("ok", RetrievalOptions(limit=1000), "options.limit"),
        ("ok", RetrievalOptions(time_range=TimeRange(NOW, NOW)), "options.time_range"),
        # A library caller's naive start (read in the service's zone, Tokyo): after the end.
        (
            "ok",
            RetrievalOptions(time_range=TimeRange(datetime(2030, 1, 1), NOW)),
            "options.time_range",
        ),
        (
            "ok",
            RetrievalOptions(now=datetime.fromisoformat("0001-01-01T00:00:00+09:00")),
            "options.now",
        ),
        (
            "ok",
            RetrievalOptions(now=datetime.fromisoformat("9999-12-31T23:00:00-09:00")),
            "options.now",
        ),
    ],
)
async def test_bad_input_names_field(analyzer, query, opts, field):
    with pytest.raises(InvalidInput) as err:
        await _orch(analyzer, {}).retrieve(query, opts)
    assert err.value.errors[0]["field"] == field


def test_the_conversation_text_uses_the_last_six_messages():
    conv = tuple(("user", f"m{i}") for i in range(10))
    q = conversation_text("今の話", conv)
    assert q.endswith("---\n今の話") and "m3" not in q and "m4" in q
    assert conversation_text("x", ()) is None


async def test_conversation_adds_a_second_query_vector(analyzer):
    seen = {}

    async def vec(run, given):
        seen["n"] = len(given.vectors)
        return []

    # Every other leg answers (with nothing): nothing found while a leg failed would be a 503.
    others = {s: fixed_source([]) for s in (Source.KEYWORD, Source.TRIGRAM, Source.TEMPORAL)}
    orch = _orch(analyzer, {Source.VECTOR: vec, **others})
    await orch.retrieve(
        "呼吸のリズムとは",
        RetrievalOptions(
            now=NOW, context_window=0, recent_conversation=(("user", "Resonant Engineの話"),)
        ),
    )
    assert seen["n"] == 2


class _SlowFailingEmbedder(FakeEmbedder):
    """Embeds after a delay, or fails: the text-only legs must not wait for it."""

    def __init__(self, delay: float, fail: bool = False) -> None:
        super().__init__()
        self.delay, self.fail = delay, fail

    def embed_query(self, text, *, background=False):
        import time

        time.sleep(self.delay)
        if self.fail:
            raise RuntimeError("embedding endpoint down")
        return super().embed_query(text)


async def test_text_sources_start_before_the_embedding_is_done(analyzer):
    started = {}

    def stamp(source):
        async def fn(run, given):
            started[source] = asyncio.get_running_loop().time()
            assert (source == Source.VECTOR) == bool(given.vectors)
            return [cand(1 if source == Source.VECTOR else 2, 0.5, source)]

        return fn

    sources = {s: stamp(s) for s in (Source.VECTOR, Source.KEYWORD, Source.TRIGRAM)}
    orch = Orchestrator(
        None, analyzer, _SlowFailingEmbedder(0.3), log_runs=False, sources=MappingProxyType(sources)
    )
    t0 = asyncio.get_running_loop().time()
    resp = await orch.retrieve("PRは誰が書いた？", RetrievalOptions(now=NOW, context_window=0))
    assert started[Source.KEYWORD] - t0 < 0.25 <= started[Source.VECTOR] - t0
    assert resp.metadata.stage_latency_ms["embed"] >= 300 and not resp.metadata.degraded


async def test_failed_embedding_degrades_the_vector_legs_only(analyzer):
    sources = {
        Source.VECTOR: fixed_source([cand(1, 0.9, Source.VECTOR)]),
        Source.KEYWORD: fixed_source([cand(2, 3.0, Source.KEYWORD)]),
        Source.TRIGRAM: fixed_source([]),
    }
    orch = Orchestrator(
        None,
        analyzer,
        _SlowFailingEmbedder(0.0, fail=True),
        log_runs=False,
        sources=MappingProxyType(sources),
    )
    resp = await orch.retrieve("PRは誰が書いた？", RetrievalOptions(now=NOW, context_window=0))
    assert resp.metadata.degraded == ["vector"]
    assert resp.metadata.search_breakdown["vector"].error == "embedding failed: RuntimeError"
    assert [r.id for r in resp.results] == ["m2"] and "embed" not in resp.metadata.stage_latency_ms
    with pytest.raises(StoreUnavailable):  # a vector-only plan has nothing left
        await orch.retrieve(
            "呼吸とは何か",
            RetrievalOptions(now=NOW, context_window=0, force_strategy=Strategy.VECTOR_ONLY),
        )


async def test_a_failing_context_fetch_leaves_the_results_and_says_so(analyzer):
    """The turns around the results are fetched after the ranking; when that fails (here: no
    database behind the fake sources) the answer stands without them, `context` degraded."""
    sources = {
        Source.VECTOR: fixed_source([cand(1, 0.9, Source.VECTOR)]),
        Source.KEYWORD: fixed_source([cand(1, 3.0, Source.KEYWORD)]),
        Source.TRIGRAM: fixed_source([]),
    }
    resp = await _orch(analyzer, sources).retrieve("PRは誰が書いた？", RetrievalOptions(now=NOW))
    assert [r.id for r in resp.results] == ["m1"] and resp.results[0].context == []
    assert resp.metadata.degraded == ["context"]
    assert resp.metadata.search_breakdown["context"].status == "error"
    with pytest.raises(InvalidInput) as e:
        await _orch(analyzer, sources).retrieve("PR", RetrievalOptions(context_window=9))
    assert e.value.errors[0]["field"] == "options.context_window"


def test_a_query_embeds_at_most_a_window_of_text():
    """Before: the query and six 3,000-character messages were embedded whole (~30 s here)."""
    conv = tuple(("user", f"{i}" + "長い発言" * 750) for i in range(6))
    query = "質問" * 1500
    texts = query_texts(query, conv)
    assert [len(t) for t in texts] == [QUERY_EMBED_MAX_CHARS, QUERY_EMBED_MAX_CHARS]
    assert texts[0] == query[:QUERY_EMBED_MAX_CHARS]
    assert texts[1].endswith(query[-10:])
    assert query_texts("短い質問") == ["短い質問"]


class _CountingEmbedder(FakeEmbedder):
    """Counts query embeddings; each takes `delay` seconds."""

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__()
        self.delay, self.calls = delay, []

    def embed_query(self, text: str, *, background: bool = False):
        import time

        self.calls.append(text)
        time.sleep(self.delay)
        return super().embed_query(text)


async def test_the_embedding_cache_tells_no_tenant_what_another_asked(analyzer):
    emb = _CountingEmbedder()
    orch = Orchestrator(
        None,
        analyzer,
        emb,
        sources=MappingProxyType({Source.VECTOR: fixed_source([cand(1, 0.9, Source.VECTOR)])}),
        log_runs=False,
    )
    await orch.retrieve("来週の出張の予定", RetrievalOptions(namespace="tenant-b"))
    await orch.retrieve("来週の出張の予定", RetrievalOptions(namespace="tenant-b"))
    assert len(emb.calls) == 1  # a tenant's own repeat is a hit
    await orch.retrieve("来週の出張の予定", RetrievalOptions(namespace="tenant-a"))
    assert len(emb.calls) == 2  # another tenant's is not: its embed stage shows no hit
    await orch.close()


async def test_a_request_that_gave_up_starts_no_more_embedding(analyzer):
    """The query's vectors come too late for the legs' deadline: the context text's embedding,
    not started yet, is never started (before: it ran for nobody)."""
    emb = _CountingEmbedder(delay=0.6)
    orch = Orchestrator(
        None,
        analyzer,
        emb,
        sources=MappingProxyType(
            {
                Source.VECTOR: fixed_source([]),
                Source.KEYWORD: fixed_source([cand(1, 0.9, Source.KEYWORD, "出張の予定")]),
            }
        ),
        source_timeout_ms=100,
        log_runs=False,
    )
    conv = (("user", "出張の話をしよう"),)
    resp = await orch.retrieve(
        "来週の出張の予定", RetrievalOptions(recent_conversation=conv, expand=False)
    )
    assert "vector" in resp.metadata.degraded
    await asyncio.sleep(1.0)  # the first text finishes; the second would have started
    assert len(emb.calls) == 1
    await orch.close()


class _SlowPerChar(FakeEmbedder):
    """Embedding takes 2 ms of CPU a character (as a long text does on a real CPU)."""

    def embed_query(self, text: str, *, background: bool = False):
        import time

        end = time.thread_time() + 0.002 * len(text)
        while time.thread_time() < end:
            pass
        return super().embed_query(text)


async def test_a_tenant_with_embedding_in_flight_cannot_queue_more(analyzer):
    """Before: a tenant's long queries each started an embedding that ran on after its request
    gave up; a few of them held every embedding thread and other tenants' vector legs failed."""
    sources = MappingProxyType(
        {
            Source.VECTOR: fixed_source([cand(1, 0.9, Source.VECTOR, "出張")]),
            Source.KEYWORD: fixed_source([cand(1, 0.9, Source.KEYWORD, "出張")]),
        }
    )
    orch = Orchestrator(
        None, analyzer, _SlowPerChar(), sources=sources, source_timeout_ms=3000, log_runs=False
    )
    orch.embeddings.max_pending_s = 0.6
    await orch.retrieve("出張", RetrievalOptions(namespace="warm", expand=False))  # the rate
    long = "長" * QUERY_EMBED_MAX_CHARS  # ~0.5 s here
    first = asyncio.ensure_future(
        orch.retrieve(long, RetrievalOptions(namespace="heavy", expand=False))
    )
    await asyncio.sleep(0.1)
    second = await orch.retrieve(long + "二", RetrievalOptions(namespace="heavy", expand=False))
    other = await orch.retrieve("来週の出張", RetrievalOptions(namespace="light", expand=False))
    assert "vector" in second.metadata.degraded
    assert "still being embedded" in second.metadata.search_breakdown["vector"].error
    assert "vector" not in other.metadata.degraded  # another tenant is not held back
    assert "vector" not in (await first).metadata.degraded
    await orch.close()


async def test_a_cached_text_costs_its_tenant_nothing():
    """Before: a request's estimate counted every text, cached or not, so a question asked
    again (or an ordinary question with a short conversation, ~100 characters together) was
    taken for a long one: refused as busy, or queued behind another tenant's long embedding
    on the background thread (seen in the load test: ordinary answers degraded)."""
    q = QueryEmbeddings(_SlowPerChar(), cache_bytes=1 << 20, max_pending_s=0.6)
    try:
        q.one("出張")  # the rate
        long = "長" * QUERY_EMBED_MAX_CHARS  # ~0.5 s here
        far = time.monotonic() + 30
        await q.submit("a", [long], far, threading.Event())
        running = q.submit("a", [long + "二"], far, threading.Event())  # a new long text
        again = await asyncio.wait_for(q.submit("a", [long], far, threading.Event()), 0.2)
        assert len(again) == 1 and not running.done()
        await running
    finally:
        q.close()
