"""What every search leg shares: the request's search state (`SearchRun`), what a leg is given
(`Given`: the query's vectors, the first wave's seeds), the columns and filters each leg's
statement selects by, its connection (a read-only transaction the server cancels at the leg's
deadline) and the rows it turns into candidates.

Every leg honours the namespace, memory/source type filters, an optional hard time window,
expiry, archive and `searchable` through the same WHERE clause ($1..$5).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import asyncpg
import numpy as np

from db.session import session
from retrieval.models import Candidate, EventSpan, Filters, QueryIntent, Source, TimeRange
from retrieval.search.contents import Contents, columns

# A long content travels by reference (retrieval.search.contents): Contents.of() completes the rows.
COLS = (
    f"m.id, m.external_id, {columns('m')}, "
    "m.title, m.memory_type, m.source_type, m.metadata, m.created_at, m.embedding, m.fact, "
    "m.event_time, m.event_offset"
)

# $1 namespace, $2 memory types (empty = any), $3 source types, $4/$5 window [start, end).
WHERE = """m.namespace = $1 AND NOT m.is_archived AND m.searchable
  AND (m.expires_at IS NULL OR m.expires_at > now())
  AND (cardinality($2::text[]) = 0 OR m.memory_type = ANY($2::text[]))
  AND (cardinality($3::text[]) = 0 OR m.source_type = ANY($3::text[]))
  AND ($4::timestamptz IS NULL OR m.created_at >= $4)
  AND ($5::timestamptz IS NULL OR m.created_at < $5)"""


class Skip(Exception):
    """The leg has nothing to search for in this query (no window, no keywords, no names)."""


@asynccontextmanager
async def leg_connection(
    run: SearchRun, *, generic_plan: bool = False
) -> AsyncIterator[asyncpg.Connection]:
    """A pool connection in a read-only transaction that the server itself cancels at the leg's
    deadline: a query whose caller has given up must not run on and hold the connection. Taken
    within the request's connection slots (`run.slots`), waited for inside the leg's deadline,
    and given up at it whatever the server's state (db.session: terminated, not rolled back).

    `generic_plan`: the statement is planned once per connection, not at every execution (the
    pool's default, for statements whose best plan depends on which filters are set). For the
    statements that start from a few given rows (the hops from their seeds, the results'
    context) the plan is the same whatever the values, and planning cost as much as running:
    on LoCoMo 1.3 of 2.7 ms for the entity hop, 0.85 of 1.3 ms for the context
    (docs/benchmarks-log.md, "tenth release: planned once")."""
    # The transaction's own statement timeout and plan cache mode, set with its BEGIN.
    local = {
        "statement_timeout": max(1, int(run.timeout_s * 1000)),
        "plan_cache_mode": "force_generic_plan" if generic_plan else "force_custom_plan",
    }
    async with (
        run.slots if run.slots is not None else nullcontext(),
        session(run.pool, run.timeout_s, transaction="read", local=local) as conn,
    ):
        yield conn


@dataclass
class TermStats:
    """The IDF of each of the question's words the namespace holds, and how many memories it
    has (0: not read)."""

    idf: dict[str, float] = field(default_factory=dict)
    docs: int = 0

    def unseen(self) -> float:
        """The IDF of a word no memory holds (BM25's, as the keyword leg computes it)."""
        return math.log(1 + (self.docs + 0.5) / 0.5) if self.docs else 1.0


@dataclass(frozen=True)
class SearchRun:
    """One request's search, as every leg reads it: the pool, the analysed query, its filters
    and window, how many candidates a leg returns, its deadline and connection slots."""

    pool: asyncpg.Pool
    intent: QueryIntent
    filters: Filters
    k: int
    window: TimeRange | None = None
    timeout_s: float = 1.0
    # The request's "now" (the exploration slot searches before now - EXPLORE_AFTER).
    now: datetime | None = None
    # The read replica `pool` belongs to (a retry goes to the primary), or None: the primary.
    replica: Any = None
    # The request's connection slots: at most this many of its legs hold a pooled connection
    # at once (None: no bound), so that a few requests cannot hold the whole pool.
    slots: asyncio.Semaphore | None = None
    # Where the long contents the legs return by reference come from (the orchestrator's).
    contents: Contents = field(default_factory=Contents)
    # When the request's database work must be over (the event loop's clock; None: no bound
    # but each leg's own): no leg, hop or neighbour fetch waits past it.
    deadline: float | None = None
    # What the keyword leg read of the question's words in the namespace (the confidence's
    # coverage weighs them by it: retrieval.rank.confidence).
    terms: TermStats = field(default_factory=lambda: TermStats())

    def leg_timeout(self, most: float) -> float:
        """A leg's deadline in seconds: `most`, or what is left of the request's if less."""
        if self.deadline is None:
            return most
        return min(most, self.deadline - asyncio.get_running_loop().time())

    def where_args(self, window: TimeRange | None = None) -> tuple[Any, ...]:
        """The shared WHERE clause's $1..$5: namespace, types, and the hard window (and the
        caller's now: Filters.before) narrowed to `window` (with its soft edges) when given."""
        f = self.filters
        # A fuzzy window (先週頃) is searched with its soft edges; the reranker tells them apart.
        start = f.start if window is None else max(_drop_none(f.start, window.outer_start))
        before = f.before()
        end = before if window is None else min(_drop_none(before, window.outer_end))
        return (f.namespace, list(f.memory_types), list(f.source_types), start, end)


@dataclass(frozen=True)
class Given:
    """What a leg is given besides the search: the query's vectors (the vector legs, once the
    query is embedded) and the first wave's seeds (the hops)."""

    vectors: tuple[np.ndarray, ...] = ()
    # The first wave's best candidates (external id, their standing: the best is 1).
    seeds: tuple[tuple[str, float], ...] = ()
    # Seeds that are long memories (split into passages): the entity hop does not start from
    # them (retrieval.search.hops.entity).
    long_seeds: frozenset[str] = frozenset()


def best_of(cands: list[Candidate], k: int) -> list[Candidate]:
    """Each memory once (found several ways: by its best score; the first of a tie), the k
    best."""
    best: dict[int, Candidate] = {}
    for c in cands:
        if c.id not in best or c.score > best[c.id].score:
            best[c.id] = c
    return sorted(best.values(), key=lambda c: c.score, reverse=True)[:k]


def event_of(rng: Any, offset: int | None) -> EventSpan | None:
    """A stored event (a tstzrange and the offset it was read in) as a candidate carries it."""
    if rng is None or rng.isempty or rng.lower is None or rng.upper is None:
        return None
    zone = timezone(timedelta(seconds=offset or 0))
    return EventSpan(rng.lower.astimezone(zone), rng.upper.astimezone(zone))


def _drop_none(*xs: Any) -> list[Any]:
    vals = [x for x in xs if x is not None]
    return vals or [None]


def _np(v: Any) -> np.ndarray:
    return v.to_numpy() if hasattr(v, "to_numpy") else np.asarray(v, dtype=np.float32)


async def candidates(
    run: SearchRun,
    conn: asyncpg.Connection,
    rows: list[asyncpg.Record],
    source: Source,
    score_key: str = "score",
) -> list[tuple[asyncpg.Record, Candidate]]:
    """Each row with its candidate, the long contents completed on the leg's connection (a
    memory deleted since its row was read is left out)."""
    texts = await run.contents.of(conn, run.filters.namespace, rows, timeout=run.timeout_s)
    return [
        (
            r,
            Candidate(
                id=r["id"],
                external_id=r["external_id"],
                content=text,
                title=r["title"],
                memory_type=r["memory_type"],
                source_type=r["source_type"],
                metadata=r["metadata"],
                created_at=r["created_at"],
                embedding=_np(r["embedding"]),
                score=float(r[score_key]),
                source=source,
                fact=r["fact"],
                event=event_of(r["event_time"], r["event_offset"]),
            ),
        )
        for r, text in zip(rows, texts, strict=True)
        if text is not None
    ]


async def found(
    run: SearchRun, conn: asyncpg.Connection, rows: list[asyncpg.Record], source: Source
) -> list[Candidate]:
    """The rows as candidates of `source` (see candidates())."""
    return [c for _, c in await candidates(run, conn, rows, source)]
