"""The Retrieval Orchestrator's Python client: `RetrievalClient` (blocking) and
`AsyncRetrievalClient` (asyncio), the API's answer models, and an exception per refusal.

It depends on httpx and pydantic only, and importing it changes nothing in the caller's
process (no environment variable, no thread, no logging setup).
"""

from retrieval_client.client import RETRY_STATUSES, AsyncRetrievalClient, RetrievalClient
from retrieval_client.errors import (
    ApiError,
    BadResponse,
    Forbidden,
    InvalidRequest,
    NotFound,
    RateLimited,
    TooLarge,
    Unauthorized,
    Unavailable,
    Unreachable,
)
from retrieval_client.models import (
    AnsweredOut,
    ArchivedOut,
    ErasedOut,
    EventTimeOut,
    FeedbackOut,
    IngestOut,
    JobOut,
    MemoryOut,
    MemoryPage,
    PurgeOut,
    Relevance,
    ResultOut,
    RetrieveResponse,
    RunOut,
    SourceStatus,
    Strategy,
    WindowPlace,
)

__version__ = "0.1.0"

__all__ = [
    "RETRY_STATUSES",
    "ApiError",
    "AnsweredOut",
    "ArchivedOut",
    "AsyncRetrievalClient",
    "BadResponse",
    "ErasedOut",
    "FeedbackOut",
    "Forbidden",
    "IngestOut",
    "InvalidRequest",
    "JobOut",
    "EventTimeOut",
    "MemoryOut",
    "MemoryPage",
    "NotFound",
    "PurgeOut",
    "RateLimited",
    "Relevance",
    "ResultOut",
    "RetrievalClient",
    "RetrieveResponse",
    "RunOut",
    "SourceStatus",
    "Strategy",
    "TooLarge",
    "Unauthorized",
    "Unavailable",
    "Unreachable",
    "WindowPlace",
]
