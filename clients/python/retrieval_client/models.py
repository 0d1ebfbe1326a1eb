"""The API's answers, as the service sends them: one definition, read by this client and
written by the service (which imports these models for its routes and its OpenAPI document).

Requests are plain mappings (`remember([{"content": ...}])`): the service validates them and
names each bad field in a 422, which this client raises as `InvalidRequest`.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator


class Strategy(StrEnum):
    """How a retrieval searched: chosen from the question, or forced by the caller."""

    SEMANTIC_ONLY = "semantic_only"
    KEYWORD_BOOST = "keyword_boost"
    TEMPORAL = "temporal"
    HYBRID = "hybrid"
    # Baselines for evaluation: a single leg, no fusion.
    VECTOR_ONLY = "vector_only"
    KEYWORD_ONLY = "keyword_only"


class Relevance(StrEnum):
    """A result's label: how likely it answers, on one scale, strongest first. From the
    confidence when the service has one (docs/confidence.md), from the score otherwise; a
    weak score (below 0.05) is `low` whatever its confidence. The first result's label is
    `high` or `medium` exactly when the answer says `answered`."""

    HIGH = "high"  # its confidence is at least the service's `high` threshold
    MEDIUM = "medium"  # its confidence reaches the `answered` threshold
    LOW = "low"  # below it, or a weak score: listed, but little says it answers


class WindowPlace(StrEnum):
    """Where a result lies against the time window its question named (its own field,
    `window`: null when the question named none)."""

    INSIDE = "inside"
    NEAR = "near"  # on a fuzzy window's soft edge (お盆の頃, around March): scored down
    OUTSIDE = "outside"  # outside it: after every result inside


class SourceStatus(StrEnum):
    """How one search source went."""

    OK = "ok"
    SKIPPED = "skipped"  # nothing to search for (no keywords, no window, no seeds)
    TIMEOUT = "timeout"
    ERROR = "error"
    UNAVAILABLE = "unavailable"  # the server lacks what it needs (pg_trgm)


# A label the service gives, as this client knows it (an enum member), or as a newer service
# sends it (a str): a value added later never breaks an older client.
OpenStrategy = Annotated[Strategy | str, Field(union_mode="left_to_right")]
OpenRelevance = Annotated[Relevance | str, Field(union_mode="left_to_right")]
OpenWindowPlace = Annotated[WindowPlace | str, Field(union_mode="left_to_right")]
OpenSourceStatus = Annotated[SourceStatus | str, Field(union_mode="left_to_right")]
JobState = Annotated[
    Literal["queued", "running", "done", "failed"] | str, Field(union_mode="left_to_right")
]


class _Out(BaseModel):
    """An answer model; the service builds it from its own objects' attributes."""

    model_config = ConfigDict(from_attributes=True)


class ContextOut(_Out):
    """A memory beside a result: position -1 is just before it, 1 just after."""

    id: str
    content: str
    title: str | None
    memory_type: str
    created_at: datetime
    position: int


class HighlightOut(_Out):
    """The part of the content that answers: content[start:end] of the stored memory."""

    start: int
    end: int
    text: str


class BudgetOut(_Out):
    """How the results were fitted into the budget (options.max_chars / max_tokens)."""

    max_chars: int
    used_chars: int
    whole: int = Field(description="Results returned whole.")
    cut: list[str] = Field(description="Ids returned as their highlight only.")
    omitted: list[str] = Field(description="Ids left out: not even their highlight fitted.")


class EventTimeOut(_Out):
    """When what a memory tells happened, read from its words against when it was written
    ("on Saturday", 昨日, "next month"): [start, end) in the offset it was read in (local
    midnights; end exclusive)."""

    start: datetime
    end: datetime


class ResultOut(_Out):
    """One result."""

    id: str
    content: str
    title: str | None
    memory_type: str
    source_type: str
    metadata: dict[str, Any]
    created_at: datetime
    score: float = Field(description="The ranking's score, in [0, 1]: the list's order.")
    signals: dict[str, float]
    sources: list[str]
    relevance: OpenRelevance = Field(
        description="How likely it answers, one scale: high (confidence at least the service's "
        "`high` threshold) | medium (it reaches the `answered` threshold) | low (below, or a "
        "score under 0.05). The first result is high or medium exactly when `answered`."
    )
    window: OpenWindowPlace | None = Field(
        default=None,
        description="Where it lies against the time window the question named: inside | near "
        "(a fuzzy window's soft edge) | outside; null when the question named none.",
    )
    confidence: float | None = Field(
        default=None,
        description="How likely it answers the question, in [0, 1] (calibrated on the dev sets: "
        "docs/confidence.md); null from a service without the confidence.",
    )
    reason: str
    event_time: EventTimeOut | None = Field(
        default=None,
        description="When what it tells happened, read from its words against created_at "
        '("on Saturday" written on a Monday is that Saturday); null when its words place '
        "nothing.",
    )
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
    superseded_by: str | None = Field(
        default=None,
        description="For a question about now: the id of a newer memory that states the same "
        "thing (this one is the older fact, ranked below it). None otherwise.",
    )

    @field_serializer("score")
    def _score(self, v: float) -> float:
        return round(v, 6)

    @field_serializer("confidence")
    def _confidence(self, v: float | None) -> float | None:
        return None if v is None else round(v, 6)

    @field_serializer("signals")
    def _signals(self, v: dict[str, float]) -> dict[str, float]:
        return {k: round(x, 6) for k, x in v.items()}


