"""Search sources: one async signature, one registry. Each takes its own pool connection.

Every source honours the namespace, memory/source type filters, an optional hard time window,
expiry, archive and `searchable` through the same WHERE clause ($1..$5).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager, nullcontext
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any

import asyncpg
import numpy as np

from retrieval.analysis.answers import AnswerKind, asks_about, gives, mentions
from retrieval.analysis.nlp import normalize_entity
from retrieval.models import (
    ANSWERS_QUESTION,
    Candidate,
    Filters,
    Hop,
    QueryIntent,
    Source,
    TimeRange,
)
from retrieval.search.contents import Contents, columns

# A long content travels by reference (retrieval.search.contents): Contents.of() completes the rows.
_COLS = (
    f"m.id, m.external_id, {columns('m')}, "
    "m.title, m.memory_type, m.source_type, m.metadata, m.created_at, m.embedding"
)

# $1 namespace, $2 memory types (empty = any), $3 source types, $4/$5 window [start, end).
_WHERE = """m.namespace = $1 AND NOT m.is_archived AND m.searchable
  AND (m.expires_at IS NULL OR m.expires_at > now())
  AND (cardinality($2::text[]) = 0 OR m.memory_type = ANY($2::text[]))
  AND (cardinality($3::text[]) = 0 OR m.source_type = ANY($3::text[]))
  AND ($4::timestamptz IS NULL OR m.created_at >= $4)
  AND ($5::timestamptz IS NULL OR m.created_at < $5)"""


def _knn_sql(order: str) -> str:
    return f"""
