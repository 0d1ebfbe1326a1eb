"""Strategy Selector: the decision tree, plans, presets as data."""

from datetime import datetime

from retrieval.analysis.strategy import PRESETS, plan, select_strategy
from retrieval.models import QueryIntent, QueryType, Strategy, TimeRange

NOW = datetime.fromisoformat("2026-11-22T12:00:00+09:00")


def test_selector_decision_tree():
    base = dict(query="q", keywords=("x",))
    assert (
        select_strategy(QueryIntent(query_type=QueryType.CONCEPTUAL, **base))
        == Strategy.SEMANTIC_ONLY
    )
    assert (
        select_strategy(QueryIntent(query_type=QueryType.FACTUAL, **base)) == Strategy.KEYWORD_BOOST
    )
    assert (
        select_strategy(QueryIntent(query="q", query_type=QueryType.FACTUAL, keywords=()))
        == Strategy.HYBRID
    )
    assert select_strategy(QueryIntent(query_type=QueryType.PROCEDURAL, **base)) == Strategy.HYBRID
    tr = TimeRange(NOW, NOW, "today")
    assert (
        select_strategy(QueryIntent(query_type=QueryType.CONCEPTUAL, time_range=tr, **base))
        == Strategy.TEMPORAL
    )


def _windowed(relative: str, qtype: QueryType = QueryType.FACTUAL) -> QueryIntent:
    return QueryIntent(
        query="q", query_type=qtype, keywords=("x",), time_range=TimeRange(NOW, NOW, relative)
    )


def test_plan_force_and_recency_off_for_past_window():
    intent = _windowed("last_week")
    p = plan(intent)
    assert p.strategy == Strategy.TEMPORAL and p.preset.recency_weight == 0.0
    assert plan(intent, force=Strategy.SEMANTIC_ONLY).strategy == Strategy.SEMANTIC_ONLY
    assert PRESETS[Strategy.KEYWORD_BOOST].weights  # strategies are data


def test_a_vague_window_is_preferred_not_first():
    """最近 / recently name no edges: the temporal leg still searches the last weeks, but a
    memory of the topic from before them is not put behind every memory inside."""
    p = plan(_windowed("recent", QueryType.TEMPORAL))
    assert p.strategy == Strategy.TEMPORAL and p.preset.window is None
    assert "a vague window: preferred, not first" in p.reasons
    named = plan(_windowed("last_week", QueryType.TEMPORAL))
    assert named.preset.window == PRESETS[Strategy.TEMPORAL].window is not None
