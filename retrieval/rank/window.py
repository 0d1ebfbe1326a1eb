"""Time in the ranking: decay by age, and where a memory lies against the query's window (inside,
on a fuzzy window's soft edge, outside)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime

from retrieval.models import Candidate, ScoredResult, Source, TimeRange

# A memory at the far end of a fuzzy window's soft edge keeps this share of its score.
NEAR_WINDOW_FLOOR = 0.5

# A result as the reranker carries it between its steps: (inside the window, result, recency
# factor, how far onto a fuzzy window's edge).
Scored = tuple[bool, ScoredResult, float, float]


def window_first(scored: list[Scored]) -> list[Scored]:
    """The order each of the reranker's steps leaves its results in: every one inside the
    window first, and by score within each side."""
    return sorted(scored, key=lambda x: (x[0], x[1].score), reverse=True)


def recency_factor(
    created_at: datetime, now: datetime, *, half_life_days: float, weight: float
) -> float:
    """1 - weight + weight * 0.5 ** (age / half-life): at most `weight` of a score decays away."""
    if weight <= 0:
        return 1.0
    age_days = max((now - created_at).total_seconds() / 86400.0, 0.0)
    return 1.0 - weight + weight * math.pow(0.5, age_days / half_life_days)


def near_window(created_at: datetime, window: TimeRange | None) -> float:
    """For a fuzzy window (先週頃): 0 inside the core, else how far into the soft edge a
    memory lies (0-1], or -1 outside both."""
    if window is None or in_window(created_at, window):
        return 0.0
    outer = TimeRange(window.outer_start, window.outer_end)
    if not window.fuzzy or not in_window(created_at, outer):
        return -1.0
    if window.start is not None and created_at < window.start and window.outer_start is not None:
        edge, width = window.start - created_at, window.start - window.outer_start
    elif window.end is not None and window.outer_end is not None:
        edge, width = created_at - window.end, window.outer_end - window.end
    else:
        return -1.0
    return max(edge / width, 1e-6) if width.total_seconds() > 0 else -1.0


def in_window(created_at: datetime, window: TimeRange | None) -> bool:
    if window is None:
        return True
    if window.start is not None and created_at < window.start:
        return False
    return not (window.end is not None and created_at >= window.end)


# The legs that find a memory by the question's own words and names.
WORDED = (Source.KEYWORD, Source.TRIGRAM)


def window_misread(
    per_source: Mapping[Source, Sequence[Candidate]], window: TimeRange | None
) -> bool:
    """Whether the question's words were found, but none of their memories lies in (or beside)
    the window read from it: the window names a time the store holds nothing of the topic
    for, most often because the question repeats a memory's own words ("the $75 I spent last
    Thursday", said a week before). Ranking the window's unrelated memories first would
    answer with them; the ranking is then by relevance alone."""
    if window is None:
        return False
    worded = [c for s in WORDED for c in per_source.get(s, ())]
    return bool(worded) and all(near_window(c.created_at, window) < 0 for c in worded)
