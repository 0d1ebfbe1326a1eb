"""Request and response bodies of the HTTP API (pydantic at the edge).

Hostile input is refused here, by field: NUL characters and lone surrogates in any string,
NaN/Infinity and deep or huge metadata, times outside 1900-2200 or without an offset, ids
that a URL cannot address, duplicate ids in a batch. Sizes that the deployment configures
(query length, result limit, batch and conversation sizes) are checked against `Settings` by
`check_limits` and written into the OpenAPI document by `document_limits`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_serializer,
    field_validator,
    model_validator,
)

from retrieval.config import Settings
from retrieval.context import MAX_CONTEXT_WINDOW
from retrieval.errors import InvalidInput
from retrieval.ingest import MAX_ID_CHARS, MemoryIn
from retrieval.models import QueryIntent, Relevance, SourceStatus, Strategy
from retrieval.passages.budget import MAX_BUDGET_CHARS
from retrieval.validation import (
    MAX_NAMESPACE_CHARS,
    NAMESPACE_PATTERN,
    Instant,
    SafeId,
    SafeStr,
    duplicate_ids,
)

UUID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"

NamespaceStr = Annotated[
    str, Field(min_length=1, max_length=MAX_NAMESPACE_CHARS, pattern=NAMESPACE_PATTERN)
]
Label = Annotated[SafeStr, Field(min_length=1, max_length=64)]


class Message(BaseModel):
    role: Literal["user", "assistant", "system"]
    content: SafeStr
    memory_id: SafeId | None = Field(
        default=None,
        max_length=MAX_ID_CHARS,
        description="The stored memory this turn is: its links seed the search.",
    )


class TimeRangeIn(BaseModel):
    start: Instant | None = None
    end: Instant | None = None

    @model_validator(mode="after")
    def _given(self) -> TimeRangeIn:  # start < end: Orchestrator.validate, for every caller
        if self.start is None and self.end is None:
            raise ValueError("give start, end or both")
        return self


# A PostgreSQL WAL position as pg_current_wal_lsn() prints it.
LSN_PATTERN = r"^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$"


class RetrieveOptionsIn(BaseModel):
    force_strategy: Strategy | None = None
    limit: int = 10  # 1..RETRIEVAL_MAX_LIMIT: Orchestrator.validate (document_limits shows it)
    time_range: TimeRangeIn | None = Field(default=None, description="Hard filter on created_at.")
    memory_types: list[Label] = Field(default_factory=list, max_length=20)
    source_types: list[Label] = Field(default_factory=list, max_length=20)
    include_metadata_details: bool = True
    now: Instant | None = Field(
        default=None, description="Resolve time words against this instant."
    )
    timezone: Annotated[SafeStr, Field(min_length=1, max_length=64)] | None = Field(
        default=None,
        description="An IANA time zone (Europe/London, UTC): the calendar the question's time "
        "words (yesterday, 3 June, 先週) are read in, and a naive `now`; default the service's "
        "RETRIEVAL_TIMEZONE.",
    )
    expand: bool = Field(
        default=True,
        description="Multi-hop expansion (links, entities, threads) after the first search.",
    )
    diversify_by: Annotated[SafeStr, Field(min_length=1, max_length=64)] | None = Field(
        default=None,
        description="A metadata key: at most per_bucket results per value before any repeats.",
    )
    per_bucket: int = Field(default=2, ge=1, le=100)
    context_window: int = Field(
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
    max_chars: int | None = Field(
        default=None,
        description="A budget: at most this many characters of content (and context) in all the "
        "results. Best first, each result whole when it fits, else as its highlight (`cut`), "
        "else left out; `metadata.budget` says which.",
    )
    max_tokens: int | None = Field(
        default=None,
        ge=1,
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


class RetrieveRequest(BaseModel):
    # Not blank, at most RETRIEVAL_MAX_QUERY_CHARS: Orchestrator.validate, the one place for a
    # query's rules (the CLI and the library go through it too); document_limits shows them.
    query: SafeStr
    namespace: NamespaceStr = "default"
    recent_conversation: list[Message] = Field(default_factory=list)
    options: RetrieveOptionsIn = Field(default_factory=RetrieveOptionsIn)


class ContextOut(BaseModel):
    """A memory beside a result: position -1 is just before it, 1 just after."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    content: str
    title: str | None
    memory_type: str
    created_at: datetime
    position: int


