"""The configured embedding provider (RETRIEVAL_EMBEDDER), created once at start-up."""

from __future__ import annotations

from retrieval.embedding.base import Embedder
from retrieval.embedding.onnx_e5 import OnnxE5Embedder
from retrieval.embedding.openai import OpenAIEmbedder
from retrieval.embedding.scheduling.meter import EmbedMeter
from retrieval.errors import EmbeddingError
from retrieval.settings import Settings


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
            document_prefix="passage: " if e5 else "",  # e5's own word for a document
            query_deadline_s=settings.source_timeout_ms / 1000.0,
        )
    emb = OnnxE5Embedder(
        settings.embedding_model,
        query_threads=settings.embed_query_threads,
        cache_dir=settings.model_cache_dir,
    )
    if emb.dim != settings.embedding_dim:
        raise EmbeddingError(
            f"{settings.embedder} gives {emb.dim}-d vectors but "
            f"RETRIEVAL_EMBEDDING_DIM={settings.embedding_dim}"
        )
    return emb


__all__ = [
    "EmbedMeter",
    "Embedder",
    "OnnxE5Embedder",
    "OpenAIEmbedder",
    "create_embedder",
]
