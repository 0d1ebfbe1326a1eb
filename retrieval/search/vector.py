"""The vector legs: the query's nearest memories by inner product (HNSW, or exact distances in a
small window), the long memories' nearest passages beside them, inside the query's window
(`temporal`), and among older memories (`vector_global`, the exploration slot)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any, TypeVar

import asyncpg

from retrieval.models import Candidate, Source, TimeRange
from retrieval.search.run import (
    COLS,
    WHERE,
    Given,
    SearchRun,
    Skip,
    best_of,
    candidates,
    found,
    leg_connection,
)

T = TypeVar("T")


def _knn_sql(order: str) -> str:
    return f"""
SELECT {COLS}, -(m.embedding <#> $6) AS score
FROM memories m WHERE {WHERE}
ORDER BY {order} LIMIT $7"""


# Returns the k nearest live memories by inner product (HNSW; iterative scan under filters): the
# cosine for a unit vector, the mean of two cosines for a turn's (retrieval/ingest/recipe.py).
VECTOR_SQL = _knn_sql("m.embedding <#> $6")

# The same without the HNSW index: exact distances to every memory that passes the filters. The
# `+ 0` keeps the planner off the index (it serves only a bare `embedding <#> constant` order).
EXACT_VECTOR_SQL = _knn_sql("(m.embedding <#> $6) + 0")


def _window_sql(dist: str) -> str:
    return f"""
SELECT {COLS}, -v.dist AS score
FROM (
  SELECT v.memory_id, {dist} AS dist FROM memory_vectors v
  WHERE v.namespace = $1
    AND v.created_at >= coalesce($4::timestamptz, '-infinity')
    AND v.created_at < coalesce($5::timestamptz, 'infinity')
    AND (v.expires_at IS NULL OR v.expires_at > now())
    AND (cardinality($2::text[]) = 0 OR v.memory_type = ANY($2::text[]))
    AND (cardinality($3::text[]) = 0 OR v.source_type = ANY($3::text[]))
  ORDER BY {dist} LIMIT $7) AS v
JOIN memories m ON m.id = v.memory_id
WHERE {WHERE}
ORDER BY v.dist LIMIT $7"""


# The same inside a time window, over the weekly partitions of memory_vectors (migration 0009):
# the window prunes the weeks outside it, each week in it is walked over its own HNSW graph
# (its rows mostly in the window, so the walk keeps what it visits), and the merged nearest
# are joined back to memories, which checks every filter again. An open end is ±infinity, so
# the bounds stay plain comparisons the executor prunes by.
WINDOW_VECTOR_SQL = _window_sql("v.embedding <#> $6")

# The same, exactly: every live memory in the window by its weekly copy, found by namespace and
# created_at (migration 0010), whose vector is stored inline (in `memories` it is TOASTed:
# p50 22 ms against 5 ms for the 4,757 memories of a day at 1M). `+ 0` keeps off the graphs.
EXACT_WINDOW_SQL = _window_sql("(v.embedding <#> $6) + 0")

# Returns how many memories of a namespace lie in [$2, $3), counting at most $4 of them
# (an index-only scan of (namespace, created_at)).
WINDOW_COUNT_SQL = """
SELECT count(*) FROM (
  SELECT 1 FROM memories m WHERE m.namespace = $1
    AND ($2::timestamptz IS NULL OR m.created_at >= $2) AND ($3::timestamptz IS NULL OR m.created_at < $3)
  LIMIT $4) AS w"""

# A window holding at most this many memories is searched exactly. Measured at 1M memories
# (docs/benchmarks-log.md): HNSW with an iterative scan took 45-110 ms for a 1-day window of 3.8k
# memories, where only ~0.4 % of the graph passes the filter; exact distances to those 3.8k took
# 18 ms, and are exact. Past a few thousand rows exact distances cost more than the graph walk.
# Over the weekly copies (0009, 0010) a 1-day window of 4,757 costs 5 ms exactly (p50).
EXACT_WINDOW_MAX = 5000

# Returns how many passages (migration 0014) namespace $1 holds, counting at most $2.
PASSAGE_COUNT_SQL = """
SELECT count(*) FROM (SELECT 1 FROM memory_passages p WHERE p.namespace = $1 LIMIT $2) AS x"""


# Passages read per memory wanted: a long memory's best few are often near each other, so the
# nearest k passages alone would name fewer than k memories.
PASSAGES_PER_HIT = 2


def _passage_sql(order: str) -> str:
    return f"""
WITH p AS (
  SELECT p.memory_id, p.start_char, p.end_char, -(p.embedding <#> $6) AS score
  FROM memory_passages p WHERE p.namespace = $1 ORDER BY {order} LIMIT $7 * {PASSAGES_PER_HIT}),
best AS (
  SELECT p.memory_id, max(p.score) AS score,
         array_agg(p.start_char ORDER BY p.score DESC) AS starts,
         array_agg(p.end_char ORDER BY p.score DESC) AS ends,
         array_agg(p.score ORDER BY p.score DESC) AS scores
  FROM p GROUP BY p.memory_id)
SELECT {COLS}, b.score, b.starts, b.ends, b.scores
FROM best b JOIN memories m ON m.id = b.memory_id
WHERE {WHERE}
ORDER BY b.score DESC, m.id"""


# Returns the live memories whose passages are among the 2 x $7 nearest of namespace $1 (HNSW),
# each scored by its best, with the passages found ([start, end) and score, best first). The
# other filters apply to the memories: a filtered search can find fewer.
PASSAGE_VECTOR_SQL = _passage_sql("p.embedding <#> $6")
# The same by exact distances to every passage of the namespace (by its index): a namespace
# with few passages among many of other namespaces would walk most of the graph for them.
EXACT_PASSAGE_SQL = _passage_sql("(p.embedding <#> $6) + 0")


async def _knn(
    run: SearchRun, vectors: tuple[Any, ...], source: Source, window: TimeRange | None
) -> list[Candidate]:
    """The memories nearest `vectors` (each memory at its best, passages included), the k best.
    The passages' search runs beside the memories' on a connection of its own; when either
    fails (or the leg is given up) the other is stopped at once and the leg fails as the
    failed one did, both connections given back."""
    args = run.where_args(window)
    passages: asyncio.Future[list[Candidate]] | None = None
    try:
        async with leg_connection(run) as conn:
            if window is None:
                n = await conn.fetchval(
                    PASSAGE_COUNT_SQL, args[0], EXACT_WINDOW_MAX + 1, timeout=run.timeout_s
                )
                if n:
                    # The leg is on every request's critical path (it starts only once the
                    # query is embedded), and the two searches do not depend on each other.
                    passages = asyncio.ensure_future(_passage_knn(run, vectors, source, args, n))
            best = await _until_either_fails(
                _memory_knn(run, conn, vectors, source, args), passages
            )
        # Waited for with this connection given back: with one connection slot the
        # passages' search takes it.
        found = await passages if passages is not None else []
    except BaseException:
        if passages is not None:
            passages.cancel()
            await asyncio.gather(passages, return_exceptions=True)
        raise
    _add_passages(best, found)
    # relaxed_order iterative scans may return rows slightly out of order
    return sorted(best.values(), key=lambda c: c.score, reverse=True)[: run.k]


async def _until_either_fails(
    search: Coroutine[Any, Any, T], beside: asyncio.Future[Any] | None
) -> T:
    """What `search` finds; its error, or `beside`'s as soon as that fails first (`search`
    stopped then, and whenever this is given up, before its connection is handed back)."""
    if beside is None:
        return await search
    task = asyncio.ensure_future(search)
    try:
        await asyncio.wait((task, beside), return_when=asyncio.FIRST_COMPLETED)
        if beside.done() and not task.done():
            beside.result()  # its error, if it failed
        return await task
    except BaseException:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise


def window_sql(in_window: int) -> str:
    """The statement for a windowed search whose window holds `in_window` memories (counted
    up to EXACT_WINDOW_MAX + 1): exact distances for a small window, else the weekly graphs."""
    return EXACT_WINDOW_SQL if in_window <= EXACT_WINDOW_MAX else WINDOW_VECTOR_SQL


async def _memory_knn(
    run: SearchRun,
    conn: asyncpg.Connection,
    vectors: tuple[Any, ...],
    source: Source,
    args: tuple[Any, ...],
) -> dict[int, Candidate]:
    """The memories nearest the query's vectors by their own vector, each at its best."""
    best: dict[int, Candidate] = {}
    sql = VECTOR_SQL
    if args[3] is not None or args[4] is not None:
        n = await conn.fetchval(
            WINDOW_COUNT_SQL, args[0], args[3], args[4], EXACT_WINDOW_MAX + 1, timeout=run.timeout_s
        )
        sql = window_sql(n)
    for vec in vectors:
        rows = await conn.fetch(sql, *args, vec, run.k, timeout=run.timeout_s)
        for c in await found(run, conn, rows, source):
            if c.id not in best or c.score > best[c.id].score:
                best[c.id] = c
    return best


async def _passage_knn(
    run: SearchRun, vectors: tuple[Any, ...], source: Source, args: tuple[Any, ...], n: int
) -> list[Candidate]:
    """The memories whose passages are nearest the query's vectors (for each vector in turn;
    `n`: how many passages the namespace holds, counted up to EXACT_WINDOW_MAX + 1), each
    scored by its best passage and carrying the passages found."""
    out: list[Candidate] = []
    sql = EXACT_PASSAGE_SQL if n <= EXACT_WINDOW_MAX else PASSAGE_VECTOR_SQL
    async with leg_connection(run) as conn:
        for vec in vectors:
            rows = await conn.fetch(sql, *args, vec, run.k, timeout=run.timeout_s)
            for r, c in await candidates(run, conn, rows, source):
                c.passages = tuple(
                    zip(r["starts"], r["ends"], map(float, r["scores"]), strict=True)
                )
                out.append(c)
    return out


def _add_passages(best: dict[int, Candidate], found: list[Candidate]) -> None:
    """Add what the passages found to `best` (in order): a memory scores its best passage when
    that beats its own vector (max-sim), and carries the passages found."""
    for c in found:
        old = best.get(c.id)
        if old is not None:
            merged = {(a, b): x for a, b, x in (*old.passages, *c.passages)}
            joined = tuple(sorted(((a, b, x) for (a, b), x in merged.items()), key=lambda p: -p[2]))
            if old.score >= c.score:
                old.passages = joined
                continue
            c.passages = joined
        best[c.id] = c


async def vector(run: SearchRun, given: Given) -> list[Candidate]:
    """Nearest neighbours of the query (and of the conversation and query, when a conversation
    is given)."""
    return await _knn(run, given.vectors, Source.VECTOR, None)


# Returns the live memories whose event (what they tell happened: migration 0021) overlaps
# [$8, $9) (a bound NULL: open), wherever they were written, nearest the query first (exact
# distances: the GiST index on event_time finds them, and a window holds few).
EVENT_WINDOW_SQL = f"""
SELECT {COLS}, -(m.embedding <#> $6) AS score
FROM memories m WHERE {WHERE}
  AND m.event_time && tstzrange($8::timestamptz, $9::timestamptz)
ORDER BY (m.embedding <#> $6) + 0 LIMIT $7"""


async def temporal(run: SearchRun, given: Given) -> list[Candidate]:
    """Nearest neighbours inside the query's time window by either clock: written in it, or
    telling of what happened in it (the memory's event); nothing without a window."""
    if run.window is None:
        raise Skip("the query names no time window")
    # The two clocks side by side, each on a connection of its own: one failing (or the leg
    # given up) stops the other, as the passages' search beside the memories' does.
    events = asyncio.ensure_future(_event_knn(run, given.vectors, run.window))
    try:
        written = await _until_either_fails(
            _knn(run, given.vectors, Source.TEMPORAL, run.window), events
        )
        told = await events
    except BaseException:
        events.cancel()
        await asyncio.gather(events, return_exceptions=True)
        raise
    return best_of([*written, *told], run.k)


async def _event_knn(
    run: SearchRun, vectors: tuple[Any, ...], window: TimeRange
) -> list[Candidate]:
    """The memories whose event overlaps the window (its soft edges included), nearest each of
    the query's vectors (a memory near several comes once for each: `temporal` keeps its best);
    the hard filters (and the caller's now) apply to when they were written."""
    args = run.where_args(None)
    start, end = window.outer_start, window.outer_end
    out: list[Candidate] = []
    async with leg_connection(run) as conn:
        for vec in vectors:
            rows = await conn.fetch(
                EVENT_WINDOW_SQL, *args, vec, run.k, start, end, timeout=run.timeout_s
            )
            out += await found(run, conn, rows, Source.TEMPORAL)
    return out


# The exploration slot searches memories older than this before `now`: recency decay and the
# newest near-copies of a topic must not hide what was said about it long ago.
EXPLORE_AFTER = timedelta(days=90)


async def vector_global(run: SearchRun, given: Given) -> list[Candidate]:
    """Nearest neighbours of the query among memories older than EXPLORE_AFTER."""
    if run.now is None:
        raise Skip("no request time to measure the past from")
    window = TimeRange(None, run.now - EXPLORE_AFTER)
    return await _knn(run, given.vectors, Source.VECTOR_GLOBAL, window)
