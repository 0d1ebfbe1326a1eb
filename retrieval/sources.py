"""Search sources: one async signature, one registry. Each takes its own pool connection.

Every source honours the namespace, memory/source type filters, an optional hard time window,
expiry, archive and `searchable` through the same WHERE clause ($1..$5).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import asyncpg
import numpy as np

from retrieval.models import Candidate, Filters, QueryIntent, Source, TimeRange

_COLS = "m.id, m.external_id, m.content, m.title, m.memory_type, m.source_type, m.metadata, m.created_at, m.embedding"

# $1 namespace, $2 memory types (empty = any), $3 source types, $4/$5 window [start, end).
_WHERE = """m.namespace = $1 AND NOT m.is_archived AND m.searchable
  AND (m.expires_at IS NULL OR m.expires_at > now())
  AND (cardinality($2::text[]) = 0 OR m.memory_type = ANY($2::text[]))
  AND (cardinality($3::text[]) = 0 OR m.source_type = ANY($3::text[]))
  AND ($4::timestamptz IS NULL OR m.created_at >= $4)
  AND ($5::timestamptz IS NULL OR m.created_at < $5)"""

# Returns the k nearest live memories by cosine distance (HNSW; iterative scan under filters).
VECTOR_SQL = f"""
SELECT {_COLS}, 1 - (m.embedding <=> $6) AS score
FROM memories m WHERE {_WHERE}
ORDER BY m.embedding <=> $6 LIMIT $7"""

# Returns document frequency and IDF of the query's lexemes, with the namespace's average length.
TERM_STATS_SQL = """
SELECT l.lexeme AS term, d.df, s.doc_count,
       ln(1 + (s.doc_count - d.df + 0.5) / (d.df + 0.5)) AS idf,
       greatest(s.total_tokens::float8 / nullif(s.doc_count, 0), 1) AS avgdl
FROM unnest(to_tsvector('simple', $2)) AS l
JOIN term_df d ON d.namespace = $1 AND d.term = l.lexeme AND d.df > 0
JOIN namespace_stats s ON s.namespace = $1"""

# Returns the k best live memories by BM25 over the Japanese token column: candidates from the
# GIN index (an OR of plainto_tsquery() of each lexeme, so user text never reaches tsquery
# syntax), term frequencies from term_tf, IDF and average length from term_df/namespace_stats.
KEYWORD_SQL = f"""
WITH q AS (SELECT * FROM unnest($6::text[], $7::float8[]) AS q(term, idf)),
cand AS (
  SELECT m.id FROM memories m
  WHERE m.content_tsvector @@ (SELECT tsquery_or_agg(plainto_tsquery('simple', x)) FROM unnest($8::text[]) x)
    AND {_WHERE}
  LIMIT $13)
SELECT {_COLS}, s.score FROM cand JOIN memories m ON m.id = cand.id
CROSS JOIN LATERAL (
  SELECT sum(x.idf * (x.tf * ($10::float8 + 1))
             / (x.tf + $10::float8 * (1 - $11::float8 + $11::float8 * m.token_count / $9::float8))) AS score
  FROM (SELECT q.idf, (m.term_tf ->> q.term)::float8 AS tf FROM q) AS x
  WHERE x.tf IS NOT NULL) AS s
ORDER BY s.score DESC LIMIT $12"""

# At most this many matched memories are BM25-scored: a safety net for queries whose every term is
# common (an arbitrary subset is scored then); the rare-term selection keeps real text far below.
MAX_SCORED = 20000

MAX_TRIGRAM_TERMS = 6


def _trigram_sql(n: int) -> str:
    # One ILIKE per term, OR-ed: the pg_trgm GIN index serves LIKE patterns (a bitmap OR), but
    # not regexes on Japanese text under the C.UTF-8 locale, nor `LIKE ANY(array)`. Scoring is
    # containment only: word_similarity() on every matched row cost seconds on common names.
    likes = " OR ".join(f"m.content ILIKE ${8 + i}" for i in range(n))
    hits = " + ".join(f"(m.content ILIKE ${8 + i})::int * length(${8 + i})" for i in range(n))
    return f"""
