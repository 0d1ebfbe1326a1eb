"""The keyword leg: BM25 over the Sudachi terms of the query's keywords, from impact-ordered
postings, with document frequencies and lengths kept by the database."""

from __future__ import annotations

import asyncpg

from retrieval.models import Candidate, QueryIntent, Source
from retrieval.search.run import COLS, WHERE, Given, SearchRun, Skip, found, leg_connection

# Returns document frequency and IDF of the query's lexemes, with the namespace's average length.
TERM_STATS_SQL = """
SELECT l.lexeme AS term, d.df, s.doc_count,
       ln(1 + (s.doc_count - d.df + 0.5) / (d.df + 0.5)) AS idf,
       greatest(s.total_tokens::float8 / nullif(s.doc_count, 0), 1) AS avgdl
FROM unnest(to_tsvector('simple', $2)) AS l
JOIN term_df d ON d.namespace = $1 AND d.term = l.lexeme AND d.df > 0
JOIN namespace_stats s ON s.namespace = $1"""

# A query term's BM25 weight in a posting's memory ($8 k1, $9 b, $11 the average length).
_BM25 = """q.idf * (p.tf * ($8::float8 + 1))
             / (p.tf + $8::float8 * (1 - $9::float8 + $9::float8 * p.dl / $11::float8))"""

# Per query term, its $10 highest-impact postings.
_POSTINGS = """FROM q CROSS JOIN LATERAL (
    SELECT p.memory_id, p.tf, p.dl FROM postings p
    WHERE p.namespace = $1 AND p.term = q.term
    ORDER BY p.impact DESC LIMIT $10) AS p"""


def _keyword_sql(*, grouped: bool) -> str:
    """Returns the k best live memories by BM25 over the Japanese token column. Per query term,
    its $10 highest-impact postings (all of them for a rarer term: exact BM25 there); IDF and
    average length from term_df/namespace_stats; the filters are checked best score first
    (equal scores by row id, so that which of them make the k does not change with the plan).
    Terms arrive as an array parameter, so user text never reaches SQL or tsquery syntax.

    `grouped`: a person's name counts once however it is written: the terms of one group ($13: a
    name's word and its script-neutral keys) give a memory their best score, not their sum.
    Without groups (no term shares one) a memory's score is its terms' sum in one aggregation:
    the second one costs the 10k bench's statement ~0.7 ms (2.6 against 1.9 ms)."""
    if grouped:
        q = "unnest($6::text[], $7::float8[], $13::int[]) AS q(term, idf, grp)"
        hits = f"""per_term AS (
  SELECT p.memory_id, q.grp, max({_BM25}) AS score
  {_POSTINGS}
  GROUP BY p.memory_id, q.grp),
hits AS (SELECT memory_id, sum(score) AS score FROM per_term GROUP BY memory_id)"""
    else:
        q = "unnest($6::text[], $7::float8[]) AS q(term, idf)"
        hits = f"""hits AS (
  SELECT p.memory_id, sum({_BM25}) AS score
  {_POSTINGS}
  GROUP BY p.memory_id)"""
    return f"""
WITH q AS (SELECT * FROM {q}),
{hits}
SELECT {COLS}, h.score
FROM (SELECT * FROM hits ORDER BY score DESC, memory_id) AS h
CROSS JOIN LATERAL (SELECT m.*, m.xmin FROM memories m WHERE m.id = h.memory_id AND {WHERE}) AS m
ORDER BY h.score DESC, h.memory_id LIMIT $12"""


KEYWORD_SQL = _keyword_sql(grouped=True)
KEYWORD_SQL_UNGROUPED = _keyword_sql(grouped=False)

# Postings read per query term, best impact first. A term in more memories than this is common
# (IDF low): only its strongest postings count. Measured: 2,000 keeps JSQuAD's MRR (13.4k
# passages) and bounds the leg at 1M memories (docs/benchmarks-log.md).
POSTINGS_PER_TERM = 2000

# BM25's term-frequency saturation and length normalisation (the usual values).
BM25_K1 = 1.2
BM25_B = 0.75

# The keyword leg scores at most this many of a query's terms (the rarest): its postings read
# grew with every distinct term of a query of up to 2,000 characters. Every question of the dev
# sets has fewer.
MAX_QUERY_TERMS = 32


async def query_terms(run: SearchRun, conn: asyncpg.Connection) -> list[asyncpg.Record]:
    """The query's keyword terms this namespace holds (term, idf, avgdl), the rarest
    MAX_QUERY_TERMS of them: the rarest carry the score, the rest would only grow the postings
    read."""
    keys = [k for n in run.intent.names for k in n.keys]
    text = " ".join([*run.intent.keywords, *keys])
    stats = await conn.fetch(TERM_STATS_SQL, run.filters.namespace, text, timeout=run.timeout_s)
    if stats:
        run.terms.idf.update({r["term"]: float(r["idf"]) for r in stats})
        run.terms.docs = int(stats[0]["doc_count"])
    return sorted(stats, key=lambda r: float(r["idf"]), reverse=True)[:MAX_QUERY_TERMS]


def term_groups(intent: QueryIntent, terms: list[str]) -> list[int]:
    """Each term's group: a name's word and keys share one (retrieval.text.name_keys), every
    other term is a group of its own."""
    of: dict[str, int] = {}
    for g, name in enumerate(intent.names):
        for t in (*name.terms, *name.keys):
            of.setdefault(t, g)
    base = len(intent.names)
    return [of.get(t, base + i) for i, t in enumerate(terms)]


def bm25_args(run: SearchRun, stats: list[asyncpg.Record]) -> list[object]:
    """$1-$12 of both keyword statements: the filters, the terms with their IDF, BM25's
    constants, the postings cap, the average length and k (the grouped one adds $13)."""
    return [
        *run.where_args(),
        [r["term"] for r in stats],
        [float(r["idf"]) for r in stats],
        BM25_K1,
        BM25_B,
        POSTINGS_PER_TERM,
        float(stats[0]["avgdl"]),
        run.k,
    ]


async def keyword(run: SearchRun, given: Given) -> list[Candidate]:
    """BM25 over the Sudachi tokens of any of the query's keywords (and its people's names in any
    script), from impact-ordered postings."""
    if not run.intent.keywords and not run.intent.names:
        raise Skip("the query has no keywords")
    async with leg_connection(run) as conn:
        stats = await query_terms(run, conn)
        if not stats:
            return []
        groups = term_groups(run.intent, [r["term"] for r in stats])
        grouped = len(set(groups)) < len(groups)  # a name written several ways counts once
        rows = await conn.fetch(
            KEYWORD_SQL if grouped else KEYWORD_SQL_UNGROUPED,
            *bm25_args(run, stats),
            *([groups] if grouped else []),
            timeout=run.timeout_s,
        )
        return await found(run, conn, rows, Source.KEYWORD)
