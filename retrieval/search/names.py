"""The names leg: character n-gram (pg_trgm) matches of names and model numbers that word
segmentation splits badly, each name weighted by how rare it is."""

from __future__ import annotations

import math

from retrieval.models import Candidate, QueryIntent, Source
from retrieval.search.run import COLS, WHERE, Given, SearchRun, Skip, found, leg_connection

MAX_TRIGRAM_TERMS = 6


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
SELECT {COLS}, hit.w::float8 / $6::float8 AS score
FROM hit JOIN memories m ON m.id = hit.id
WHERE {WHERE}
ORDER BY score DESC, m.created_at DESC, m.id LIMIT $7"""


# Returns live memories containing any of 1..6 name-like strings ($9...), scored by the share
# of the strings' weights ($8, their rarity) that they contain. Index = number of strings.
TRIGRAM_SQL = {n: _trigram_sql(n) for n in range(1, MAX_TRIGRAM_TERMS + 1)}


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


async def trigram(run: SearchRun, given: Given) -> list[Candidate]:
    """Character n-gram matches of names and model numbers that tokenizers split badly."""
    pairs = trigram_terms(run.intent)
    if not pairs:
        raise Skip("the query names nothing to match character by character")
    terms = [t for t, _ in pairs]
    async with leg_connection(run) as conn:
        weights: dict[int, float] = {}
        for r in await conn.fetch(
            NAME_DF_SQL, run.filters.namespace, [x for _, x in pairs], timeout=run.timeout_s
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
            *run.where_args(),
            sum(w),
            run.k,
            w,
            *patterns,
            timeout=run.timeout_s,
        )
        return await found(run, conn, rows, Source.TRIGRAM)