SELECT {_COLS}, -(m.embedding <#> $6) AS score
FROM memories m WHERE {_WHERE}
ORDER BY {order} LIMIT $7"""


# Returns the k nearest live memories by inner product (HNSW; iterative scan under filters): the
# cosine for a unit vector, the mean of two cosines for a turn's (retrieval/ingest/turns.py).
VECTOR_SQL = _knn_sql("m.embedding <#> $6")

# The same without the HNSW index: exact distances to every memory that passes the filters. The
# `+ 0` keeps the planner off the index (it serves only a bare `embedding <#> constant` order).
EXACT_VECTOR_SQL = _knn_sql("(m.embedding <#> $6) + 0")


def _window_sql(dist: str) -> str:
    return f"""
SELECT {_COLS}, -v.dist AS score
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
WHERE {_WHERE}
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
# (docs/benchmarks.md): HNSW with an iterative scan took 45-110 ms for a 1-day window of 3.8k
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
SELECT {_COLS}, b.score, b.starts, b.ends, b.scores
FROM best b JOIN memories m ON m.id = b.memory_id
WHERE {_WHERE}
ORDER BY b.score DESC, m.id"""


# Returns the live memories whose passages are among the 2 x $7 nearest of namespace $1 (HNSW),
# each scored by its best, with the passages found ([start, end) and score, best first). The
# other filters apply to the memories: a filtered search can find fewer.
PASSAGE_VECTOR_SQL = _passage_sql("p.embedding <#> $6")
# The same by exact distances to every passage of the namespace (by its index): a namespace
# with few passages among many of other namespaces would walk most of the graph for them.
EXACT_PASSAGE_SQL = _passage_sql("(p.embedding <#> $6) + 0")

# Returns document frequency and IDF of the query's lexemes, with the namespace's average length.
TERM_STATS_SQL = """
SELECT l.lexeme AS term, d.df, s.doc_count,
       ln(1 + (s.doc_count - d.df + 0.5) / (d.df + 0.5)) AS idf,
       greatest(s.total_tokens::float8 / nullif(s.doc_count, 0), 1) AS avgdl
FROM unnest(to_tsvector('simple', $2)) AS l
JOIN term_df d ON d.namespace = $1 AND d.term = l.lexeme AND d.df > 0
JOIN namespace_stats s ON s.namespace = $1"""

# Returns the k best live memories by BM25 over the Japanese token column. Per query term, its
# $10 highest-impact postings (all of them for a rarer term: exact BM25 there); IDF and average
# length from term_df/namespace_stats; the filters are checked best score first (equal scores by
# row id, so that which of them make the k does not change with the plan). Terms arrive as an
# array parameter, so user text never reaches SQL or tsquery syntax.
KEYWORD_SQL = f"""
WITH q AS (SELECT * FROM unnest($6::text[], $7::float8[]) AS q(term, idf)),
hits AS (
  SELECT p.memory_id,
         sum(q.idf * (p.tf * ($8::float8 + 1))
             / (p.tf + $8::float8 * (1 - $9::float8 + $9::float8 * p.dl / $11::float8))) AS score
  FROM q CROSS JOIN LATERAL (
    SELECT p.memory_id, p.tf, p.dl FROM postings p
    WHERE p.namespace = $1 AND p.term = q.term
    ORDER BY p.impact DESC LIMIT $10) AS p
  GROUP BY p.memory_id)
SELECT {_COLS}, h.score
FROM (SELECT * FROM hits ORDER BY score DESC, memory_id) AS h
CROSS JOIN LATERAL (SELECT m.*, m.xmin FROM memories m WHERE m.id = h.memory_id AND {_WHERE}) AS m
ORDER BY h.score DESC, h.memory_id LIMIT $12"""

# Postings read per query term, best impact first. A term in more memories than this is common
# (IDF low): only its strongest postings count. Measured: 2,000 keeps JSQuAD's MRR (13.4k
# passages) and bounds the leg at 1M memories (docs/benchmarks.md).
POSTINGS_PER_TERM = 2000

MAX_TRIGRAM_TERMS = 6

# An entity named by more memories than this (or than this share of the namespace, at least
# five) says nothing about which ones belong together: プロジェクト in a diary of projects.
ENTITY_MAX_DF = 50
ENTITY_MAX_DF_SHARE = 0.05


def _trigram_sql(n: int) -> str:
    # One pg_trgm GIN bitmap scan per name (a branch each, no other condition, so that index is
    # the only way in), summed per memory; the filters apply to the matches. An OR of ILIKEs in
    # one WHERE was planned as a scan of the namespace: ILIKE on long Japanese text costs ~10 us
    # a row, which the planner does not know (715 ms on the 13.4k JSQuAD passages; this: 13 ms).
    # Scoring is containment only: word_similarity() on every match cost seconds on common names.
    # Each branch is confined to the namespace, so another tenant's rows are never joined
    # (their cost still shows in the shared index's bitmap, which holds every namespace).
    branches = " UNION ALL ".join(
        f"SELECT id, ($8::float8[])[{i + 1}] AS w FROM memories WHERE namespace = $1 AND content ILIKE ${9 + i}"
        for i in range(n)
    )
    return f"""
WITH hit AS (SELECT b.id, sum(b.w) AS w FROM ({branches}) AS b GROUP BY b.id)
SELECT {_COLS}, hit.w::float8 / $6::float8 AS score
FROM hit JOIN memories m ON m.id = hit.id
WHERE {_WHERE}
ORDER BY score DESC, m.created_at DESC, m.id LIMIT $7"""


# Returns live memories containing any of 1..6 name-like strings ($9...), scored by the share
# of the strings' weights ($8, their rarity) that they contain. Index = number of strings.
TRIGRAM_SQL = {n: _trigram_sql(n) for n in range(1, MAX_TRIGRAM_TERMS + 1)}


class Skip(Exception):
    """The source has nothing to search for in this query (no window, no keywords, no names)."""


# The keyword leg scores at most this many of a query's terms (the rarest): its postings read
# grew with every distinct term of a query of up to 2,000 characters. Every question of the dev
# sets has fewer.
MAX_QUERY_TERMS = 32


# Sets the current transaction's statement timeout (milliseconds, as text) and plan cache mode,
# in one round trip.
SET_LEG_SETTINGS = (
    "SELECT set_config('statement_timeout', $1, true), set_config('plan_cache_mode', $2, true)"
)


@asynccontextmanager
async def leg_connection(
    ctx: SearchContext, *, generic_plan: bool = False
) -> AsyncIterator[asyncpg.Connection]:
    """A pool connection in a read-only transaction that the server itself cancels at the leg's
    deadline: a query whose caller has given up must not run on and hold the connection. Taken
    within the request's connection budget (`ctx.slots`), waited for inside the leg's deadline.

    `generic_plan`: the statement is planned once per connection, not at every execution (the
    pool's default, for statements whose best plan depends on which filters are set). For the
    statements that start from a few given rows (the hops from their seeds, the results'
    context) the plan is the same whatever the values, and planning cost as much as running:
    on LoCoMo 1.3 of 2.7 ms for the entity hop, 0.85 of 1.3 ms for the context
    (docs/benchmarks.md, "tenth release: planned once")."""
    async with (
        ctx.slots if ctx.slots is not None else nullcontext(),
        ctx.pool.acquire(timeout=ctx.timeout_s) as conn,
        conn.transaction(readonly=True),
    ):
        await conn.execute(
            SET_LEG_SETTINGS,
            str(max(1, int(ctx.timeout_s * 1000))),
            "force_generic_plan" if generic_plan else "force_custom_plan",
        )
        yield conn


@dataclass
class SearchContext:
    """What a source needs: the pool, the analysed query, its vectors and filters."""

    pool: asyncpg.Pool
    intent: QueryIntent
    vectors: list[np.ndarray]
    filters: Filters
    k: int
    window: TimeRange | None = None
    timeout_s: float = 1.0
    bm25_k1: float = 1.2
    bm25_b: float = 0.75
    postings_per_term: int = POSTINGS_PER_TERM
    # The first wave's best candidates (external id, fused score), for the expansion sources.
    seeds: tuple[tuple[str, float], ...] = ()
    # Seeds that are long memories (split into passages): the entity source does not start
    # from them (entity()).
    long_seeds: frozenset[str] = frozenset()
    entity_max_df: int = ENTITY_MAX_DF
    entity_min_seeds: int = 1
    # The request's "now" (the exploration slot searches before now - EXPLORE_AFTER).
    now: datetime | None = None
    # The read replica `pool` belongs to (a retry goes to the primary), or None: the primary.
    replica: Any = None
    debug: dict[str, Any] = field(default_factory=dict)
    # The request's connection budget: at most this many of its legs hold a pooled connection
    # at once (None: no bound), so that a few requests cannot hold the whole pool.
    slots: asyncio.Semaphore | None = None
    # Where the long contents the legs return by reference come from (the orchestrator's).
    contents: Contents = field(default_factory=Contents)

    def where_args(self, window: TimeRange | None = None) -> tuple[Any, ...]:
        f = self.filters
        # A fuzzy window (先週頃) is searched with its soft edges; the reranker tells them apart.
        start = f.start if window is None else max(_drop_none(f.start, window.outer_start))
        end = f.end if window is None else min(_drop_none(f.end, window.outer_end))
        return (f.namespace, list(f.memory_types), list(f.source_types), start, end)


def _drop_none(*xs: Any) -> list[Any]:
    vals = [x for x in xs if x is not None]
    return vals or [None]


def _np(v: Any) -> np.ndarray:
    return v.to_numpy() if hasattr(v, "to_numpy") else np.asarray(v, dtype=np.float32)


SourceFn = Callable[[SearchContext], Awaitable[list[Candidate]]]


async def _candidates(
    ctx: SearchContext,
    conn: asyncpg.Connection,
    rows: list[asyncpg.Record],
    source: Source,
    score_key: str = "score",
) -> list[tuple[asyncpg.Record, Candidate]]:
    """Each row with its candidate, the long contents completed on the leg's connection (a
    memory deleted since its row was read is left out)."""
    texts = await ctx.contents.of(conn, ctx.filters.namespace, rows, timeout=ctx.timeout_s)
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
            ),
        )
        for r, text in zip(rows, texts, strict=True)
        if text is not None
    ]


async def _rows(
    ctx: SearchContext, conn: asyncpg.Connection, rows: list[asyncpg.Record], source: Source
) -> list[Candidate]:
    return [c for _, c in await _candidates(ctx, conn, rows, source)]


async def _knn(ctx: SearchContext, source: Source, window: TimeRange | None) -> list[Candidate]:
    args = ctx.where_args(window)
    passages: asyncio.Future[list[Candidate]] | None = None
    try:
        async with leg_connection(ctx) as conn:
            if window is None:
                n = await conn.fetchval(
                    PASSAGE_COUNT_SQL, args[0], EXACT_WINDOW_MAX + 1, timeout=ctx.timeout_s
                )
                if n:
                    # The passages' graph is searched beside the memories', on a connection
                    # of its own: the leg is on every request's critical path (it starts only
                    # once the query is embedded), and the two searches do not depend on each
                    # other.
                    passages = asyncio.ensure_future(_passage_knn(ctx, source, args, n))
            best = await _memory_knn(ctx, conn, source, args)
        # Waited for with this connection given back: with a budget of one connection the
        # passages' search takes it.
        found = await passages if passages is not None else []
    except BaseException:
        # The leg fails (or is given up) as the failed search did, once the other search has
        # stopped and given its connection back.
        if passages is not None:
            passages.cancel()
            await asyncio.gather(passages, return_exceptions=True)
        raise
    _add_passages(best, found)
    # relaxed_order iterative scans may return rows slightly out of order
    return sorted(best.values(), key=lambda c: c.score, reverse=True)[: ctx.k]


async def _memory_knn(
    ctx: SearchContext, conn: asyncpg.Connection, source: Source, args: tuple[Any, ...]
) -> dict[int, Candidate]:
    """The memories nearest the query's vectors by their own vector, each at its best."""
    best: dict[int, Candidate] = {}
    sql = VECTOR_SQL
    if args[3] is not None or args[4] is not None:
        n = await conn.fetchval(
            WINDOW_COUNT_SQL, args[0], args[3], args[4], EXACT_WINDOW_MAX + 1, timeout=ctx.timeout_s
        )
        sql = EXACT_WINDOW_SQL if n <= EXACT_WINDOW_MAX else WINDOW_VECTOR_SQL
        ctx.debug[f"{source.value}_exact"] = sql is EXACT_WINDOW_SQL
    for vec in ctx.vectors:
        rows = await conn.fetch(sql, *args, vec, ctx.k, timeout=ctx.timeout_s)
        for c in await _rows(ctx, conn, rows, source):
            if c.id not in best or c.score > best[c.id].score:
                best[c.id] = c
    return best


async def _passage_knn(
    ctx: SearchContext, source: Source, args: tuple[Any, ...], n: int
) -> list[Candidate]:
    """The memories whose passages are nearest the query's vectors (for each vector in turn;
    `n`: how many passages the namespace holds, counted up to EXACT_WINDOW_MAX + 1), each
    scored by its best passage and carrying the passages found."""
    out: list[Candidate] = []
    sql = EXACT_PASSAGE_SQL if n <= EXACT_WINDOW_MAX else PASSAGE_VECTOR_SQL
    async with leg_connection(ctx) as conn:
        for vec in ctx.vectors:
            rows = await conn.fetch(sql, *args, vec, ctx.k, timeout=ctx.timeout_s)
            for r, c in await _candidates(ctx, conn, rows, source):
                c.passages = tuple(
                    zip(r["starts"], r["ends"], map(float, r["scores"]), strict=True)
                )
                out.append(c)
    return out


def _add_passages(best: dict[int, Candidate], found: list[Candidate]) -> None:
    """Add what the passages found to `best` (in order): a memory scores its best passage when
    that beats its own vector (max-sim), and carries the passages found (issue #25)."""
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


async def vector(ctx: SearchContext) -> list[Candidate]:
    """Nearest neighbours of the query (and of context + query, when a conversation is given)."""
    return await _knn(ctx, Source.VECTOR, None)


async def temporal(ctx: SearchContext) -> list[Candidate]:
    """Nearest neighbours inside the query's time window; nothing without one."""
    if ctx.window is None:
        raise Skip("the query names no time window")
    return await _knn(ctx, Source.TEMPORAL, ctx.window)


async def keyword(ctx: SearchContext) -> list[Candidate]:
    """BM25 over the Sudachi tokens of any of the query's keywords, from impact-ordered postings."""
    if not ctx.intent.keywords:
        raise Skip("the query has no keywords")
    text = " ".join(ctx.intent.keywords)
    async with leg_connection(ctx) as conn:
        stats = await conn.fetch(TERM_STATS_SQL, ctx.filters.namespace, text, timeout=ctx.timeout_s)
        if not stats:
            return []
        # The rarest terms carry the score; the rest would only grow the postings read.
        stats = sorted(stats, key=lambda r: float(r["idf"]), reverse=True)[:MAX_QUERY_TERMS]
        terms = [r["term"] for r in stats]
        ctx.debug["keyword_terms"] = terms
        rows = await conn.fetch(
            KEYWORD_SQL,
            *ctx.where_args(),
            terms,
            [float(r["idf"]) for r in stats],
            ctx.bm25_k1,
            ctx.bm25_b,
            ctx.postings_per_term,
            float(stats[0]["avgdl"]),
            ctx.k,
            timeout=ctx.timeout_s,
        )
        return await _rows(ctx, conn, rows, Source.KEYWORD)


def like_escape(term: str) -> str:
    """Escape LIKE's wildcards (and its escape character) in a literal."""
    return term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def trigram_terms(intent: QueryIntent) -> list[tuple[str, str]]:
    """Name-like strings of three or more characters (a trigram index needs three), each with
    its index terms."""
    index_terms = dict(zip(intent.name_terms, intent.name_index_terms, strict=False))
    terms = [t for t in intent.name_terms if len(t) >= 3]
    seen: set[str] = set()
    out = []
    for t in sorted(terms, key=len, reverse=True):
        if not any(t.lower() in s.lower() for s in seen):
            seen.add(t)
            out.append((t, index_terms.get(t, t)))
    return out[:MAX_TRIGRAM_TERMS]


# Returns, for each name (by position), an upper bound of how many memories contain it: the
# smallest document frequency of its lexemes (0 when one of them occurs nowhere), and the
# namespace size.
NAME_DF_SQL = """
SELECT n.i::int AS i,
       CASE WHEN count(d.df) < count(*) THEN 0 ELSE min(d.df) END AS df,
       max(s.doc_count) AS doc_count
FROM unnest($2::text[]) WITH ORDINALITY AS n(name, i)
CROSS JOIN LATERAL unnest(to_tsvector('simple', n.name)) AS l
LEFT JOIN term_df d ON d.namespace = $1 AND d.term = l.lexeme
CROSS JOIN namespace_stats s
WHERE s.namespace = $1
GROUP BY n.i"""


def name_max_df(doc_count: int) -> float:
    """How many memories a name may be in and still pick memories out: 1 % of a large
    namespace, 20 of a middling one, 5 % of a small one (プロジェクト in 15 of a diary's 150
    memories is a word of the diary, not a name), and 2 of a tiny one."""
    return max(0.01 * doc_count, min(20.0, max(2.0, 0.05 * doc_count)))


def name_weight(df: int, doc_count: int) -> float:
    """A name counts by how rare it is (BM25's IDF of its rarest word, an upper bound of how many
    memories hold the whole name): 木村翔太 in two memories outweighs プロジェクト in fifteen,
    which a weight by length would not."""
    return math.log(1 + (doc_count - df + 0.5) / (df + 0.5))


async def trigram(ctx: SearchContext) -> list[Candidate]:
    """Character n-gram matches of names and model numbers that tokenizers split badly."""
    pairs = trigram_terms(ctx.intent)
    if not pairs:
        raise Skip("the query names nothing to match character by character")
    terms = [t for t, _ in pairs]
    async with leg_connection(ctx) as conn:
        weights: dict[int, float] = {}
        for r in await conn.fetch(
            NAME_DF_SQL, ctx.filters.namespace, [x for _, x in pairs], timeout=ctx.timeout_s
        ):
            if r["df"] <= name_max_df(r["doc_count"]):
                weights[r["i"] - 1] = name_weight(r["df"], r["doc_count"])
        kept = [(t, weights[i]) for i, t in enumerate(terms) if i in weights]
        if not kept:
            return []
        patterns = ["%" + like_escape(t) + "%" for t, _ in kept]
        w = [x for _, x in kept]
        # The trigram index or nothing: a sequential scan would ILIKE every memory.
        await conn.execute("SET LOCAL enable_seqscan = off")
        rows = await conn.fetch(
            TRIGRAM_SQL[len(kept)],
            *ctx.where_args(),
            sum(w),
            ctx.k,
            w,
            *patterns,
            timeout=ctx.timeout_s,
        )
        return await _rows(ctx, conn, rows, Source.TRIGRAM)


# --- Expansion: a second wave from the seeds (the first wave's best candidates). ---
# These sources only fetch what a seed reaches and say how (Candidate.hop); how much a hop
# counts is the reranker's policy (rerank.expand).

_SEEDS = "unnest($6::text[], $7::float8[]) AS s(ext, score)"


# The query's keyword terms this namespace holds, with their IDF ($9: the keywords as text):
# what a hop adds to its seed is weighed by them. Each hop statement computes them itself, so it
# depends on no other leg (the keyword leg may have timed out) and costs no round trip.
_QUERY_TERMS = """qt AS (
  SELECT l.lexeme AS term, ln(1 + (st.doc_count - d.df + 0.5) / (d.df + 0.5))::float8 AS idf
  FROM unnest(to_tsvector('simple', $9)) AS l
  JOIN term_df d ON d.namespace = $1 AND d.term = l.lexeme AND d.df > 0
  JOIN namespace_stats st ON st.namespace = $1)"""


def _holds(m: str, term: str) -> str:
    """Whether memory `m` holds the keyword term: its posting (a key lookup), not `term_tf ?`,
    which reads the memory's whole term map again for every term (a long memory's is large)."""
    return f"EXISTS (SELECT 1 FROM postings p WHERE p.memory_id = {m}.id AND p.term = {term})"


def _held(m: str) -> str:
    """The query's terms (qt) memory `m` holds: key lookups in its postings."""
    return (
        f"ARRAY(SELECT p.term FROM postings p WHERE p.memory_id = {m}.id "
        "AND p.term = ANY (ARRAY(SELECT term FROM qt)))"
    )


# IDF mass of the query's terms that the seed `sm` holds, that the seed and the memory `m` hold
# together (what the hop adds to the seed), and of all of them.
_COVERAGE = (
    f"(SELECT coalesce(sum(qt.idf), 0) FROM qt WHERE qt.term = ANY ({_held('sm')})) AS seed_cov, "
    f"(SELECT coalesce(sum(qt.idf), 0) FROM qt WHERE qt.term = ANY ({_held('sm')} || {_held('m')})) AS union_cov, "
    "(SELECT coalesce(sum(qt.idf), 0) FROM qt) AS query_idf"
)


# The seed's text, by reference when it is long (retrieval.search.contents): a seed is on many rows (a
# thread's 200), and a long seed's whole text on each was up to 200 times its length a request.
_SEED_TEXT = f"{columns('sm', 'seed_')}, sm.id AS seed_id"


# Returns live memories one link away from a seed, either direction (a reply to a seed, the
# question a seed replies to), with the seed, the label and the direction.
LINKS_SQL = f"""
WITH s AS (SELECT * FROM {_SEEDS}), {_QUERY_TERMS},
l AS (
  SELECT s.ext AS seed, s.score, l.label, l.to_external AS other, 'to' AS dir
  FROM s JOIN memory_links l ON l.namespace = $1 AND l.from_external = s.ext
  UNION ALL
  SELECT s.ext, s.score, l.label, l.from_external, 'from'
  FROM s JOIN memory_links l ON l.namespace = $1 AND l.to_external = s.ext)
SELECT {_COLS}, l.seed, l.score AS seed_score, l.label, l.dir, {_SEED_TEXT},
       right(sm.content, 1) IN ('?', '？') OR right(sm.content, 3) ~ '(か|かな|の)[。！!]?$' AS seed_asks, {_COVERAGE}
FROM l JOIN memories m ON m.namespace = $1 AND m.external_id = l.other
JOIN memories sm ON sm.namespace = $1 AND sm.external_id = l.seed
WHERE {_WHERE}
ORDER BY l.score DESC, m.created_at, m.id
LIMIT $8"""

# Returns live memories that name an entity one of the seeds names: a bridge, so not one the
# query itself names ($13, the normalised query: what the query names, the first wave already
# searched for). Entities named by more memories than $10 or than a share $12 of the namespace
# (at least 5; counted up to that cap + 1), or by fewer than $11 seeds, are skipped. Each
# memory once (by its best seed), the $8 reached through the best seeds; $14 the focus.
ENTITY_SQL = f"""
WITH s AS (SELECT * FROM {_SEEDS}), {_QUERY_TERMS},
ent AS (
  SELECT e.entity, max(s.score * e.weight) AS score, (array_agg(s.ext ORDER BY s.score * e.weight DESC))[1] AS seed,
         count(*) AS seeds
  FROM s JOIN memories sm ON sm.namespace = $1 AND sm.external_id = s.ext
  JOIN memory_entities e ON e.memory_id = sm.id
  WHERE strpos($13, e.entity) = 0
  GROUP BY e.entity HAVING count(*) >= $11),
cap AS (
  SELECT least($10::float8, greatest(5, $12::float8 * coalesce(max(doc_count), 0)))::int AS n
  FROM namespace_stats WHERE namespace = $1),
rare AS (
  SELECT ent.* FROM ent, cap
  WHERE (SELECT count(*) FROM (SELECT 1 FROM memory_entities x
                               WHERE x.namespace = $1 AND x.entity = ent.entity LIMIT cap.n + 1) c) <= cap.n)
SELECT * FROM (
  SELECT DISTINCT ON (m.id) {_COLS}, rare.seed, rare.score AS seed_score, rare.entity, {_SEED_TEXT},
         {_COVERAGE}, {_holds("m", "$14")} AS has_focus, {_holds("sm", "$14")} AS seed_has_focus
  FROM rare JOIN memory_entities e ON e.namespace = $1 AND e.entity = rare.entity
  JOIN memories m ON m.id = e.memory_id
  JOIN memories sm ON sm.namespace = $1 AND sm.external_id = rare.seed
  WHERE {_WHERE} AND m.id <> sm.id
  ORDER BY m.id, rare.score DESC) AS hit
ORDER BY hit.seed_score DESC, hit.created_at, hit.id
LIMIT $8"""

# Returns live memories in the thread of a seed, with that seed.
THREAD_SQL = f"""
WITH s AS (SELECT * FROM {_SEEDS}), {_QUERY_TERMS},
t AS (
  SELECT sm.thread, max(s.score) AS score, (array_agg(s.ext ORDER BY s.score DESC))[1] AS seed
  FROM s JOIN memories sm ON sm.namespace = $1 AND sm.external_id = s.ext
  WHERE sm.thread IS NOT NULL GROUP BY sm.thread)
SELECT {_COLS}, t.seed, t.score AS seed_score, t.thread, {_SEED_TEXT}, {_COVERAGE}
FROM t JOIN memories m ON m.namespace = $1 AND m.thread = t.thread
JOIN memories sm ON sm.namespace = $1 AND sm.external_id = t.seed
WHERE {_WHERE} AND m.id <> sm.id
ORDER BY t.score DESC, abs(extract(epoch FROM m.created_at - sm.created_at)), m.id
LIMIT $8"""


def _seed_args(ctx: SearchContext) -> tuple[list[str], list[float]]:
    if not ctx.seeds:
        raise Skip("no seeds to expand from")
    return [x for x, _ in ctx.seeds], [float(sc) for _, sc in ctx.seeds]


# A memory answers "when" by stating one date (「アカネの提出期限は2月9日」); a passage with
# several dates in it proves little. Measured (docs/benchmarks.md): without this, JaQuAD-semantic
# dev lost 0.6 points of MRR@10 to neighbouring Wikipedia passages full of years.
ANSWER_MAX_MENTIONS = 1


def _hop(
    ctx: SearchContext,
    c: Candidate,
    r: asyncpg.Record,
    kind: str,
    via: str,
    seeds: dict[str, bool],
    seed_text: str,
) -> Candidate:
    """Say how the candidate was reached from its seed (`r`'s, whose text is `seed_text`): by
    what, what it adds of the query, and whether it gives the kind of answer asked for
    ("date", "amount") where the seed gives none — the hop reaches the answer, the seed only
    names the way there. `seeds` keeps, per seed, whether it states one: a seed leads to many
    rows of a source."""
    seed_cov, union_cov, query_idf = float(r["seed_cov"]), float(r["union_cov"]), r["query_idf"]
    gives_answer = False
    if ctx.intent.asks is not None:
        kind_asked = AnswerKind(ctx.intent.asks)
        said = mentions(kind_asked, (c.title or "") + c.content, most=ANSWER_MAX_MENTIONS + 1)
        if 0 < said <= ANSWER_MAX_MENTIONS:
            if r["seed"] not in seeds:
                seeds[r["seed"]] = gives(kind_asked, seed_text)
            gives_answer = not seeds[r["seed"]]
        if gives_answer:
            via += f", gives the asked {kind_asked.value}"
    c.via = via
    c.hop = Hop(
        seed=r["seed"],
        kind=kind,
        seed_text=seed_text,
        added=max(union_cov - seed_cov, 0.0) / query_idf if query_idf > 1e-9 else 0.0,
        gain=union_cov / seed_cov if seed_cov > 0 else 1.0,
        gives_answer=gives_answer,
    )
    return c


def _best(cands: list[Candidate], k: int) -> list[Candidate]:
    """Each memory once (by its best seed), the k best."""
    best: dict[int, Candidate] = {}
    for c in cands:
        if c.id not in best or c.score > best[c.id].score:
            best[c.id] = c
    return sorted(best.values(), key=lambda c: c.score, reverse=True)[:k]


async def _hop_rows(
    ctx: SearchContext, sql: str, source: Source, *extra: Any
) -> list[tuple[asyncpg.Record, Candidate, str]]:
    """The rows a hop query (filters, seeds, limit, the query's keywords, extra) returns, each
    with its candidate scored by its seed's score and the seed's text."""
    ext, scores = _seed_args(ctx)
    async with leg_connection(ctx, generic_plan=True) as conn:
        rows = await conn.fetch(
            sql, *ctx.where_args(), ext, scores, 4 * ctx.k, " ".join(ctx.intent.keywords), *extra,
            timeout=ctx.timeout_s,
        )  # fmt: skip
        pairs = await _candidates(ctx, conn, rows, source, score_key="seed_score")
        seed_texts = await ctx.contents.of(
            conn,
            ctx.filters.namespace,
            [r for r, _ in pairs],
            prefix="seed_",
            timeout=ctx.timeout_s,
        )
    return [(r, c, t or "") for (r, c), t in zip(pairs, seed_texts, strict=True)]


async def links(ctx: SearchContext) -> list[Candidate]:
    """Memories one link from a seed: replies, the question replied to, related topics."""
    out: list[Candidate] = []
    seeds: dict[str, bool] = {}
    asks: dict[str, bool] = {}  # per seed: does it ask the query's question (one test each)
    pairs = await _hop_rows(ctx, LINKS_SQL, Source.LINKS)
    for r, c, seed_text in pairs:
        # A reply to a seed that asks the query's question is that question's answer.
        reply = r["label"] == "reply_to" and r["dir"] == "from" and r["seed_asks"]
        if reply and r["seed"] not in asks:
            intent = ctx.intent
            asks[r["seed"]] = asks_about(seed_text, intent.keywords, intent.name_terms)
        if reply and asks[r["seed"]]:
            kind, via = ANSWERS_QUESTION, f"replies to the question {r['seed']}"
        else:
            kind = r["label"]
            via = f"linked {r['label']} {'from' if r['dir'] == 'to' else 'to'} {r['seed']}"
        out.append(_hop(ctx, c, r, kind, via, seeds, seed_text))
    return _best(out, ctx.k)


async def entity(ctx: SearchContext) -> list[Candidate]:
    """Memories naming what a seed names (「アオバ」, 山田真由), unless too common to mean anything.
    Not from a long memory: an article or minutes of thousands of characters names dozens of
    people and things, so sharing one of them with it says little of the question, and finding
    every memory that shares any was this source's whole cost on the long-memory set (p50 49
    ms, for no change in its ranking: docs/benchmarks.md)."""
    short = tuple(s for s in ctx.seeds if s[0] not in ctx.long_seeds)
    if ctx.seeds and not short:
        raise Skip("every seed is a long memory: what it names says little of the question")
    ctx = replace(ctx, seeds=short)
    pairs = await _hop_rows(
        ctx,
        ENTITY_SQL,
        Source.ENTITY,
        ctx.entity_max_df,
        ctx.entity_min_seeds,
        ENTITY_MAX_DF_SHARE,
        normalize_entity(ctx.intent.query),
        ctx.intent.focus,
    )
    out: list[Candidate] = []
    seeds: dict[str, bool] = {}
    for r, c, seed_text in pairs:
        via = f"shares 「{r['entity']}」 with {r['seed']}"
        # The memory holds what the question asks about (its 締め切り) and the seed does not.
        if r["has_focus"] and not r["seed_has_focus"]:
            via += f", holds the asked 「{ctx.intent.focus}」"
        out.append(_hop(ctx, c, r, "entity", via, seeds, seed_text))
    return _best(out, ctx.k)


async def thread(ctx: SearchContext) -> list[Candidate]:
    """Memories of a seed's thread, nearest in time to the seed first."""
    seeds: dict[str, bool] = {}
    pairs = await _hop_rows(ctx, THREAD_SQL, Source.THREAD)
    out = [
        _hop(ctx, c, r, "thread", f"same thread as {r['seed']}", seeds, seed_text)
        for r, c, seed_text in pairs
    ]
    return _best(out, ctx.k)


# --- Sources that do not rank by similarity to the query. ---

# Returns the newest live memories ($6 of them; $7: memory type, or NULL for any), newest first,
# scored by their time (seconds since the epoch), over the (namespace, created_at) index.
NEWEST_SQL = f"""
SELECT {_COLS}, extract(epoch FROM m.created_at)::float8 AS score
FROM memories m WHERE {_WHERE} AND ($7::text IS NULL OR m.memory_type = $7)
ORDER BY m.created_at DESC LIMIT $6"""

# A state (「住所は横浜」) is confirmed by a newer one saying the same or replaced by one saying
# otherwise; the newest state of a thing is the one to believe.
STATE_TYPE = "state"


async def recent(ctx: SearchContext) -> list[Candidate]:
    """The newest memories, whatever they say: what just happened belongs in the context."""
    async with leg_connection(ctx) as conn:
        rows = await conn.fetch(NEWEST_SQL, *ctx.where_args(), ctx.k, None, timeout=ctx.timeout_s)
        return await _rows(ctx, conn, rows, Source.RECENT)


async def states(ctx: SearchContext) -> list[Candidate]:
    """The newest memories of type `state` (where the user lives, what they use now)."""
    async with leg_connection(ctx) as conn:
        rows = await conn.fetch(
            NEWEST_SQL, *ctx.where_args(), ctx.k, STATE_TYPE, timeout=ctx.timeout_s
        )
        return await _rows(ctx, conn, rows, Source.STATES)


# The exploration slot searches memories older than this before `now`: recency decay and the
# newest near-copies of a topic must not hide what was said about it long ago.
EXPLORE_AFTER = timedelta(days=90)


async def vector_global(ctx: SearchContext) -> list[Candidate]:
    """Nearest neighbours of the query among memories older than EXPLORE_AFTER."""
    if ctx.now is None:
        raise Skip("no request time to measure the past from")
    return await _knn(ctx, Source.VECTOR_GLOBAL, TimeRange(None, ctx.now - EXPLORE_AFTER))


# Sources that need no query vector: the orchestrator starts them before the embedding is done.
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
