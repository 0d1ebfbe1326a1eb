"""One error base for the service, with the few kinds callers need to tell apart."""

from __future__ import annotations

# The root and the db layer's errors, re-exported: callers of the service catch them from here.
from db.errors import EmbeddingModelMismatch, NotFound, RetrievalError, StoreError, WriteConflict

__all__ = [
    "EmbeddingModelMismatch",
    "Forbidden",
    "InvalidInput",
    "NotFound",
    "Overloaded",
    "RetrievalError",
    "StoreError",
    "StoreUnavailable",
    "Unauthorized",
    "WriteConflict",
    "EmbeddingError",
]


class InvalidInput(RetrievalError):
    """Bad input from a caller: names the field (and line or item) and the reason."""

    def __init__(self, errors: list[dict[str, object]]) -> None:
        self.errors = errors
        first = errors[0] if errors else {}
        where = (
            f"line {first['line']}: "
            if "line" in first
            else (f"item {first['index']}: " if "index" in first else "")
        )
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(f"{where}{first.get('field', '')}: {first.get('reason', 'invalid')}{more}")


class Overloaded(RetrievalError):
    """The caller has as much work waiting as it may; it should retry later (429), after
    `retry_after_s` when known."""

    def __init__(self, message: str, *, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class StoreUnavailable(RetrievalError):
    """PostgreSQL cannot be reached or refused the work."""


class EmbeddingError(RetrievalError):
    """The embedding provider failed or returned something unusable."""


class Unauthorized(RetrievalError):
    """No API key, or one the service does not know."""


class Forbidden(RetrievalError):
    """The API key may not use this namespace."""
