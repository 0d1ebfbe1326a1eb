"""The service as a LangChain retriever (`pip install 'retrieval-client[langchain]'`):

    from retrieval_client.adapters.langchain import OrchestratorRetriever
    retriever = OrchestratorRetriever(base_url="http://127.0.0.1:8000", namespace="agent-1")
    docs = retriever.invoke("出張はいつ？")          # or: await retriever.ainvoke(...)

Each `Document` has the memory's content as `page_content`, its id as `id`, and in `metadata`
the service's score, relevance, confidence, reason and highlight (`memory_metadata`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, PrivateAttr

from retrieval_client.adapters import Asking, memory_metadata
from retrieval_client.client import AsyncRetrievalClient, RetrievalClient
from retrieval_client.models import RetrieveResponse


def documents(response: RetrieveResponse) -> list[Document]:
    return [
        Document(page_content=r.content, id=r.id, metadata=memory_metadata(r, response))
        for r in response.results
    ]


class OrchestratorRetriever(BaseRetriever):
    """A LangChain `BaseRetriever` over the service's `POST /v1/retrieve`, sync and async."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    base_url: str = "http://127.0.0.1:8000"
    namespace: str = "default"
    limit: int | None = None
    options: Mapping[str, Any] | None = None
    api_key: str | None = None
    timeout: float = 30.0
    client: RetrievalClient | None = None
    async_client: AsyncRetrievalClient | None = None
    _asking: Asking | None = PrivateAttr(default=None)

    def _ask(self) -> Asking:
        if self._asking is None:
            # The retriever's settings are Asking's, by the same names.
            self._asking = Asking(
                **{f.name: getattr(self, f.name) for f in fields(Asking) if f.init}
            )
        return self._asking

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return documents(self._ask().ask(query))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        return documents(await self._ask().aask(query))
