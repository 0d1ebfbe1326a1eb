"""The service as a LlamaIndex retriever (`pip install 'retrieval-client[llama-index]'`):

    from retrieval_client.adapters.llama_index import OrchestratorRetriever
    retriever = OrchestratorRetriever(base_url="http://127.0.0.1:8000", namespace="agent-1")
    nodes = retriever.retrieve("出張はいつ？")       # or: await retriever.aretrieve(...)

Each `NodeWithScore` holds a `TextNode` (the memory's content, its id as `id_`) and the
service's score; the node's `metadata` has the score, relevance, confidence, reason and
highlight (`memory_metadata`), kept out of what an LLM or an embedder is shown of the node."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from retrieval_client.adapters import Asking, memory_metadata
from retrieval_client.client import AsyncRetrievalClient, RetrievalClient
from retrieval_client.models import RetrieveResponse


def nodes(response: RetrieveResponse) -> list[NodeWithScore]:
    out = []
    for r in response.results:
        meta = memory_metadata(r, response)
        hidden = list(meta)  # what the service said is for the assembler, not the prompt
        node = TextNode(
            id_=r.id,
            text=r.content,
            metadata=meta,
            excluded_llm_metadata_keys=hidden,
            excluded_embed_metadata_keys=hidden,
        )
        out.append(NodeWithScore(node=node, score=r.score))
    return out


class OrchestratorRetriever(BaseRetriever):
    """A LlamaIndex `BaseRetriever` over the service's `POST /v1/retrieve`, sync and async."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        namespace: str = "default",
        *,
        limit: int | None = None,
        options: Mapping[str, Any] | None = None,
        api_key: str | None = None,
        timeout: float = 30.0,
        client: RetrievalClient | None = None,
        async_client: AsyncRetrievalClient | None = None,
        **kwargs: Any,
    ) -> None:
        self.asking = Asking(
            base_url=base_url, namespace=namespace, limit=limit, options=options,
            api_key=api_key, timeout=timeout, client=client, async_client=async_client,
        )  # fmt: skip
        super().__init__(**kwargs)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return nodes(self.asking.ask(query_bundle.query_str))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return nodes(await self.asking.aask(query_bundle.query_str))