class HighlightOut(BaseModel):
    """The part of the content that answers: content[start:end] of the stored memory."""

    model_config = ConfigDict(from_attributes=True)

    start: int
    end: int
    text: str


class BudgetOut(BaseModel):
    """How the results were fitted into the budget (options.max_chars / max_tokens)."""

    model_config = ConfigDict(from_attributes=True)

    max_chars: int
    used_chars: int
    whole: int = Field(description="Results returned whole.")
    cut: list[str] = Field(description="Ids returned as their highlight only.")
    omitted: list[str] = Field(description="Ids left out: not even their highlight fitted.")


class ResultOut(BaseModel):
    """One result, read from the core's RetrievalResult (no copy of its fields elsewhere)."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    content: str
    title: str | None
    memory_type: str
    source_type: str
    metadata: dict[str, Any]
    created_at: datetime
    score: float
    signals: dict[str, float]
    sources: list[str]
    relevance: Relevance = Field(
        description="high | medium | near_window (a fuzzy window's soft edge) | outside_window"
    )
    reason: str
    context: list[ContextOut] = Field(
        default_factory=list,
        description="The memories around it in its thread or reply chain (options.context_window).",
    )
    highlight: HighlightOut | None = Field(
        default=None,
        description="The part of the content that answers, with its character offsets (the "
        "whole content for a memory of one passage).",
    )
    cut: bool = Field(
        default=False,
        description="`content` is only the highlight: the whole did not fit the budget.",
    )

    @field_serializer("score")
    def _score(self, v: float) -> float:
        return round(v, 6)

    @field_serializer("signals")
    def _signals(self, v: dict[str, float]) -> dict[str, float]:
        return {k: round(x, 6) for k, x in v.items()}


class SourceOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    latency_ms: float
    count: int
    status: SourceStatus = Field(
        description="ok | skipped (nothing to search for) | timeout | error | unavailable (the server lacks it)"
    )
    error: str | None

    @field_serializer("latency_ms")
    def _ms(self, v: float) -> float:
        return round(v, 3)


class MetadataOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    strategy_used: Strategy
    query_intent: dict[str, Any]
    total_latency_ms: float
    search_breakdown: dict[str, SourceOut]
    stage_latency_ms: dict[str, float]
    num_results_before_rerank: int
    num_results_after_rerank: int
    degraded: list[str] = Field(
        description="Sources that timed out or failed: the answer is partial."
    )
    run_id: str
    params: dict[str, Any]
    budget: BudgetOut | None = Field(
        default=None, description="With a budget: what it let through (else null)."
    )

    @field_validator("query_intent", mode="before")
    @classmethod
    def _intent(cls, v: Any) -> Any:
        return v.to_json() if isinstance(v, QueryIntent) else v

    @field_serializer("total_latency_ms")
    def _total(self, v: float) -> float:
        return round(v, 3)

    @field_serializer("stage_latency_ms")
    def _stages(self, v: dict[str, float]) -> dict[str, float]:
        return {k: round(x, 3) for k, x in v.items()}


class RetrieveResponse(BaseModel):
    """The answer: read from the core's RetrievalResponse with `model_validate`."""

    model_config = ConfigDict(from_attributes=True)

    results: list[ResultOut]
    metadata: MetadataOut | None


class MemoriesIn(BaseModel):
    namespace: NamespaceStr = "default"
    memories: list[MemoryIn] = Field(min_length=1)


class IngestOut(BaseModel):
    namespace: str
    received: int
    inserted: int
    updated: int
    embedded: int
    ids: list[str]
    seconds: float
    stage_seconds: dict[str, float] = Field(
        default_factory=dict,
        description="where the time went: lookup, analyse, embed, write (the transaction)",
    )
    lsn: str | None = Field(
        default=None, description="the primary's WAL position after the write (with replicas)"
    )


