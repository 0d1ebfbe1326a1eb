"""Time in the ranking: decay by age, and where a memory lies against the query's window (inside,
on a fuzzy window's soft edge, outside) by either of its two clocks: when it was written
(created_at) and when what it tells happened (its event, read from its words:
retrieval.analysis.time.events). A memory whose event overlaps the window is inside, as is one
written inside it; one written inside whose own words place it elsewhere ("last year we …",
written yesterday) keeps ELSEWHERE_SHARE of its score, below those whose event is inside."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from retrieval.models import Candidate, Clock, EventSpan, ScoredResult, Source, TimeRange

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


# A memory written inside the window whose own words place what it tells elsewhere keeps this
# share of its score: it matches the window, below one whose event lies in it.
ELSEWHERE_SHARE = 0.7


@dataclass(frozen=True)
class Place:
    """Where a memory lies against a window: `near` 0 inside, (0, 1] on a fuzzy window's soft
    edge, -1 outside (by the better of its clocks); `clock` which one placed it ("event": what
    it tells happened there; "written"; None outside); `elsewhere`: written inside, but its
    words place what it tells outside."""

    near: float
    clock: str | None = None
    elsewhere: bool = False


INSIDE = Place(0.0)


def near_span(event: EventSpan, window: TimeRange) -> float:
    """near_window for an event [start, end): 0 when it overlaps the window's core, else how
    far into a fuzzy window's soft edge its nearest end lies, or -1."""
    if _overlaps(event, window.start, window.end):
        return 0.0
    if not window.fuzzy or not _overlaps(event, window.outer_start, window.outer_end):
        return -1.0
    # on the soft edge before the core (it ends before the core starts) or after it
    if window.start is not None and event.end <= window.start and window.outer_start is not None:
        edge, width = window.start - event.end, window.start - window.outer_start
    elif window.end is not None and window.outer_end is not None:
        edge, width = event.start - window.end, window.outer_end - window.end
    else:
        return -1.0
    return max(edge / width, 1e-6) if width.total_seconds() > 0 else -1.0


def _overlaps(event: EventSpan, start: datetime | None, end: datetime | None) -> bool:
    return (start is None or event.end > start) and (end is None or event.start < end)


def place(c: Candidate, window: TimeRange | None) -> Place:
    """Where a candidate lies against the window, by either clock (the module's doc)."""
    if window is None:
        return INSIDE
    written = near_window(c.created_at, window)
    if c.event is None:
        return Place(written, "written" if written >= 0 else None)
    told = near_span(c.event, window)
    if told == 0 or (told > 0 and (written < 0 or told <= written)):
        return Place(told, "event")
    if written >= 0:
        return Place(written, "written", elsewhere=told < 0)
    return Place(-1.0)


def passes_range(c: Candidate, window: TimeRange, clock: Clock) -> bool:
    """Whether a candidate passes options.time_range by `clock` (the written clock is
    filtered in SQL): EVENT what it tells happened in it (its event, else when it was
    written), EITHER that or written in it."""
    written = in_window(c.created_at, window)
    told = c.event is not None and _overlaps(c.event, window.start, window.end)
    if clock is Clock.EVENT:
        return told if c.event is not None else written
    return written or told


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
    return bool(worded) and all(place(c, window).near < 0 for c in worded)
