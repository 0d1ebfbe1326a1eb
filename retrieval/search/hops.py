"""The hops: a second wave from the seeds (the first wave's best candidates) along links, shared
names and threads. These legs only fetch what a seed reaches and say how (Candidate.hop); how
much a hop counts is the reranker's policy (retrieval.rank.expansion)."""

from __future__ import annotations

from typing import Any

import asyncpg

from retrieval.analysis.answers import AnswerKind, asks_about, gives, mentions
from retrieval.models import ANSWERS_QUESTION, Candidate, Hop, Source
from retrieval.search.contents import columns
from retrieval.search.run import (
    COLS,
    WHERE,
    Given,
    SearchRun,
    Skip,
    best_of,
    candidates,
    leg_connection,
)
from retrieval.text.nlp import normalize_entity

# An entity named by more memories than this (or than this share of the namespace, at least
# five) says nothing about which ones belong together: プロジェクト in a diary of projects.
ENTITY_MAX_DF = 50
ENTITY_MAX_DF_SHARE = 0.05


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
SELECT {COLS}, l.seed, l.score AS seed_score, l.label, l.dir, {_SEED_TEXT},
       right(sm.content, 1) IN ('?', '？') OR right(sm.content, 3) ~ '(か|かな|の)[。！!]?$' AS seed_asks, {_COVERAGE}
FROM l JOIN memories m ON m.namespace = $1 AND m.external_id = l.other
JOIN memories sm ON sm.namespace = $1 AND sm.external_id = l.seed
WHERE {WHERE}
ORDER BY l.score DESC, m.created_at, m.id
LIMIT $8"""

# Returns live memories that name an entity one of the seeds names: a bridge, so not one the
# query itself names ($12, the normalised query: what the query names, the first wave already
# searched for). Entities named by more memories than $10 or than a share $11 of the namespace
# (at least 5; counted up to that cap + 1) are skipped. Each
# memory once (by its best seed), the $8 reached through the best seeds; $13 the focus.
ENTITY_SQL = f"""
WITH s AS (SELECT * FROM {_SEEDS}), {_QUERY_TERMS},
ent AS (
  SELECT e.entity, max(s.score * e.weight) AS score, (array_agg(s.ext ORDER BY s.score * e.weight DESC))[1] AS seed
  FROM s JOIN memories sm ON sm.namespace = $1 AND sm.external_id = s.ext
  JOIN memory_entities e ON e.memory_id = sm.id
  WHERE strpos($12, e.entity) = 0
  GROUP BY e.entity),
cap AS (
  SELECT least($10::float8, greatest(5, $11::float8 * coalesce(max(doc_count), 0)))::int AS n
  FROM namespace_stats WHERE namespace = $1),
rare AS (
  SELECT ent.* FROM ent, cap
  WHERE (SELECT count(*) FROM (SELECT 1 FROM memory_entities x
                               WHERE x.namespace = $1 AND x.entity = ent.entity LIMIT cap.n + 1) c) <= cap.n)
SELECT * FROM (
  SELECT DISTINCT ON (m.id) {COLS}, rare.seed, rare.score AS seed_score, rare.entity, {_SEED_TEXT},
         {_COVERAGE}, {_holds("m", "$13")} AS has_focus, {_holds("sm", "$13")} AS seed_has_focus
  FROM rare JOIN memory_entities e ON e.namespace = $1 AND e.entity = rare.entity
  JOIN memories m ON m.id = e.memory_id
  JOIN memories sm ON sm.namespace = $1 AND sm.external_id = rare.seed
  WHERE {WHERE} AND m.id <> sm.id
  ORDER BY m.id, rare.score DESC) AS hit
ORDER BY hit.seed_score DESC, hit.created_at, hit.id
LIMIT $8"""

# Returns live memories in the thread of a seed, with that seed: each memory once (it is in one
# thread, reached from that thread's best seed), the $8 nearest to the best seeds.
THREAD_SQL = f"""
WITH s AS (SELECT * FROM {_SEEDS}), {_QUERY_TERMS},
t AS (
  SELECT sm.thread, max(s.score) AS score, (array_agg(s.ext ORDER BY s.score DESC))[1] AS seed
  FROM s JOIN memories sm ON sm.namespace = $1 AND sm.external_id = s.ext
  WHERE sm.thread IS NOT NULL GROUP BY sm.thread)