SELECT {_COLS}, ({hits})::float8 / $6::float8 AS score
FROM memories m
WHERE ({likes}) AND {_WHERE}
ORDER BY score DESC, m.created_at DESC LIMIT $7"""


# Returns live memories containing any of 1..6 name-like strings, scored by the share of the
# strings' characters that they contain (longer names weigh more). Index = number of strings.
TRIGRAM_SQL = {n: _trigram_sql(n) for n in range(1, MAX_TRIGRAM_TERMS + 1)}


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
    debug: dict[str, Any] = field(default_factory=dict)

    def where_args(self, window: TimeRange | None = None) -> tuple[Any, ...]:
        f = self.filters
        start = f.start if window is None else max(_drop_none(f.start, window.start))
        end = f.end if window is None else min(_drop_none(f.end, window.end))
        return (f.namespace, list(f.memory_types), list(f.source_types), start, end)


def _drop_none(*xs: Any) -> list[Any]:
    vals = [x for x in xs if x is not None]
    return vals or [None]


def _np(v: Any) -> np.ndarray:
    return v.to_numpy() if hasattr(v, "to_numpy") else np.asarray(v, dtype=np.float32)


SourceFn = Callable[[SearchContext], Awaitable[list[Candidate]]]


def _rows(rows: list[asyncpg.Record], source: Source) -> list[Candidate]:
    return [
        Candidate(
            id=r["id"],
            external_id=r["external_id"],
            content=r["content"],
            title=r["title"],
            memory_type=r["memory_type"],
            source_type=r["source_type"],
            metadata=r["metadata"],
            created_at=r["created_at"],
            embedding=_np(r["embedding"]),
            score=float(r["score"]),
            source=source,
        )
        for r in rows
    ]


async def _knn(ctx: SearchContext, source: Source, window: TimeRange | None) -> list[Candidate]:
    best: dict[int, Candidate] = {}
    async with ctx.pool.acquire() as conn:
        for vec in ctx.vectors:
            rows = await conn.fetch(VECTOR_SQL, *ctx.where_args(window), vec, ctx.k, timeout=ctx.timeout_s)
            for c in _rows(rows, source):
                if c.id not in best or c.score > best[c.id].score:
                    best[c.id] = c
    # relaxed_order iterative scans may return rows slightly out of order
    return sorted(best.values(), key=lambda c: c.score, reverse=True)[: ctx.k]


async def vector(ctx: SearchContext) -> list[Candidate]:
    """Nearest neighbours of the query (and of context + query, when a conversation is given)."""
    return await _knn(ctx, Source.VECTOR, None)


async def temporal(ctx: SearchContext) -> list[Candidate]:
    """Nearest neighbours inside the query's time window (spec 3.3.3); nothing without one."""
    if ctx.window is None:
        return []
    return await _knn(ctx, Source.TEMPORAL, ctx.window)


def choose_match_terms(
    stats: list[tuple[str, int, float]], doc_count: int, *, max_terms: int = 12, budget: int = 4000
) -> list[str]:
    """Terms that select candidates: the rarest first, while their document frequencies add up
    to at most `budget`; terms in more than 10% of the documents only score.

    BM25 is computed for every selected document, so the selection bounds the leg's cost: a
    common term would pull thousands of rows into scoring while adding almost nothing to it.
    When every term is common, the rarest one alone selects.
    """
    ranked = sorted(stats, key=lambda s: s[2], reverse=True)
    limit = max(doc_count * 0.10, 50)
    chosen: list[str] = []
    total = 0
    for term, df, _ in ranked:
        if df > limit:
            continue
        if chosen and total + df > budget:
            break
        chosen.append(term)
        total += df
        if len(chosen) >= max_terms:
            break
    return chosen or [ranked[0][0]] if ranked else []


async def keyword(ctx: SearchContext) -> list[Candidate]:
    """BM25 (IDF from term_df) over the Sudachi token tsvector, OR of the query's keywords."""
    if not ctx.intent.keywords:
        return []
    text = " ".join(ctx.intent.keywords)
    async with ctx.pool.acquire() as conn:
        stats = await conn.fetch(TERM_STATS_SQL, ctx.filters.namespace, text, timeout=ctx.timeout_s)
        if not stats:
            return []
        terms = [r["term"] for r in stats]
        idfs = [float(r["idf"]) for r in stats]
        match = choose_match_terms([(r["term"], r["df"], float(r["idf"])) for r in stats], stats[0]["doc_count"])
        ctx.debug["keyword_terms"] = terms
        rows = await conn.fetch(
            KEYWORD_SQL,
            *ctx.where_args(),
            terms,
            idfs,
            match,
            float(stats[0]["avgdl"]),
            ctx.bm25_k1,
            ctx.bm25_b,
            ctx.k,
            MAX_SCORED,
            timeout=ctx.timeout_s,
        )
    return _rows(rows, Source.KEYWORD)


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


async def trigram(ctx: SearchContext) -> list[Candidate]:
    """Character n-gram matches of names and model numbers that tokenizers split badly."""
    pairs = trigram_terms(ctx.intent)
    if not pairs:
        return []
    terms = [t for t, _ in pairs]
    async with ctx.pool.acquire() as conn:
        common = {
            r["i"] - 1
            for r in await conn.fetch(NAME_DF_SQL, ctx.filters.namespace, [x for _, x in pairs], timeout=ctx.timeout_s)
            # A name in more than 1% of the memories is no name to pick memories by.
            if r["df"] > max(0.01 * r["doc_count"], 20)
        }
    terms = [t for i, t in enumerate(terms) if i not in common]
    if not terms:
        return []
    patterns = ["%" + like_escape(t) + "%" for t in terms]
    total = float(sum(len(p) for p in patterns))
    async with ctx.pool.acquire() as conn:
        rows = await conn.fetch(
            TRIGRAM_SQL[len(terms)], *ctx.where_args(), total, ctx.k, *patterns, timeout=ctx.timeout_s
        )
    return _rows(rows, Source.TRIGRAM)


SOURCES: Mapping[Source, SourceFn] = MappingProxyType(
    {
        Source.VECTOR: vector,
        Source.KEYWORD: keyword,
        Source.TEMPORAL: temporal,
        Source.TRIGRAM: trigram,
    }
)

