"""Errors of the PostgreSQL layer (the service maps them to its own statuses)."""

from __future__ import annotations


class RetrievalError(Exception):
    """Base of every error this service raises on purpose (retrieval.errors re-exports it).
    It lives in the lowest layer so that the db layer's errors are RetrievalErrors too."""


class NotFound(RetrievalError):
    """No such memory (or run, or job) in this namespace."""


class StoreError(RetrievalError):
    """Base of every error the db layer raises on purpose."""


class EmbeddingModelMismatch(StoreError):
    """The store's vectors came from another embedding model or dimension."""


class WriteConflict(StoreError):
    """A write kept losing deadlocks or serialisation races; nothing was written."""


class ImportInProgress(StoreError):
    """Another session is running the same import."""