class JobOut(BaseModel):
    """A write queued because its embedding takes longer than one request should."""

    id: str
    namespace: str
    state: Literal["queued", "running", "done", "failed"]
    received: int
    ids: list[str] = Field(description="the memories' ids, fixed when the job was accepted")
    estimate_s: float = Field(description="the embedding time estimated when it was accepted")
    attempts: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    report: IngestOut | None = Field(description="what was written, once done")
    error: str | None = Field(
        description="why the last attempt failed (queued: it is tried again; failed: given up)"
    )


class FeedbackIn(BaseModel):
    namespace: NamespaceStr = "default"
    memory_id: SafeId = Field(min_length=1, max_length=MAX_ID_CHARS)
    run_id: str | None = Field(default=None, pattern=UUID_PATTERN)
    negative: bool = True
    comment: SafeStr | None = Field(default=None, max_length=2000)


class MemoryOut(BaseModel):
    id: str
    namespace: str
    content: str
    title: str | None
    memory_type: str
    source_type: str
    metadata: dict[str, Any]
    created_at: datetime
    ingested_at: datetime
    expires_at: datetime | None
    is_archived: bool
    searchable: bool


class ArchivedOut(BaseModel):
    id: str
    namespace: str
    archived: bool


class FeedbackOut(BaseModel):
    id: str
    namespace: str
    searchable: bool


class RunOut(BaseModel):
    run_id: str
    namespace: str
    query: str
    strategy: str
    plan: dict[str, Any]
    candidate_ids: list[str]
    selected_ids: list[str]
    latencies: dict[str, Any]
    degraded: list[str]
    created_at: datetime


class Problem(BaseModel):
    """An error: `detail` is a message, or a list of {loc, field, msg} for invalid input."""

    detail: str | list[dict[str, Any]]


COMMON_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {
        "model": Problem,
        "description": "API keys are configured and none was given, or an unknown one",
    },
    403: {"model": Problem, "description": "the API key may not use this namespace"},
    413: {"model": Problem, "description": "request body over RETRIEVAL_MAX_BODY_BYTES"},
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
        "description": "the namespace has RETRIEVAL_MAX_OPEN_JOBS write jobs unfinished; see "
        "Retry-After",
    },
}


OVER_SHARE: dict[int | str, dict[str, Any]] = {
    429: {
        "model": Problem,
        "description": "the namespace has used its share of the service's processing time "
        "(RETRIEVAL_TENANT_CPU_SHARE) for longer than RETRIEVAL_TENANT_MAX_WAIT_S: see Retry-After",
    },
}


def check_limits(settings: Settings, body: BaseModel) -> None:
    """The configured sizes a body must keep to (the orchestrator checks query and limit)."""
    errors: list[dict[str, object]] = []
    if isinstance(body, RetrieveRequest):
        conv = body.recent_conversation
        if len(conv) > settings.max_conversation_messages:
            errors.append(
                {
                    "field": "recent_conversation",
                    "reason": f"more than {settings.max_conversation_messages} messages",
                }
            )
        for i, msg in enumerate(conv):
            if len(msg.content) > settings.max_message_chars:
                errors.append(
                    {
                        "field": f"recent_conversation.{i}.content",
                        "reason": f"longer than {settings.max_message_chars} characters",
                    }
                )
        total = sum(len(msg.content) for msg in conv)
        if total > settings.max_conversation_chars and not errors:
            errors.append(
                {
                    "field": "recent_conversation",
                    "reason": f"{total} characters in all, more than "
                    f"{settings.max_conversation_chars}: send the last turns (the service "
                    "reads the end of the last messages and every message's memory_id)",
                }
            )
    if isinstance(body, MemoriesIn):
        if len(body.memories) > settings.max_batch:
            errors.append(
                {
                    "field": "memories",
                    "reason": f"more than {settings.max_batch} memories in one batch",
                }
            )
        ids = [it.id for it in body.memories]
        errors.extend(duplicate_ids(ids, range(len(ids)), key="index", noun="item"))
    if errors:
        raise InvalidInput(errors)


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
    return schema
