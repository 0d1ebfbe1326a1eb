"""Plain data of the read path: enums and dataclasses. Pydantic lives at the edges: the API
(retrieval.api) reads these into the light client's answer models, the one place that knows the
wire format."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from types import MappingProxyType
from typing import Any, NamedTuple

# The labels the answer gives are the light client's (retrieval_client.models), written once:
# the service depends on the client for its wire format.
from retrieval_client.models import Relevance as Relevance
from retrieval_client.models import SourceStatus as SourceStatus
from retrieval_client.models import Strategy as Strategy
from retrieval_client.models import WindowPlace as WindowPlace

# The instants this service reasons about: a time expression, a `now` and a stored timestamp
# must lie in [TIME_MIN, TIME_MAX). datetime itself spans years 1-9999, but a local time near
# either end cannot be converted to UTC (or to PostgreSQL's timestamptz) without overflowing.
TIME_MIN = datetime(1900, 1, 1, tzinfo=UTC)
TIME_MAX = datetime(2200, 1, 1, tzinfo=UTC)


def time_in_bounds(t: datetime) -> bool:
    """Whether an aware datetime lies in [TIME_MIN, TIME_MAX)."""
    return TIME_MIN <= t < TIME_MAX


class QueryType(StrEnum):
    FACTUAL = "factual"
    CONCEPTUAL = "conceptual"
    PROCEDURAL = "procedural"
    TEMPORAL = "temporal"
    COMPARATIVE = "comparative"


class Source(StrEnum):
    VECTOR = "vector"
    KEYWORD = "keyword"
    TEMPORAL = "temporal"
    TRIGRAM = "trigram"
    # Expansion (a second wave, from the first wave's best candidates: the seeds).
    LINKS = "links"
    ENTITY = "entity"
    THREAD = "thread"
    # Not by similarity: the newest memories, the newest states, and the exploration slot
    # (similar memories from before the recent past).
    RECENT = "recent"
    STATES = "states"
    VECTOR_GLOBAL = "vector_global"


EXPANSION_SOURCES = frozenset({Source.LINKS, Source.ENTITY, Source.THREAD})
# First-wave sources a caller may add to any plan (options.add_sources).
ADDABLE_SOURCES = frozenset({Source.RECENT, Source.STATES, Source.VECTOR_GLOBAL})


# A source that failed; and the statuses that make an answer degraded.
FAILED = frozenset({SourceStatus.TIMEOUT, SourceStatus.ERROR})
DEGRADING = FAILED | {SourceStatus.UNAVAILABLE}


class WindowMode(StrEnum):
    """How a query's time window orders results."""

    FIRST = "first"  # memories inside the window rank before any outside it


class Norm(StrEnum):
    """Per-source score normalisation before fusion."""

    MINMAX = "minmax"
    MAX = "max"


class Fusion(StrEnum):
    WEIGHTED = "weighted"
    RRF = "rrf"


