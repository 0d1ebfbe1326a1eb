"""The names leg: character n-gram (pg_trgm) matches of names and model numbers that word
segmentation splits badly, and the memories holding the question's people's names in another
script (their keys, retrieval.text.name_keys), each name weighted by how rare it is."""

from __future__ import annotations

import math
from dataclasses import replace

import asyncpg

from retrieval.models import Candidate, QueryIntent, Source
from retrieval.search.run import COLS, WHERE, Given, SearchRun, Skip, candidates, leg_connection
from retrieval.text.name_keys import SOUND_PREFIX

MAX_TRIGRAM_TERMS = 6


def _trigram_sql(n: int) -> str:
    # One pg_trgm GIN bitmap scan per name (a branch each, no other condition, so that index is
    # the only way in); the filters apply to the matches. An OR of ILIKEs in one WHERE was
    # planned as a scan of the namespace: ILIKE on long Japanese text costs ~10 us a row, which
    # the planner does not know (715 ms on the 13.4k JSQuAD passages; this: 13 ms). Scoring is
    # containment only: word_similarity() on every match cost seconds on common names. Each
    # branch is confined to the namespace, and so is the index (namespace || '', content:
    # migration 0020), so another tenant's rows are never read, joined or matched against the
    # pattern. The branch names the namespace as the index does, `namespace || ''`, which no
    # btree index serves: with `namespace = $1`, a store of one namespace was read through its
    # (namespace, created_at) btree, every memory matched against the pattern (700-900 ms a
    # question on the long-memory set).
    # The last branch looks the names' script-neutral keys up in the postings ($9 keys, $10 the
    # name each belongs to, $11 its weight). A memory scores the sum over names of the best
    # weight it matched of each.
    branches = [
        f"SELECT id, {i} AS i, ($8::float8[])[{i + 1}] AS w FROM memories "
        f"WHERE namespace || '' = $1 AND content ILIKE ${12 + i}"
        for i in range(n)
    ]
    branches.append(
        "SELECT p.memory_id AS id, k.i, k.w "
        "FROM unnest($9::text[], $10::int[], $11::float8[]) AS k(term, i, w) "
        "JOIN postings p ON p.namespace = $1 AND p.term = k.term"
    )
    return f"""
WITH best AS (SELECT b.id, b.i, max(b.w) AS w FROM ({" UNION ALL ".join(branches)}) AS b
              GROUP BY b.id, b.i),
hit AS (SELECT id, sum(w) AS w, array_agg(i) FILTER (WHERE i >= {n}) AS named FROM best
        WHERE cardinality($8::float8[]) = {n} GROUP BY id)
SELECT {COLS}, hit.w::float8 / $6::float8 AS score, hit.named
FROM hit JOIN memories m ON m.id = hit.id
WHERE {WHERE}
ORDER BY score DESC, m.created_at DESC, m.id LIMIT $7"""


# Returns live memories containing any of 0..6 name-like strings ($12...) or holding any of the
# names' keys, scored by the share of the names' weights ($6 their sum) they match. Index =
# number of strings.
TRIGRAM_SQL = {n: _trigram_sql(n) for n in range(0, MAX_TRIGRAM_TERMS + 1)}

# A name matched only by its consonant skeleton (マイケル / Michael's マイクル) counts this share
# of what its reading would.
SOUND_CREDIT = 0.6


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


# Returns how many memories of the namespace hold each of the keys ($2), and the namespace size.
KEY_DF_SQL = """
SELECT d.term, d.df, s.doc_count
FROM term_df d JOIN namespace_stats s ON s.namespace = d.namespace
WHERE d.namespace = $1 AND d.term = ANY($2::text[]) AND d.df > 0"""


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
    """Character n-gram matches of names and model numbers that tokenizers split badly, and the
    memories that hold the question's people's names in any script."""
    pairs = trigram_terms(run.intent)
    if not pairs and not run.intent.names:
        raise Skip("the query names nothing to match character by character")
    terms = [t for t, _ in pairs]
    async with leg_connection(run) as conn:
        weights: dict[int, float] = {}
        if pairs:
            for r in await conn.fetch(
                NAME_DF_SQL, run.filters.namespace, [x for _, x in pairs], timeout=run.timeout_s
            ):
                if r["df"] <= name_max_df(r["doc_count"]):
                    weights[r["i"] - 1] = name_weight(r["df"], r["doc_count"])
        kept = [(t, weights[i]) for i, t in enumerate(terms) if i in weights]
        keys = await _key_weights(run, conn, first=len(kept))
        if not kept and not keys:
            return []
        patterns = ["%" + like_escape(t) + "%" for t, _ in kept]
        w = [x for _, x in kept]
        total = sum(w) + sum(max(x for _, i, x in keys if i == n) for n in {i for _, i, _ in keys})
        # The trigram index or nothing: a sequential scan would ILIKE every memory.
        await conn.execute("SET LOCAL enable_seqscan = off")
        rows = await conn.fetch(
            TRIGRAM_SQL[len(kept)],
            *run.where_args(),
            total,
            run.k,
            w,
            [k for k, _, _ in keys],
            [i for _, i, _ in keys],
            [x for _, _, x in keys],
            *patterns,
            timeout=run.timeout_s,
        )
        names = {len(kept) + n: name.text for n, name in enumerate(run.intent.names)}
        got = await candidates(run, conn, rows, Source.TRIGRAM)
        return [replace(c, names=tuple(names[i] for i in r["named"] or ())) for r, c in got]


async def _key_weights(
    run: SearchRun, conn: asyncpg.Connection, *, first: int
) -> list[tuple[str, int, float]]:
    """(key, name number from `first` on, weight) for the keys of the question's names that
    the namespace holds: a name weighs by how rare its commonest reading is (a name too common
    to pick memories out is dropped); a skeleton key less (SOUND_CREDIT)."""
    names = run.intent.names
    if not names:
        return []
    stats = {
        r["term"]: (r["df"], r["doc_count"])
        for r in await conn.fetch(
            KEY_DF_SQL,
            run.filters.namespace,
            [k for n in names for k in n.keys],
            timeout=run.timeout_s,
        )
    }
    out: list[tuple[str, int, float]] = []
    for n, name in enumerate(names):
        held = [k for k in name.keys if k in stats]
        if not held:
            continue
        readings = [k for k in held if not k.startswith(SOUND_PREFIX)] or held
        df = max(stats[k][0] for k in readings)
        doc_count = stats[held[0]][1]
        if df > name_max_df(doc_count):
            continue
        weight = name_weight(df, doc_count)
        for k in held:
            credit = SOUND_CREDIT if k.startswith(SOUND_PREFIX) else 1.0
            out.append((k, first + n, weight * credit))
    return out
