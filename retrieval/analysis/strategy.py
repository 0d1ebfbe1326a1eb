"""Strategy Selector: named presets (data) and the spec's decision tree (3.2.1) that picks one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from retrieval.analysis.facts import one_at_a_time
from retrieval.analysis.tense import relates_two_moments
from retrieval.models import (
    Fusion,
    Preset,
    QueryIntent,
    QueryType,
    Source,
    Strategy,
    TimeRange,
    WindowMode,
)


def _w(**kw: float) -> Mapping[Source, float]:
    return MappingProxyType({Source(k): v for k, v in kw.items()})


# Weights were tuned on the shared dev sets (scripts/tune_fusion.py; docs/benchmarks-log.md): with
# min-max normalisation BM25 deserves more weight than e5-small vectors, and the character
# trigram overlap (`lex`) adds what word segmentation misses. Weights are relative (normalised
# by the sum of the sources that answered).
# Conceptual questions: meaning over wording. The spec's table says "vector search only"; we keep
# the vector leg dominant but let BM25 speak at the spec's own default hybrid weight (0.7 : 0.3):
# on the questions the selector calls conceptual, vector-only scored 0.93 / 0.87 MRR@10 (JSQuAD /
# JaQuAD-semantic dev, 28 and 29 questions) and 1.00 / 0.97 with the keyword leg
# (docs/benchmarks-log.md). The character n-gram overlap breaks ties.
# Multi-hop expansion, shared by the fused presets (docs/strategy.md, "Expansion"): a reply
# passes on its question's score (more when it answers a question), a thread and an entity
# less. The entity weight was measured (docs/benchmarks-log.md): 0.9 / 0.7 / 0.5 gave multi-hop dev
# MRR@10 0.835 / 0.726 / 0.627 and JSQuAD dev 0.896 / 0.920 / 0.927 (0.929 without
# expansion); 0.5 is the only one that keeps JSQuAD within half a point.
EXPANSION = _w(links=1.0, entity=0.5, thread=0.7)
QUOTAS = _w(vector=0.2, keyword=0.2, temporal=0.2, links=0.1, entity=0.1, thread=0.1)
# Memories that only share a name with a seed (no search matched them) get no seat: measured on
# JSQuAD they were unrelated passages (a painting reached through 「マスコミ」), and on the
# multi-hop set they added nothing.
_EXPAND: dict[str, Any] = {"expansion": EXPANSION, "quotas": QUOTAS, "entity_only_share": 0.0}

SEMANTIC_ONLY = Preset(
    Strategy.SEMANTIC_ONLY,
    (Source.VECTOR, Source.KEYWORD),
    Fusion.WEIGHTED,
    _w(vector=0.7, keyword=0.3),
    recency_weight=0.05,
    lex_weight=0.6,
    lex_n=3,
    **_EXPAND,
)
# Factual questions with names or terms: wording first. The names leg (trigram) weighs 0.15,
# measured against 0.05 and 0.3 (docs/benchmarks-log.md): multi-hop dev hit@5 0.938 / 0.984 / 0.984
# (a person's full name picks the meeting, not another 沙織's), JSQuAD dev MRR@10 0.926 / 0.924
# / 0.923; 0.15 is the most that keeps JSQuAD within half a point.
KEYWORD_BOOST = Preset(
    Strategy.KEYWORD_BOOST,
    (Source.VECTOR, Source.KEYWORD, Source.TRIGRAM),
    Fusion.WEIGHTED,
    _w(vector=0.35, keyword=0.6, trigram=0.15),
    recency_weight=0.05,
    lex_weight=0.6,
    lex_n=3,
    **_EXPAND,
)
# A named time window: in-window memories first, ranked by meaning and words.
TEMPORAL = Preset(
    Strategy.TEMPORAL,
    (Source.TEMPORAL, Source.VECTOR, Source.KEYWORD, Source.TRIGRAM),
    Fusion.WEIGHTED,
    _w(temporal=0.4, vector=0.2, keyword=0.4, trigram=0.15),
    window=WindowMode.FIRST,
    recency_weight=0.1,
    recency_half_life_days=30.0,
    lex_weight=0.3,
    lex_n=3,
    **_EXPAND,
)
# Everything else (procedural, comparative, unclassified): all legs, meaning and words evenly.
HYBRID = Preset(
    Strategy.HYBRID,
    (Source.VECTOR, Source.KEYWORD, Source.TRIGRAM),
    Fusion.WEIGHTED,
    _w(vector=0.5, keyword=0.5, trigram=0.15),
    recency_weight=0.05,
    lex_weight=0.6,
    lex_n=3,
    **_EXPAND,
)
# Baselines for evaluation: one leg, raw order.
VECTOR_ONLY = Preset(
    Strategy.VECTOR_ONLY,
    (Source.VECTOR,),
    Fusion.WEIGHTED,
    _w(vector=1.0),
    min_score=0.0,
    dedupe_threshold=1.01,
)
KEYWORD_ONLY = Preset(
    Strategy.KEYWORD_ONLY,
    (Source.KEYWORD,),
    Fusion.WEIGHTED,
    _w(keyword=1.0),
    min_score=0.0,
    dedupe_threshold=1.01,
)

# What an added source weighs in the fusion and the share of the candidate seats it keeps
# (options.add_sources). Not tuned: no dev set here asks for the newest memories or states.
ADDED_WEIGHTS = _w(recent=0.15, states=0.2, vector_global=0.2)
ADDED_QUOTA = 0.1


def with_sources(preset: Preset, extra: tuple[Source, ...]) -> Preset:
    """The preset with caller-added sources: each runs, weighs ADDED_WEIGHTS and keeps its
    ADDED_QUOTA of the seats."""
    new = tuple(s for s in dict.fromkeys(extra) if s not in preset.sources)
    if not new:
        return preset
    return replace(
        preset,
        sources=preset.sources + new,
        weights=MappingProxyType({**preset.weights, **{s: ADDED_WEIGHTS[s] for s in new}}),
        quotas=MappingProxyType({**preset.quotas, **{s: ADDED_QUOTA for s in new}})
        if preset.quotas
        else preset.quotas,
    )


PRESETS: Mapping[Strategy, Preset] = MappingProxyType(
    {
        p.strategy: p
        for p in (SEMANTIC_ONLY, KEYWORD_BOOST, TEMPORAL, HYBRID, VECTOR_ONLY, KEYWORD_ONLY)
    }
)


# Windows whose edges nobody stated (最近, 先日, この前, recently, the other day: the last
# RETRIEVAL_RECENT_DAYS by convention).
VAGUE_WINDOWS = frozenset({"recent"})


@dataclass(frozen=True)
class Plan:
    """A chosen preset plus the per-query parameters derived from the intent."""

    preset: Preset
    limit: int
    time_range: TimeRange | None
    reasons: tuple[str, ...] = field(default=())

    @property
    def strategy(self) -> Strategy:
        return self.preset.strategy


def select_strategy(intent: QueryIntent) -> Strategy:
    """The spec's decision tree: window -> temporal; factual+keywords -> keyword_boost; ..."""
    if intent.time_range is not None:
        return Strategy.TEMPORAL
    if intent.query_type == QueryType.FACTUAL and (intent.keywords or intent.entities):
        return Strategy.KEYWORD_BOOST
    if intent.query_type == QueryType.CONCEPTUAL:
        return Strategy.SEMANTIC_ONLY
    return Strategy.HYBRID