@dataclass(frozen=True)
class Preset:
    """Everything the executor and reranker need to run one strategy: the Strategy Selector
    (retrieval.analysis.strategy) picks one of its named presets, the search and the reranker
    run it."""

    strategy: Strategy
    sources: tuple[Source, ...]
    fusion: Fusion
    weights: Mapping[Source, float]
    candidates_per_source: int = 50
    rerank_top: int = 50
    # Exponential age decay of the fused score: half-life in days, and how much of the score
    # it may take away (0 = off). Off whenever the query names a past window.
    recency_half_life_days: float = 180.0
    recency_weight: float = 0.0
    window: WindowMode | None = None
    min_score: float = 0.05
    high_score: float = 0.6
    dedupe_threshold: float = 0.95
    rrf_k: int = 60
    # Per-source score normalisation (min-max unless named).
    norms: Mapping[Source, Norm] = field(default_factory=lambda: MappingProxyType({}))
    # Weight of the character n-gram overlap signal (ref-llmless-hybrid-rerank's `lex`).
    lex_weight: float = 0.0
    lex_n: int = 2
    # Multi-hop expansion after the first wave: from the best `expand_seeds` candidates, each
    # expansion source adds weight x (the seed's fused score, passed along the hop) to what it
    # reaches. Empty = no expansion.
    expansion: Mapping[Source, float] = field(default_factory=lambda: MappingProxyType({}))
    expand_seeds: int = 5
    # What a chain that answers passes on, as a multiple of its seed's score (rerank.hop_score):
    # its memory gives the kind of answer the question asks for (a date, an amount) and its seed
    # does not (retrieval.analysis.answers), or it replies to the question its seed asks.
    answer_weight: float = 1.1
    # What any other hop adds to the memory's own score, at most: this share of its seed's score
    # (times the source's expansion weight and the link's kind).
    hop_credit: float = 0.3
    # Seats among the `rerank_top` candidates kept for each source's own best (a share each),
    # so that no prolific source takes every seat; candidates found by the entity source alone
    # take at most `entity_only_share`. Unfilled seats go to the best remaining by fused score.
    quotas: Mapping[Source, float] = field(default_factory=lambda: MappingProxyType({}))
    entity_only_share: float = 1.0

    def to_json(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy.value,
            "sources": [s.value for s in self.sources],
            "fusion": self.fusion.value,
            "weights": {s.value: w for s, w in self.weights.items()},
            "candidates_per_source": self.candidates_per_source,
            "rerank_top": self.rerank_top,
            "recency_half_life_days": self.recency_half_life_days,
            "recency_weight": self.recency_weight,
            "window": self.window,
            "min_score": self.min_score,
            "dedupe_threshold": self.dedupe_threshold,
            "norms": {s.value: n for s, n in self.norms.items()},
            "lex_weight": self.lex_weight,
            "expansion": {s.value: w for s, w in self.expansion.items()},
            "expand_seeds": self.expand_seeds,
            "answer_weight": self.answer_weight,
            "hop_credit": self.hop_credit,
            "max_candidates": self.rerank_top,
            "quotas": {s.value: q for s, q in self.quotas.items()},
            "entity_only_share": self.entity_only_share,
        }


class Granularity(StrEnum):
    """What a time window names: its unit decides how wide a fuzzy edge (頃, about) is."""

    DAY = "day"
    WEEK = "week"
    MONTH = "month"
    PART_OF_MONTH = "part_of_month"
    SEASON = "season"
    YEAR = "year"
    FISCAL_YEAR = "fiscal_year"
    HOLIDAY = "holiday"
    SPAN = "span"


@dataclass(frozen=True)
class TimeRange:
    """A half-open interval [start, end) in absolute time; `relative` names it when it has a name.

    A fuzzy expression (先週頃, about three weeks ago) also has soft edges [soft_start,
    soft_end) around the core: memories there are near the window, not in it."""

    start: datetime | None
    end: datetime | None
    relative: str | None = None
    text: str | None = None
    granularity: Granularity | None = None
    soft_start: datetime | None = None
    soft_end: datetime | None = None

    @property
    def outer_start(self) -> datetime | None:
        return self.soft_start if self.soft_start is not None else self.start

    @property
    def outer_end(self) -> datetime | None:
        return self.soft_end if self.soft_end is not None else self.end

    @property
    def fuzzy(self) -> bool:
        return self.soft_start is not None or self.soft_end is not None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "start": self.start.isoformat() if self.start else None,
            "end": self.end.isoformat() if self.end else None,
            "relative": self.relative,
            "text": self.text,
            "granularity": self.granularity.value if self.granularity else None,
        }
        if self.fuzzy:
            out["soft_start"] = self.outer_start.isoformat() if self.outer_start else None
            out["soft_end"] = self.outer_end.isoformat() if self.outer_end else None
        return out


@dataclass(frozen=True)
class Entity:
    text: str
    label: str


class QueryName(NamedTuple):
    """A person-like name of a question: as written, its keyword terms, its script-neutral
    keys (index terms of their own)."""

    text: str
    terms: tuple[str, ...]
    keys: tuple[str, ...]


