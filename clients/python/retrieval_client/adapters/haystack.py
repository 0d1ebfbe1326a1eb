"""The service as a Haystack component (`pip install 'retrieval-client[haystack]'`):

    from retrieval_client.adapters.haystack import OrchestratorRetriever
    retriever = OrchestratorRetriever(base_url="http://127.0.0.1:8000", namespace="agent-1")
    docs = retriever.run(query="出張はいつ？")["documents"]   # or in a (Async)Pipeline

Each `Document` has the memory's content, its id and the service's score; its `meta` has the
score, relevance, confidence, reason and highlight (`memory_metadata`). A pipeline that holds it
is saved with its settings (never its API key) and loads where this module is trusted:
`Pipeline.loads(text, allowed_modules=["retrieval_client.adapters.haystack"])`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict

from retrieval_client.adapters import Asking, memory_metadata
from retrieval_client.models import RetrieveResponse


def documents(response: RetrieveResponse) -> list[Document]:
    return [
        Document(id=r.id, content=r.content, meta=memory_metadata(r, response), score=r.score)
        for r in response.results
    ]


@component
class OrchestratorRetriever:
    """A Haystack component over the service's `POST /v1/retrieve`: `run` and `run_async`
    take the query (and `top_k`, the number of results) and give `documents`."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        namespace: str = "default",
        top_k: int | None = None,
        options: Mapping[str, Any] | None = None,
        api_key: str | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.asking = Asking(
            base_url=base_url, namespace=namespace, limit=top_k, options=options,
            api_key=api_key, timeout=timeout,
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        """Serialised with its settings (never the key: give it again when loading)."""
        a = self.asking
        return default_to_dict(
            self, base_url=a.base_url, namespace=a.namespace, top_k=a.limit,
            options=dict(a.options) if a.options else None, timeout=a.timeout,
        )  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OrchestratorRetriever:
        out: OrchestratorRetriever = default_from_dict(cls, data)
        return out

    @component.output_types(documents=list[Document])
    def run(self, query: str, top_k: int | None = None) -> dict[str, list[Document]]:
        return {"documents": documents(self.asking.ask(query, top_k))}

    @component.output_types(documents=list[Document])
    async def run_async(self, query: str, top_k: int | None = None) -> dict[str, list[Document]]:
        return {"documents": documents(await self.asking.aask(query, top_k))}