def plan(
    intent: QueryIntent,
    *,
    limit: int = 10,
    force: Strategy | None = None,
    presets: Mapping[Strategy, Preset] = PRESETS,
) -> Plan:
    """Pick a preset (or the forced one) and tune it to the query."""
    window = intent.time_range
    strategy = force or select_strategy(intent)
    preset = presets[strategy]
    reasons = [f"forced {strategy.value}" if force else f"selected {strategy.value}"]
    if window is not None and preset.strategy == Strategy.TEMPORAL:
        reasons.append(f"window {window.relative or window.text or 'explicit'}")
        if window.relative in VAGUE_WINDOWS:
            # 最近, recently: the last weeks are preferred (the temporal leg searches them), not
            # put first — a memory of the topic from two months ago answers "what did John
            # recently get promoted to" better than this week's unrelated ones.
            preset = replace(preset, window=None)
            reasons.append("a vague window: preferred, not first")
        elif relates_two_moments(intent.query, window.text):
            # "How many days passed between the Sunday mass and the Ash Wednesday service?":
            # the window names one of two moments; the other lies outside it. Both are wanted.
            preset = replace(preset, window=None)
            reasons.append("two moments asked about: the window preferred, not first")
        if window.end is not None and window.relative not in (
            "recent",
            "this_week",
            "today",
            "this_month",
            "this_year",
        ):
            # A named past window: age inside it says nothing about relevance.
            preset = replace(preset, recency_weight=0.0)
            reasons.append("recency decay off for a past window")
    if not intent.keywords and Source.KEYWORD in preset.sources and len(preset.sources) > 1:
        reasons.append("no keywords: keyword leg has nothing to match")
    if statement_asked(intent) is not None and not force:
        # The newest statements of the attribute asked for, found or not by similarity: a
        # move written in another language than the question may not be among the nearest.
        preset = with_sources(preset, (Source.STATES,))
        reasons.append(f"the newest statements of {intent.fact}")
    return Plan(preset=preset, limit=limit, time_range=window, reasons=tuple(reasons))


def statement_asked(intent: QueryIntent) -> str | None:
    """The attribute a question about now asks for, when a newer statement of it replaces the
    older (retrieval.analysis.facts.one_at_a_time), else None."""
    fact = intent.fact
    return fact if intent.present and fact is not None and one_at_a_time(fact) else None
