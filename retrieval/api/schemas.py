"""Request bodies of the HTTP API (pydantic at the edge); the answers are the light client's
models (`retrieval_client.models`, defined once, re-exported here for the routes).

Hostile input is refused here, by field: NUL characters and lone surrogates in any string,
NaN/Infinity and deep or huge metadata, times outside 1900-2200 or without an offset, ids
that a URL cannot address, duplicate ids in a batch. Sizes that the deployment configures
(query length, result limit, batch and conversation sizes) are checked by the request rules
(retrieval.validation) and written into the OpenAPI document by `document_limits`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, model_validator

from retrieval.errors import InvalidInput
from retrieval.ingest.memory_in import MAX_ID_CHARS, Instant, MemoryIn, SafeId, SafeStr
from retrieval.models import Strategy
from retrieval.settings import Settings
from retrieval.validation import (
    MAX_BUDGET_CHARS,
    MAX_CONTEXT_WINDOW,
    MAX_NAMESPACE_CHARS,
    NAMESPACE_PATTERN,
)
from retrieval_client.models import (
    JobOut,
    Problem,
)

# The largest token budget a request can name.
MAX_TOKENS = 10**12

UUID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"


class StrictIn(BaseModel):
    """A request body: a key it does not know is refused by name (a typo such as
    `options.limt` would otherwise be a default silently used)."""

    model_config = ConfigDict(extra="forbid")


# A number or a flag as JSON writes it: `true` is not 1, nor "5" five.
Count = Annotated[int, Strict()]
Flag = Annotated[bool, Strict()]

NamespaceStr = Annotated[
    str, Field(min_length=1, max_length=MAX_NAMESPACE_CHARS, pattern=NAMESPACE_PATTERN)
]
Label = Annotated[SafeStr, Field(min_length=1, max_length=64)]


class Message(StrictIn):
    role: Literal["user", "assistant", "system"]
    content: SafeStr
    memory_id: SafeId | None = Field(
        default=None,
        max_length=MAX_ID_CHARS,
        description="The stored memory this turn is: its links seed the search.",
    )


class TimeRangeIn(StrictIn):
    start: Instant | None = None
    end: Instant | None = None
    clock: Literal["written", "event", "either"] = Field(
        default="written",
        description="What the range filters by: written (default) when the memory was "
        "written (created_at); event when what it tells happened (its event_time; a memory "
        "whose words place nothing happened when it was written); either: one or the other.",
    )

    @model_validator(mode="after")
    def _given(self) -> TimeRangeIn:  # start < end: check_request, for every caller
        if self.start is None and self.end is None:
            raise ValueError("give start, end or both")
        return self


# A PostgreSQL WAL position as pg_current_wal_lsn() prints it.
LSN_PATTERN = r"^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$"


class RetrieveOptionsIn(StrictIn):
    force_strategy: Strategy | None = None
    limit: Count = 10  # 1..RETRIEVAL_MAX_LIMIT: check_request (document_limits shows it)
    time_range: TimeRangeIn | None = Field(
        default=None,
        description="Hard filter: by created_at, or by when what a memory tells happened "
        "(`clock`); also the window the results are ranked in.",
    )
    memory_types: list[Label] = Field(default_factory=list, max_length=20)
    source_types: list[Label] = Field(default_factory=list, max_length=20)
    include_metadata_details: Flag = True
    now: Instant | None = Field(
        default=None, description="Resolve time words against this instant."
    )
    timezone: Annotated[SafeStr, Field(min_length=1, max_length=64)] | None = Field(
        default=None,
        description="An IANA time zone (Europe/London, UTC): the calendar the question's time "
        "words (yesterday, 3 June, 先週) are read in, and a naive `now`; default the service's "
        "RETRIEVAL_TIMEZONE.",
    )
    expand: Flag = Field(
        default=True,
        description="Multi-hop expansion (links, entities, threads) after the first search.",
    )
    diversify_by: Annotated[SafeStr, Field(min_length=1, max_length=64)] | None = Field(
        default=None,
        description="A metadata key: at most per_bucket results per value before any repeats.",
    )
    per_bucket: Count = Field(default=2, ge=1, le=100)
    context_window: Count = Field(
        default=1,
        ge=0,
        le=MAX_CONTEXT_WINDOW,
        description="How many memories before and after each result (in its thread, else its "
        "reply chain) come with it, in its `context`; 0 = none.",
    )
    after_lsn: str | None = Field(
        default=None,
        pattern=LSN_PATTERN,
        description="Read your writes: the `lsn` a POST /v1/memories answered with; a read "
        "replica answers only once it has replayed that far (else the primary does).",
    )
    max_chars: Count | None = Field(
        default=None,
        description="A budget: at most this many characters of content (and context) in all the "
        "results. Best first, each result whole when it fits, else as its highlight (`cut`), "
        "else left out; `metadata.budget` says which.",
    )
    max_tokens: Count | None = Field(
        default=None,
        ge=1,
        # Any more is no budget at all (at most MAX_BUDGET_CHARS characters are ever returned);
        # far more was a float overflow (500) in the product below.
        le=MAX_TOKENS,
        description="A budget in tokens, counted as `chars_per_token` characters a token "
        "(required with it); with max_chars too, the smaller budget holds.",
    )
    chars_per_token: float | None = Field(
        default=None,
        gt=0,
        le=100,
        description="How many characters the caller's tokenizer puts in a token (for max_tokens).",
    )
    add_sources: list[Literal["recent", "states", "vector_global"]] = Field(
        default_factory=list,
        max_length=3,
        description="Also search the newest memories, the newest states, or older similar memories "
        "(the exploration slot: older than 90 days).",
    )

    def budget_chars(self) -> int | None:
        """The character budget max_chars and max_tokens set (the smaller), or None."""
        budgets = [self.max_chars] if self.max_chars is not None else []
        if self.max_tokens is not None:
            if self.chars_per_token is None:
                raise InvalidInput(
                    [
                        {
                            "field": "options.chars_per_token",
                            "reason": "required with options.max_tokens: how many characters "
                            "a token holds for your tokenizer",
                        }
                    ]
                )
            chars = max(1, int(self.max_tokens * self.chars_per_token))
            if chars > MAX_BUDGET_CHARS:
                raise InvalidInput(
                    [
                        {
                            "field": "options.max_tokens",
                            "reason": f"max_tokens x chars_per_token must be at most "
                            f"{MAX_BUDGET_CHARS} characters",
                        }
                    ]
                )
            budgets.append(chars)
        return min(budgets) if budgets else None


class RetrieveRequest(StrictIn):
    # Not blank, at most RETRIEVAL_MAX_QUERY_CHARS: retrieval.validation.check_request, the one
    # place for a request's rules (the CLI and the library go through it too); document_limits
    # shows them.
    query: SafeStr
    namespace: NamespaceStr = "default"
    recent_conversation: list[Message] = Field(default_factory=list)
    options: RetrieveOptionsIn = Field(default_factory=RetrieveOptionsIn)


class MemoriesIn(StrictIn):
    namespace: NamespaceStr = "default"
    memories: list[MemoryIn] = Field(min_length=1)


# Memories a listing's page holds at most (GET /v1/memories?limit=).
MAX_PAGE = 1000


class EraseIn(StrictIn):
    """POST /v1/memories/erase: the memories to erase."""

    namespace: NamespaceStr = "default"
    ids: list[Annotated[SafeId, Field(min_length=1, max_length=MAX_ID_CHARS)]] = Field(min_length=1)


class FeedbackIn(StrictIn):
    namespace: NamespaceStr = "default"
    memory_id: SafeId = Field(min_length=1, max_length=MAX_ID_CHARS)
    run_id: str | None = Field(default=None, pattern=UUID_PATTERN)
    negative: Flag = True
    comment: SafeStr | None = Field(default=None, max_length=2000)


COMMON_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {
        "model": Problem,
        "description": "API keys are configured and none was given, or an unknown one",
    },
    403: {"model": Problem, "description": "the API key may not use this namespace"},
    413: {"model": Problem, "description": "request body over RETRIEVAL_MAX_BODY_BYTES"},
    415: {
        "model": Problem,
        "description": "a JSON route's body sent without Content-Type: application/json",
    },
    503: {
        "model": Problem,
        "description": "the database is unavailable or did not answer in time; see Retry-After",
    },
}


NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": Problem, "description": "no such memory, run or job in this namespace"}
}

QUEUED: dict[int | str, dict[str, Any]] = {
    202: {
        "model": JobOut,
        "description": "the batch needs more embedding than one request should wait for "
        "(RETRIEVAL_INLINE_EMBED_S): it is stored as a job and written in the background; "
        "follow Location (GET /v1/jobs/{id}) until its state is done",
    },
    429: {
        "model": Problem,
        "description": "the caller (its API key; without keys, its namespace) has "
        "RETRIEVAL_MAX_OPEN_JOBS write jobs unfinished, or has used its share of the service's "
        "processing time; see Retry-After",
    },
}


OVER_SHARE: dict[int | str, dict[str, Any]] = {
    429: {
        "model": Problem,
        "description": "the caller (its API key; without keys, its namespace) has used its share "
        "of the service's processing time (RETRIEVAL_TENANT_CPU_SHARE) for longer than "
        "RETRIEVAL_TENANT_MAX_WAIT_S: see Retry-After",
    },
}


def retrieve_body_limit(settings: Settings) -> int:
    """POST /v1/retrieve's body limit, from its text limits (query, conversation, a memory_id
    per message), every character counted as a JSON escape (6 bytes), and 64 KiB for the rest;
    never above max_body_bytes. A retrieval body cannot make the service parse megabytes of
    text it does not read."""
    chars = (
        settings.max_query_chars
        + settings.max_conversation_chars
        + settings.max_conversation_messages * MAX_ID_CHARS
    )
    return min(settings.max_body_bytes, 6 * chars + 64 * 1024)


def document_limits(schema: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """Write the configured limits into the OpenAPI document, where clients and fuzzers read them."""
    comps = schema.get("components", {}).get("schemas", {})

    def put(model: str, field: str, **bounds: Any) -> None:
        prop = comps.get(model, {}).get("properties", {}).get(field)
        if prop is not None:
            prop.update(bounds)

    put("RetrieveRequest", "query", minLength=1, maxLength=settings.max_query_chars)
    put("RetrieveRequest", "recent_conversation", maxItems=settings.max_conversation_messages)
    put("Message", "content", maxLength=settings.max_message_chars)
    put("RetrieveOptionsIn", "limit", minimum=1, maximum=settings.max_limit)
    put("MemoriesIn", "memories", maxItems=settings.max_batch)
    put("EraseIn", "ids", maxItems=settings.max_batch)
    return schema
