"""The service's refusals, one exception per HTTP status, each with the status and `detail`; and
the failures that are not a refusal (no answer, an answer that is not the API's): every failure
of a call is an ApiError."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """The service refused a request: `status` and its `detail` (text, or the field list)."""

    def __init__(self, status: int, detail: Any, retry_after_s: float | None = None) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail
        self.retry_after_s = retry_after_s


class InvalidRequest(ApiError):
    """422: `fields` names what was wrong (e.g. "memories.3.created_at")."""

    @property
    def fields(self) -> list[str]:
        if isinstance(self.detail, list):
            return [str(d.get("field", "")) for d in self.detail if isinstance(d, dict)]
        return []


class Unauthorized(ApiError):
    """401: no API key, or an unknown one."""


class Forbidden(ApiError):
    """403: the key may not use this namespace."""


class NotFound(ApiError):
    """404: no such memory, run or job (in this namespace)."""


class TooLarge(ApiError):
    """413: the body is over the service's limit."""


class RateLimited(ApiError):
    """429: the tenant has used its share, or has too many writes queued."""


class Unavailable(ApiError):
    """503: the database or the embedding provider is down; nothing was written."""


class Unreachable(ApiError):
    """No answer at all (refused, reset, timed out, a name that does not resolve), after the
    retries allowed: `status` 0, the transport's error as `detail` and `__cause__`."""


class BadResponse(ApiError):
    """An answer that is not the API's (not JSON, not an object, not the expected fields):
    a proxy's page, a newer or older service that changed a field's meaning."""


BY_STATUS: dict[int, type[ApiError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    413: TooLarge,
    422: InvalidRequest,
    429: RateLimited,
    503: Unavailable,
}

__all__ = [
    "BY_STATUS",
    "ApiError",
    "Forbidden",
    "InvalidRequest",
    "NotFound",
    "RateLimited",
    "BadResponse",
    "TooLarge",
    "Unauthorized",
    "Unavailable",
    "Unreachable",
]
