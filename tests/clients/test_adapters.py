"""The light client's framework adapters, each with its real framework and a running service:
a LangChain chain, a LlamaIndex query engine and a Haystack pipeline retrieve through them,
sync and async, and get the framework's own documents with what the service said of each."""

from __future__ import annotations

import uuid

import pytest

from retrieval_client import RetrievalClient

MEMORIES = [
    {"id": "trip", "content": "来週の金曜に京都へ出張する。新幹線は朝7時発。"},
    {"id": "gym", "content": "ジムで一時間筋トレをした。スクワットを100回。"},
    {"id": "cat", "content": "My cat is called Mochi and she likes tuna."},
]
ASKED = {"京都への出張はいつ？": "trip", "What is my cat's name?": "cat"}
SAID = {"score", "relevance", "confidence", "window", "answered", "reason", "highlight", "id",
        "run_id", "event_start", "event_end"}  # fmt: skip


@pytest.fixture(scope="module")
def stored(served) -> tuple[str, str]:
    ns = f"adapters-{uuid.uuid4().hex[:8]}"
    with RetrievalClient(served) as c:
        c.remember(MEMORIES, namespace=ns)
    return served, ns


def _check(first_id: str, meta: dict, content: str, asked: str) -> None:
    assert first_id == ASKED[asked]
    assert set(meta) >= SAID and meta["id"] == first_id
    assert 0.0 <= meta["score"] <= 1.0 and meta["reason"] and meta["relevance"]
    # The answer's `answered` is carried, and agrees with the first result's label.
    assert meta["answered"] == (meta["relevance"] in ("high", "medium")), meta
    assert meta["window"] is None  # neither question names a time
    # when what it tells happens: the trip's words place it (next week's Friday), the cat's not
    if first_id == "trip":
        assert meta["event_start"] is not None and meta["event_end"] > meta["event_start"]
    else:
        assert meta["event_start"] is None and meta["event_end"] is None
    assert meta["highlight"] and meta["highlight"] in content
    assert content[meta["highlight_start"] : meta["highlight_end"]] == meta["highlight"]


async def test_a_langchain_chain_retrieves_through_it_sync_and_async(stored):
    from langchain_core.documents import Document
    from langchain_core.runnables import RunnableLambda

    from retrieval_client.adapters.langchain import OrchestratorRetriever

    url, ns = stored
    retriever = OrchestratorRetriever(base_url=url, namespace=ns, limit=2)
    chain = retriever | RunnableLambda(lambda docs: docs)
    for asked in ASKED:
        docs = chain.invoke(asked)
        assert isinstance(docs[0], Document) and len(docs) <= 2
        _check(docs[0].id, docs[0].metadata, docs[0].page_content, asked)
        adocs = await chain.ainvoke(asked)
        assert [d.id for d in adocs] == [d.id for d in docs]
        _check(adocs[0].id, adocs[0].metadata, adocs[0].page_content, asked)
    # Batched as LangChain batches: each question its own answer.
    batched = retriever.batch(list(ASKED))
    assert [b[0].id for b in batched] == list(ASKED.values())


async def test_a_llama_index_query_engine_retrieves_through_it_sync_and_async(stored):
    from llama_index.core.llms import MockLLM
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.schema import MetadataMode, NodeWithScore

    from retrieval_client.adapters.llama_index import OrchestratorRetriever

    url, ns = stored
    retriever = OrchestratorRetriever(url, ns, limit=2)
    engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM())
    for asked in ASKED:
        nodes = retriever.retrieve(asked)
        assert isinstance(nodes[0], NodeWithScore) and len(nodes) <= 2
        first = nodes[0]
        _check(first.node.node_id, first.node.metadata, first.node.get_content(), asked)
        assert first.score == first.node.metadata["score"]
        # What the service said stays out of what the LLM is shown.
        assert first.node.get_content(MetadataMode.LLM) == first.node.get_content()
        answer = engine.query(asked)
        assert answer.source_nodes[0].node.node_id == ASKED[asked]
        aanswer = await engine.aquery(asked)
        assert aanswer.source_nodes[0].node.node_id == ASKED[asked]
        anodes = await retriever.aretrieve(asked)
        assert [n.node.node_id for n in anodes] == [n.node.node_id for n in nodes]


async def test_a_haystack_pipeline_retrieves_through_it_sync_and_async(stored):
    from haystack import Document, Pipeline

    from retrieval_client.adapters.haystack import OrchestratorRetriever

    url, ns = stored
    pipe = Pipeline()
    pipe.add_component("memories", OrchestratorRetriever(base_url=url, namespace=ns, top_k=2))
    apipe = Pipeline()  # run asynchronously: the component's run_async
    apipe.add_component("memories", OrchestratorRetriever(base_url=url, namespace=ns))
    for asked in ASKED:
        docs = pipe.run({"memories": {"query": asked}})["memories"]["documents"]
        assert isinstance(docs[0], Document) and len(docs) <= 2
        _check(docs[0].id, docs[0].meta, docs[0].content, asked)
        assert docs[0].score == docs[0].meta["score"]
        got = await apipe.run_async({"memories": {"query": asked, "top_k": 1}})
        (adoc,) = got["memories"]["documents"]
        assert adoc.id == docs[0].id
    # A pipeline saved and loaded keeps the component's settings (and never an API key).
    module = OrchestratorRetriever.__module__  # Haystack loads only modules it is told to trust
    loaded = Pipeline.loads(pipe.dumps(), allowed_modules=[module])
    again = loaded.run({"memories": {"query": "京都への出張はいつ？"}})["memories"]["documents"]
    assert again[0].id == "trip" and "api_key" not in pipe.dumps()
