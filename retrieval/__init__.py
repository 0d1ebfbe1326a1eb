"""Retrieval Orchestrator: Japanese-first memory retrieval over PostgreSQL + pgvector."""

from retrieval.analyzer import QueryAnalyzer
from retrieval.config import Settings
from retrieval.errors import (
    EmbeddingModelMismatch,
    InvalidInput,
    NotFound,
    RetrievalError,
    StoreUnavailable,
)
from retrieval.ingest import IngestReport, MemoryIn, ingest
from retrieval.models import (
    QueryIntent,
    QueryType,
    RetrievalOptions,
    RetrievalResponse,
    Source,
    Strategy,
    TimeRange,
)
from retrieval.orchestrator import Orchestrator
from retrieval.runtime import Runtime, open_runtime

__all__ = [
    "EmbeddingModelMismatch",
    "IngestReport",
    "InvalidInput",
    "MemoryIn",
    "NotFound",
    "Orchestrator",
    "QueryAnalyzer",
    "QueryIntent",
    "QueryType",
    "RetrievalError",
    "RetrievalOptions",
    "RetrievalResponse",
    "Runtime",
    "Settings",
    "Source",
    "Strategy",
    "StoreUnavailable",
    "TimeRange",
    "ingest",
    "open_runtime",
]