@dataclass(frozen=True)
class QueryIntent:
    query: str
    query_type: QueryType
    keywords: tuple[str, ...]
    entities: tuple[Entity, ...] = ()
    time_range: TimeRange | None = None
    # A year alone or a life stage (高校の頃) that cannot become a range.
    time_hints: tuple[str, ...] = ()
    # The keywords a written date gives ("octob", "13", "2023" of "October 13, 2023"): a memory
    # states its time in created_at, not in its words, so holding them is no sign of an answer.
    time_terms: tuple[str, ...] = ()
    importance: float = 0.5
    language: str = "ja"
    # Strings worth matching character by character (names, model numbers), and each one's
    # index terms (space-joined), to look up how common it is.
    name_terms: tuple[str, ...] = ()
    name_index_terms: tuple[str, ...] = ()
    # What the question asks about (締切, "book"), as written, and as a search term, if any.
    focus: str | None = None
    focus_term: str | None = None
    # The person-like names of the question, each with its script-neutral keys
    # (retrieval.text.name_keys: Sato, 佐藤 and サトウ share theirs).
    names: tuple[QueryName, ...] = ()
    # A question about the present (now, 今, Who is my dentist?): the newest of memories that
    # state the same thing first (retrieval.analysis.tense, retrieval.rank.latest); and the
    # relations whose fact it asks (my brother's city: "brother").
    present: bool = False
    relations: tuple[str, ...] = ()
    # The changing attribute it asks for, and whose ("residence", "car:mother";
    # retrieval.analysis.facts), if it names one.
    fact: str | None = None
    # The kind of answer it asks for ("date", "amount": retrieval.analysis.answers), if it says.
    asks: str | None = None
    # Whose turns answer it in a chat with an assistant ("user", "assistant": the asker's own
    # life, or what the assistant said; retrieval.analysis.speaker), if it says.
    speaker: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "query_type": self.query_type.value,
            "keywords": list(self.keywords),
            "entities": [{"text": e.text, "label": e.label} for e in self.entities],
            "time_range": self.time_range.to_json() if self.time_range else None,
            "time_hints": list(self.time_hints),
            "importance": self.importance,
            "language": self.language,
            "name_terms": list(self.name_terms),
            "focus": self.focus,
            "names": {n.text: list(n.keys) for n in self.names},
            "present": self.present,
            "relations": list(self.relations),
            "fact": self.fact,
            "asks": self.asks,
            "speaker": self.speaker,
        }


@dataclass(frozen=True)
class Filters:
    """What every source must honour besides namespace, expiry, archive and `searchable`."""

    namespace: str
    memory_types: tuple[str, ...] = ()
    source_types: tuple[str, ...] = ()
    start: datetime | None = None
    end: datetime | None = None
    # The caller's `options.now`: nothing written after it is returned, as a result or as a
    # result's context (a request with a fixed now answers the same whatever was written later).
    until: datetime | None = None

    def written_before(self) -> datetime | None:
        """The exclusive bound on `created_at` the caller's now sets: just after `until`."""
        return None if self.until is None else self.until + _JUST_AFTER

    def before(self) -> datetime | None:
        """The exclusive upper bound on a result's `created_at`: `end` or written_before, the
        earlier."""
        bounds = [x for x in (self.end, self.written_before()) if x is not None]
        return min(bounds) if bounds else None


# `until` is inclusive: a memory written at that very instant is before it.
_JUST_AFTER = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class EventSpan:
    """When what a memory tells happened: [start, end), aware, in the offset it was read in
    (local midnights; retrieval.analysis.time.events)."""

    start: datetime
    end: datetime


@dataclass
class Candidate:
    """One row found by one source, with that source's raw score (higher is better)."""

    id: int
    external_id: str
    content: str
    title: str | None
    memory_type: str
    source_type: str
    metadata: dict[str, Any]
    created_at: datetime
    embedding: Any
    score: float
    source: Source
    # How an expansion source reached it ("linked reply_to from m-12", "shares 「アオバ」 with m-7").
    via: str | None = None
    # Expansion: from which seed, and what the hop says (the reranker scores it).
    hop: Hop | None = None
    # A long memory's passages the vector leg found: (start, end, score), best first.
    passages: tuple[tuple[int, int, float], ...] = ()
    # The question's people it names, in any script (the names leg: retrieval.text.name_keys).
    names: tuple[str, ...] = ()
    # The changing attribute it states, read when it was written (retrieval.analysis.facts;
    # "" for none), or None for a memory written before attributes were read.
    fact: str | None = None
    # When what it tells happened (None: its words place nothing, or not read yet).
    event: EventSpan | None = None