SELECT {COLS}, t.seed, t.score AS seed_score, t.thread, {_SEED_TEXT}, {_COVERAGE}
FROM t JOIN memories m ON m.namespace = $1 AND m.thread = t.thread
JOIN memories sm ON sm.namespace = $1 AND sm.external_id = t.seed
WHERE {WHERE} AND m.id <> sm.id
ORDER BY t.score DESC, abs(extract(epoch FROM m.created_at - sm.created_at)), m.id
LIMIT $8"""


def _seed_args(seeds: tuple[tuple[str, float], ...]) -> tuple[list[str], list[float]]:
    if not seeds:
        raise Skip("no seeds to expand from")
    return [x for x, _ in seeds], [float(sc) for _, sc in seeds]


# A memory answers "when" by stating one date (「アカネの提出期限は2月9日」); a passage with
# several dates in it proves little. Measured (docs/benchmarks-log.md): without this, JaQuAD-semantic
# dev lost 0.6 points of MRR@10 to neighbouring Wikipedia passages full of years.
ANSWER_MAX_MENTIONS = 1


def _hop(
    run: SearchRun,
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
    if run.intent.asks is not None:
        kind_asked = AnswerKind(run.intent.asks)
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


async def _hop_rows(
    run: SearchRun,
    seeds: tuple[tuple[str, float], ...],
    sql: str,
    source: Source,
    *extra: Any,
    distinct: bool = False,
) -> list[tuple[asyncpg.Record, Candidate, str]]:
    """The rows a hop query (filters, seeds, limit, the query's keywords, extra) returns, each
    with its candidate scored by its seed's score and the seed's text.

    `distinct`: the statement returns each memory once, in the order of its seed's score, so
    its first k rows are the k that _best keeps, and k are asked for. Otherwise a memory may
    come once per seed that reaches it, and 4k rows are asked for. (On LoCoMo a thread's rows
    were ~85 a request, of which 50 were kept: 2.4 against 1.7 ms a statement.)"""
    ext, scores = _seed_args(seeds)
    async with leg_connection(run, generic_plan=True) as conn:
        rows = await conn.fetch(
            sql, *run.where_args(), ext, scores, run.k if distinct else 4 * run.k,
            " ".join(run.intent.keywords), *extra,
            timeout=run.timeout_s,
        )  # fmt: skip
        pairs = await candidates(run, conn, rows, source, score_key="seed_score")
        seed_texts = await run.contents.of(
            conn,
            run.filters.namespace,
            [r for r, _ in pairs],
            prefix="seed_",
            timeout=run.timeout_s,
        )
    return [(r, c, t or "") for (r, c), t in zip(pairs, seed_texts, strict=True)]


async def links(run: SearchRun, given: Given) -> list[Candidate]:
    """Memories one link from a seed: replies, the question replied to, related topics."""
    out: list[Candidate] = []
    seeds: dict[str, bool] = {}
    asks: dict[str, bool] = {}  # per seed: does it ask the query's question (one test each)
    pairs = await _hop_rows(run, given.seeds, LINKS_SQL, Source.LINKS)
    for r, c, seed_text in pairs:
        # A reply to a seed that asks the query's question is that question's answer.
        reply = r["label"] == "reply_to" and r["dir"] == "from" and r["seed_asks"]
        if reply and r["seed"] not in asks:
            intent = run.intent
            asks[r["seed"]] = asks_about(seed_text, intent.keywords, intent.name_terms)
        if reply and asks[r["seed"]]:
            kind, via = ANSWERS_QUESTION, f"replies to the question {r['seed']}"
        else:
            kind = r["label"]
            via = f"linked {r['label']} {'from' if r['dir'] == 'to' else 'to'} {r['seed']}"
        out.append(_hop(run, c, r, kind, via, seeds, seed_text))
    return best_of(out, run.k)


async def entity(run: SearchRun, given: Given) -> list[Candidate]:
    """Memories naming what a seed names (「アオバ」, 山田真由), unless too common to mean anything.
    Not from a long memory: an article or minutes of thousands of characters names dozens of
    people and things, so sharing one of them with it says little of the question, and finding
    every memory that shares any was this source's whole cost on the long-memory set (p50 49
    ms, for no change in its ranking: docs/benchmarks-log.md)."""
    short = tuple(s for s in given.seeds if s[0] not in given.long_seeds)
    if given.seeds and not short:
        raise Skip("every seed is a long memory: what it names says little of the question")
    pairs = await _hop_rows(
        run,
        short,
        ENTITY_SQL,
        Source.ENTITY,
        ENTITY_MAX_DF,
        ENTITY_MAX_DF_SHARE,
        normalize_entity(run.intent.query),
        run.intent.focus_term,
        distinct=True,
    )
    out: list[Candidate] = []
    seeds: dict[str, bool] = {}
    for r, c, seed_text in pairs:
        via = f"shares 「{r['entity']}」 with {r['seed']}"
        # The memory holds what the question asks about (its 締め切り) and the seed does not.
        if r["has_focus"] and not r["seed_has_focus"]:
            via += f", holds the asked 「{run.intent.focus}」"
        out.append(_hop(run, c, r, "entity", via, seeds, seed_text))
    return best_of(out, run.k)


async def thread(run: SearchRun, given: Given) -> list[Candidate]:
    """Memories of a seed's thread, nearest in time to the seed first."""
    seeds: dict[str, bool] = {}
    pairs = await _hop_rows(run, given.seeds, THREAD_SQL, Source.THREAD, distinct=True)
    out = [
        _hop(run, c, r, "thread", f"same thread as {r['seed']}", seeds, seed_text)
        for r, c, seed_text in pairs
    ]
    return best_of(out, run.k)
