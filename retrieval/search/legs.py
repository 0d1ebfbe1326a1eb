"""The search legs by source: one signature, `(SearchRun, Given) -> list[Candidate]`, one registry.

A leg either finds candidates or raises Skip when the query gives it nothing to search for; it
never decides how much what it found counts (retrieval.rank does).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType

from retrieval.models import Candidate, Source
from retrieval.search.hops import entity, links, thread
from retrieval.search.keyword import keyword
from retrieval.search.names import trigram
from retrieval.search.newest import recent, states
from retrieval.search.run import Given, SearchRun
from retrieval.search.vector import temporal, vector, vector_global

SourceFn = Callable[[SearchRun, Given], Awaitable[list[Candidate]]]

# Sources that need no query vector: the runner starts them before the embedding is done.
TEXT_ONLY_SOURCES = frozenset(
    {
        Source.KEYWORD,
        Source.TRIGRAM,
        Source.LINKS,
        Source.ENTITY,
        Source.THREAD,
        Source.RECENT,
        Source.STATES,
    }
)

SOURCES: Mapping[Source, SourceFn] = MappingProxyType(
    {
        Source.VECTOR: vector,
        Source.KEYWORD: keyword,
        Source.TEMPORAL: temporal,
        Source.TRIGRAM: trigram,
        Source.LINKS: links,
        Source.ENTITY: entity,
        Source.THREAD: thread,
        Source.RECENT: recent,
        Source.STATES: states,
        Source.VECTOR_GLOBAL: vector_global,
    }
)

__all__ = ["SOURCES", "TEXT_ONLY_SOURCES", "SourceFn"]