# Hop.kind of a reply to a seed that asks a question: the reply answers it.
ANSWERS_QUESTION = "answers_question"


@dataclass(frozen=True)
class Hop:
    """How an expansion source reached a memory from a seed (a first-wave candidate)."""

    seed: str  # the seed's external id
    # "reply_to", "same_topic", "caused_by", "continuation" (a link's label), "answers_question"
    # (a reply to a seed that asks), "entity" (a name both hold) or "thread".
    kind: str
    seed_text: str
    # The share of the query's IDF mass the memory holds and the seed does not, and how much
    # more of it the two hold together than the seed alone (a ratio, 1 = nothing more).
    added: float = 0.0
    gain: float = 1.0
    # The memory gives the kind of answer asked for (a date, an amount) and the seed does not:
    # the chain answers the question, the seed only leads to it.
    gives_answer: bool = False


@dataclass(frozen=True, slots=True)
class Fused:
    """A candidate after fusion: the signals each source gave it and its fused score."""

    candidate: Candidate
    signals: dict[str, float]
    score: float


@dataclass(frozen=True)
class ScoredResult:
    """A fused candidate: final score, per-signal scores, the sources that found it, a reason."""

    candidate: Candidate
    score: float
    signals: dict[str, float]
    sources: list[str]
    relevance: Relevance = Relevance.MEDIUM
    reason: str = ""
    # Where it lies against the question's window (None: none named; a window set aside still
    # says where each lies).
    window: WindowPlace | None = None
    # [start, end) of the content: the part that answers (retrieval.rank.highlight).
    highlight: tuple[int, int] | None = None
    # What a ranking stage says of it beyond its signals (retrieval.rank.latest), for the reason.
    notes: tuple[str, ...] = ()
    # A question about now: the newer memory (external id) that states the same thing.
    superseded_by: str | None = None
    # How likely it answers the question, in [0, 1] (retrieval.rank.confidence).
    confidence: float | None = None
    # A reply to the question a seed asks (an answering hop): that question and the memory, as
    # one text, which the confidence reads for the words the question turns on.
    chain: str | None = None


class Clock(StrEnum):
    """What options.time_range filters by: when a memory was written (created_at, the
    default), when what it tells happened (its event; a memory whose words place nothing
    happened when written), or either."""

    WRITTEN = "written"
    EVENT = "event"
    EITHER = "either"


@dataclass
class RetrievalOptions:
    namespace: str = "default"
    force_strategy: Strategy | None = None
    limit: int = 10
    time_range: TimeRange | None = None
    # What time_range filters by (the written clock: in SQL; the others: rank.window.passes_range).
    time_clock: Clock = Clock.WRITTEN
    memory_types: tuple[str, ...] = ()
    source_types: tuple[str, ...] = ()
    now: datetime | None = None
    # The IANA zone whose calendar the question's time words are read in (None: the service's).
    timezone: str | None = None
    recent_conversation: tuple[tuple[str, str], ...] = ()
    # Each result's per-signal scores (signals); off = an empty mapping.
    include_metadata_details: bool = True
    log_run: bool = True
    # Multi-hop expansion from the first wave's best candidates (and these memories' links).
    expand: bool = True
    seed_ids: tuple[str, ...] = ()
    # At most per_bucket results with the same metadata[diversify_by] before any repeats.
    diversify_by: str | None = None
    per_bucket: int = 0
    # Sources that do not rank by similarity (recent, states, vector_global), added to the plan.
    add_sources: tuple[Source, ...] = ()
    # How many memories before and after each result (in its thread or reply chain) come with it.
    context_window: int = 1
    # At most this many characters of content (and context) in all the results: each whole
    # when it fits, else its highlight, else left out (None: no budget).
    max_chars: int | None = None
    # Read-your-writes across processes: the `lsn` a write answered with; a replica answers
    # only once it has replayed that far (this process also remembers its own writes).
    after_lsn: str | None = None
    # Who pays for it (retrieval.tenants: the API key, or the namespace); None: the namespace.
    tenant: str | None = None
    # The request's id (X-Request-ID), written into its run-log entry.
    request_id: str | None = None


