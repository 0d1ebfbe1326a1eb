"""Retrievers for the frameworks context assemblers are written with, each an optional extra of
the client (the base install brings none of them):

- `retrieval_client.adapters.langchain.OrchestratorRetriever`: a LangChain `BaseRetriever`
  (`pip install 'retrieval-client[langchain]'`);
- `retrieval_client.adapters.llama_index.OrchestratorRetriever`: a LlamaIndex retriever
  (`[llama-index]`);
- `retrieval_client.adapters.haystack.OrchestratorRetriever`: a Haystack component
  (`[haystack]`).

Each asks the service (`POST /v1/retrieve`) and returns the framework's own documents, in the
service's order, each with the memory's text and, in its metadata, what the service said of it
(`memory_metadata`). This module imports no framework."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from retrieval_client.client import AsyncRetrievalClient, RetrievalClient
from retrieval_client.models import ResultOut, RetrieveResponse


def memory_metadata(result: ResultOut, response: RetrieveResponse) -> dict[str, Any]:
    """What a framework document's metadata holds for one result: its id, `score` (the ranking's,
    0-1), `relevance` (high, medium or low: how likely it answers), `confidence` (the same as a
    probability, 0-1, or None), `window` (inside, near or outside the time window the question
    named, or None), `answered` (whether anything answers the question: the answer's, the same
    on every document of one answer; None from a service without the confidence), `reason` (why
    it was chosen), `highlight` (the part that answers, with `highlight_start`/`highlight_end`
    in the content), when and what it is (`event_start`/`event_end`: when what it tells
    happened, read from its words, or None), the memory's own metadata, and the request's
    `run_id` (for feedback)."""
    h = result.highlight
    meta = response.metadata
    answered = meta.answered if meta is not None else None
    return {
        "id": result.id,
        "score": result.score,
        "relevance": getattr(result.relevance, "value", result.relevance),
        "confidence": result.confidence,
        "window": getattr(result.window, "value", result.window),
        "answered": answered.answered if answered is not None else None,
        "reason": result.reason,
        "highlight": h.text if h is not None else None,
        "highlight_start": h.start if h is not None else None,
        "highlight_end": h.end if h is not None else None,
        "title": result.title,
        "created_at": result.created_at.isoformat(),
        "event_start": ev.start.isoformat() if (ev := result.event_time) is not None else None,
        "event_end": ev.end.isoformat() if ev is not None else None,
        "memory_type": result.memory_type,
        "source_type": result.source_type,
        "sources": list(result.sources),
        "metadata": dict(result.metadata),
        "run_id": meta.run_id if meta is not None else None,
    }


@dataclass
class Asking:
    """Where and how an adapter asks: the service's URL, the namespace, how many results, the
    API's `options` (time_range, context_window ...), the key, the timeout. Given a client
    (`client`, `async_client`), it asks through it; else it opens its own: one blocking client
    kept for its life, an asynchronous one per call (an event loop owns its connections)."""

    base_url: str = "http://127.0.0.1:8000"
    namespace: str = "default"
    limit: int | None = None
    options: Mapping[str, Any] | None = None
    api_key: str | None = None
    timeout: float = 30.0
    client: RetrievalClient | None = None
    async_client: AsyncRetrievalClient | None = None
    _own: RetrievalClient | None = field(default=None, init=False, repr=False)

    def ask(self, query: str, limit: int | None = None) -> RetrieveResponse:
        client = self.client or self._owned()
        return client.retrieve(
            query, self.namespace, limit=limit or self.limit, options=self.options
        )

    async def aask(self, query: str, limit: int | None = None) -> RetrieveResponse:
        if self.async_client is not None:
            return await self._aask(self.async_client, query, limit)
        async with AsyncRetrievalClient(
            self.base_url, api_key=self.api_key, timeout=self.timeout
        ) as client:
            return await self._aask(client, query, limit)

    async def _aask(
        self, client: AsyncRetrievalClient, query: str, limit: int | None
    ) -> RetrieveResponse:
        return await client.retrieve(
            query, self.namespace, limit=limit or self.limit, options=self.options
        )

    def _owned(self) -> RetrievalClient:
        if self._own is None:
            self._own = RetrievalClient(self.base_url, api_key=self.api_key, timeout=self.timeout)
        return self._own

    def close(self) -> None:
        """Close the blocking client this opened (one given is the caller's to close)."""
        if self._own is not None:
            self._own.close()
            self._own = None
