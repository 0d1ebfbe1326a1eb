"""Bounded resources: caches by bytes, run-log writes that cannot pile up, retention, eval's namespace guard."""

import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from retrieval import metrics
from retrieval.cache import ByteLRU
from retrieval.models import RetrievalOptions


def test_byte_lru_holds_at_most_its_budget():
    """The n-gram cache held 1,024 entries of any size (one 100k-character memory ~ 12 MB)."""
    cache: ByteLRU[str] = ByteLRU(1000, lambda _k, v: len(v))
    for i in range(50):
        cache.get_or_compute(i, lambda i=i: "x" * 90)
    assert cache.bytes <= 1000 and len(cache) == 11
    assert cache.get_or_compute(49, lambda: "recomputed") == "x" * 90  # the newest stay
    assert cache.get_or_compute(0, lambda: "recomputed") == "recomputed"  # the oldest went
    huge = cache.get_or_compute("big", lambda: "y" * 500)  # over an eighth: computed, not held
    assert huge == "y" * 500 and "big" not in cache._items


def test_ngram_and_embedding_caches_are_bounded_by_bytes(rt):
    from retrieval.rank import lexical

    assert lexical._CODES.max_bytes == lexical.NGRAM_CACHE_BYTES
    assert lexical._BIGRAM_SETS.max_bytes == lexical.BIGRAM_SET_CACHE_BYTES

    def text(seed: int, n: int) -> str:  # n kanji drawn at random: ~n distinct n-grams
        rng = np.random.default_rng(seed)
        return rng.integers(0x4E00, 0x9FFF, n).astype("<u4").tobytes().decode("utf-32-le")

    asked = lexical.asked_grams(["長い"], 2)
    for i in range(40):  # ~3 MB of codes, ~1.6 MB of bigram strings each
        lexical.held_ngrams(text(i, 400_000), 2, i, ["長い"], asked)
        lexical.char_bigrams(text(i, 15_000), i)
    assert 0 < lexical._CODES.bytes <= lexical.NGRAM_CACHE_BYTES
    assert 0 < lexical._BIGRAM_SETS.bytes <= lexical.BIGRAM_SET_CACHE_BYTES
    assert rt.orchestrator.embeddings.cache.max_bytes == rt.settings.embed_cache_bytes


async def test_run_log_writes_past_the_bound_are_dropped_and_counted(rt, ns):
    """With the database slow, background run-log writes piled up without limit."""
    orch = rt.orchestrator
    before = metrics.RUN_LOG_DROPPED._value.get()
    saved = orch.run_log_max_pending
    orch.run_log_max_pending = 0
    try:
        await orch.retrieve("ジムの記録", RetrievalOptions(namespace=ns))
    finally:
        orch.run_log_max_pending = saved
    assert metrics.RUN_LOG_DROPPED._value.get() == before + 1
    assert not orch._background


async def test_retention_deletes_old_runs_and_feedback_in_batches(rt, ns):
    from db.run_log import purge_old

    old = datetime.now(UTC) - timedelta(days=40)
    async with rt.pool.acquire() as conn:
        for i in range(7):
            await conn.execute(
                "INSERT INTO retrieval_runs (run_id, namespace, query, strategy, plan, candidate_ids, selected_ids,"
                " latencies, created_at) VALUES ($1, $2, 'q', 's', '{}', '{}', '{}', '{}', $3)",
                uuid.uuid4(),
                ns,
                old if i < 5 else datetime.now(UTC),
            )
            await conn.execute(
                "INSERT INTO feedback (namespace, external_id, negative, created_at) VALUES ($1, 'x', true, $2)",
                ns,
                old if i < 3 else datetime.now(UTC),
            )
    got = await purge_old(rt.pool, 30, batch=2)
    assert got["retrieval_runs"] >= 5 and got["feedback"] >= 3
    async with rt.pool.acquire() as conn:
        assert (
            await conn.fetchval("SELECT count(*) FROM retrieval_runs WHERE namespace = $1", ns) == 2
        )
        assert await conn.fetchval("SELECT count(*) FROM feedback WHERE namespace = $1", ns) == 4


async def test_eval_refuses_a_namespace_it_did_not_create(rt, ns, tmp_path):
    """`retrieval eval --namespace NS` deleted every memory of NS: it would wipe production."""
    from retrieval.evaluation import ForeignNamespace, ensure_index
    from retrieval.ingest.memory_in import parse_items

    await rt.writer.write(parse_items([{"id": "prod", "content": "本番のメモ"}]), ns)
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "e1", "content": "評価用の文書"}\n', encoding="utf-8")
    with pytest.raises(ForeignNamespace):
        await ensure_index(rt, corpus, ns, None)
    async with rt.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM memories WHERE namespace = $1", ns) == 1
    assert await ensure_index(rt, corpus, ns, None, force=True) is not None
    cached, _ = await ensure_index(rt, corpus, ns, None)  # now the harness's own: reused
    assert cached