class SourceOut(_Out):
    """What one search source did for a retrieval."""

    latency_ms: float
    count: int
    status: OpenSourceStatus = Field(
        description="ok | skipped (nothing to search for) | timeout | error | unavailable (the server lacks it)"
    )
    error: str | None

    @field_serializer("latency_ms")
    def _ms(self, v: float) -> float:
        return round(v, 3)


class AnsweredOut(_Out):
    """Whether anything answers the question: the first result's confidence against the
    service's threshold."""

    answered: bool = Field(description="The first result's confidence reaches `threshold`.")
    confidence: float = Field(description="The first result's confidence (0 without results).")
    threshold: float

    @field_serializer("confidence")
    def _confidence(self, v: float) -> float:
        return round(v, 6)


class MetadataOut(_Out):
    """How a retrieval went: the plan, each source, each stage's time."""

    strategy_used: OpenStrategy
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
    answered: AnsweredOut | None = Field(
        default=None,
        description="Whether the first result answers the question (null from a service "
        "without the confidence).",
    )

    @field_validator("query_intent", mode="before")
    @classmethod
    def _intent(cls, v: Any) -> Any:
        # The service hands in its analysis object, which knows its own JSON form.
        to_json = getattr(v, "to_json", None)
        return to_json() if callable(to_json) else v

    @field_serializer("total_latency_ms")
    def _total(self, v: float) -> float:
        return round(v, 3)

    @field_serializer("stage_latency_ms")
    def _stages(self, v: dict[str, float]) -> dict[str, float]:
        return {k: round(x, 3) for k, x in v.items()}


class RetrieveResponse(_Out):
    """The answer of POST /v1/retrieve."""

    results: list[ResultOut]
    metadata: MetadataOut | None


class IngestOut(_Out):
    """What a write stored (POST /v1/memories, 200; a job's report)."""

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


class JobOut(_Out):
    """A write queued because its embedding takes longer than one request should."""

    id: str
    namespace: str
    state: JobState
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


class LinkOut(_Out):
    """A link a memory made to another of its namespace."""

    to: str
    label: str


class MemoryOut(_Out):
    """One stored memory (GET /v1/memories/{id}, and each of a listing's)."""

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
    thread: str | None = None
    links: list[LinkOut] = Field(default_factory=list)
    fact: str | None = Field(
        default=None,
        description="the changing attribute it states and whose (residence, car:mother), read "
        "when it was written; null: none (or written before the service read them)",
    )
    superseded_by: str | None = Field(
        default=None,
        description="the newest memory of the namespace that states the same attribute later: "
        "this one is out of date; null: none does",
    )
    event_time: EventTimeOut | None = Field(
        default=None,
        description="when what it tells happened: read from its words against created_at, or "
        "as the write gave it; null: none placed (or written before the service read them)",
    )


class MemoryPage(_Out):
    """A page of a namespace's memories (GET /v1/memories), in id order."""

    memories: list[MemoryOut]
    next_cursor: str | None = Field(
        description="give it as `cursor` for the next page; null: this was the last"
    )


class ArchivedOut(_Out):
    """POST /v1/memories/{id}/archive: the memory is kept but never found again."""

    id: str
    namespace: str
    archived: bool


class ErasedOut(_Out):
    """DELETE /v1/memories/{id}, POST /v1/memories/erase: what was erased, and the ids named
    that the namespace did not hold."""

    namespace: str
    erased: list[str]
    not_found: list[str] = Field(default_factory=list)


class PurgeOut(_Out):
    """A purge of a namespace (POST /v1/namespaces/{ns}/purge, GET /v1/purges/{id})."""

    id: str
    namespace: str
    state: str = Field(description="running | done | failed")
    total: int = Field(description="memories the namespace held when the purge began")
    erased: int
    vacuumed: bool
    created_at: datetime
    finished_at: datetime | None
    error: str | None


class FeedbackOut(_Out):
    """POST /v1/feedback: whether a search may return the memory now (negative feedback takes
    it out, positive puts it back; an archived memory stays out)."""

    id: str
    namespace: str
    searchable: bool


class RunOut(_Out):
    """A logged retrieval (GET /v1/runs/{run_id})."""

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
    request_id: str | None = Field(default=None, description="the request's X-Request-ID")


class Problem(BaseModel):
    """An error: `detail` is a message, or a list of {loc, field, msg} for invalid input."""

    detail: str | list[dict[str, Any]]


__all__ = [
    "ArchivedOut",
    "BudgetOut",
    "ContextOut",
    "ErasedOut",
    "FeedbackOut",
    "HighlightOut",
    "IngestOut",
    "JobOut",
    "LinkOut",
    "MemoryOut",
    "MemoryPage",
    "MetadataOut",
    "Problem",
    "PurgeOut",
    "Relevance",
    "WindowPlace",
    "ResultOut",
    "RetrieveResponse",
    "RunOut",
    "SourceOut",
    "SourceStatus",
    "Strategy",
]