@dataclass(frozen=True)
class Neighbour:
    """A memory beside a result in its thread or reply chain: position -1 is just before it, 1
    just after (the API calls a result's neighbours its `context`)."""

    id: str
    content: str
    title: str | None
    memory_type: str
    created_at: datetime
    position: int


@dataclass(frozen=True)
class Highlight:
    """The part of a result's content that answers: content[start:end]."""

    start: int
    end: int
    text: str


@dataclass
class Budget:
    """How the results were fitted into options.max_chars: how many whole, which cut to their
    highlight, which left out."""

    max_chars: int
    used_chars: int = 0
    whole: int = 0
    cut: list[str] = field(default_factory=list)
    omitted: list[str] = field(default_factory=list)


@dataclass
class Result:
    """One result as the answer gives it (its neighbours are added once it is ranked)."""

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
    relevance: Relevance
    reason: str
    window: WindowPlace | None = None
    context: list[Neighbour] = field(default_factory=list)
    highlight: Highlight | None = None
    # `content` is only the highlight: the whole did not fit the budget.
    cut: bool = False
    # A question about now: the newer memory that states the same thing (rank.latest).
    superseded_by: str | None = None
    # How likely it answers the question, in [0, 1] (retrieval.rank.confidence).
    confidence: float | None = None
    # When what it tells happened, read from its words (None: they place nothing).
    event_time: EventSpan | None = None


def unit(score: float) -> float:
    """A score as the answer gives it: in [0, 1] whatever lifted it (a memory reached from
    itself, a link)."""
    return min(max(score, 0.0), 1.0)


def result_of(r: ScoredResult, *, details: bool = True) -> Result:
    """The answer's view of a reranked candidate (its per-signal scores only with details)."""
    c = r.candidate
    return Result(
        id=c.external_id,
        content=c.content,
        title=c.title,
        memory_type=c.memory_type,
        source_type=c.source_type,
        metadata=c.metadata,
        created_at=c.created_at,
        score=unit(r.score),
        signals=r.signals if details else {},
        sources=r.sources,
        relevance=r.relevance,
        reason=r.reason,
        window=r.window,
        superseded_by=r.superseded_by,
        confidence=r.confidence,
        event_time=c.event,
        highlight=None
        if r.highlight is None
        else Highlight(
            start=r.highlight[0],
            end=r.highlight[1],
            text=c.content[r.highlight[0] : r.highlight[1]],
        ),
    )


@dataclass
class SourceReport:
    source: str
    latency_ms: float
    count: int
    status: SourceStatus
    error: str | None = None


@dataclass(frozen=True)
class Answered:
    """Whether anything answers the question: the first result's confidence against the
    threshold (retrieval.rank.confidence)."""

    answered: bool
    confidence: float
    threshold: float


@dataclass
class RetrievalMetadata:
    strategy_used: Strategy
    query_intent: QueryIntent
    total_latency_ms: float
    search_breakdown: dict[str, SourceReport]
    stage_latency_ms: dict[str, float]
    num_results_before_rerank: int
    num_results_after_rerank: int
    degraded: list[str]
    run_id: str
    params: dict[str, Any] = field(default_factory=dict)
    # What options.max_chars let through (None without a budget).
    budget: Budget | None = None
    # Processing seconds the request cost (CPU of analysis and reranking, estimated embedding
    # of its uncached texts): what its namespace's budget is charged (retrieval.tenants).
    cost_s: float = 0.0
    # Whether the first result answers the question (None: not assessed).
    answered: Answered | None = None


@dataclass
class RetrievalResponse:
    results: list[Result]
    metadata: RetrievalMetadata
