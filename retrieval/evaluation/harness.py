"""`retrieval eval`: index a corpus once (cached by content, model and schema), run labelled
queries through the real orchestrator, and score the rankings with ranx, overall and per
question category."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import sys
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from db.meta import GET_HARNESS_KEY, HAS_MEMORIES, PUT_HARNESS_KEY
from retrieval.embedding.texts import recipe
from retrieval.errors import RetrievalError, StoreUnavailable
from retrieval.evaluation.data import (
    EvalQuery,
    read_corpus,
    read_qrels,
    read_queries,
    sessions_of,
)
from retrieval.evaluation.embedding_cache import CachedEmbedder
from retrieval.ingest.items import MemoryIn
from retrieval.ingest.turns import may_follow
from retrieval.ingest.vectors import check_precomputed, open_vectors
from retrieval.ingest.write import Vectors, ingest
from retrieval.models import Highlight, RetrievalOptions, RetrievalResult, Strategy
from retrieval.rank.budget import fit
from retrieval.settings import Settings

logger = logging.getLogger(__name__)

METRICS = ["mrr@10", "hit_rate@1", "hit_rate@5", "ndcg@10", "recall@5", "recall@10", "recall@100"]
_NAMES = {"hit_rate@1": "hit@1", "hit_rate@5": "hit@5"}


def score(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]]) -> dict[str, float]:
    """ranx metrics over the queries present in both."""
    from ranx import Qrels, Run, evaluate

    keep = {q: qrels[q] for q in run if q in qrels and any(v > 0 for v in qrels[q].values())}
    if not keep:
        return {_NAMES.get(mm, mm): 0.0 for mm in METRICS}
    # ranx wants every query in the run; a query with no result scores 0 through a dummy doc.
    full = {q: (run[q] or {"__none__": 0.0}) for q in keep}
    res = evaluate(Qrels(keep), Run(full), METRICS, make_comparable=True)
    return {_NAMES.get(k, k): round(float(v), 4) for k, v in res.items()}


def cache_key(corpus: Path, model: str, schema: int, vectors: Path | None) -> str:
    h = hashlib.sha256()
    with open(corpus, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    from retrieval.analysis.nlp import TOKENIZER_VERSION

    h.update(
        f"|{model}|{schema}|{TOKENIZER_VERSION}|{'vectors' if vectors else 'embedded'}".encode()
    )
    return h.hexdigest()[:32]


# Returns how many live memories of a namespace lie in [start, end).
_IN_WINDOW = """
SELECT count(*) FROM memories WHERE namespace = $1 AND created_at >= $2 AND created_at < $3
  AND NOT is_archived AND searchable AND (expires_at IS NULL OR expires_at > now())"""

# Removes a namespace's memories (its statistics follow, by trigger) and harness record, and
# those of its sub-namespaces (`NS:conversation`, a conversation set's).
_TABLES = ("postings", "memories", "memory_links", "term_df", "namespace_stats", "harness_indexes")
_DROP_NAMESPACE = [
    f"DELETE FROM {t} WHERE namespace = $1 OR starts_with(namespace, $1 || ':')" for t in _TABLES
]


# The same for one namespace alone (one conversation of a conversation set).
_DROP_ONE = [f"DELETE FROM {t} WHERE namespace = $1" for t in _TABLES]

# Memories indexed per write.
INDEX_BATCH = 2000

# Returns the vectors stored in a namespace and its sub-namespaces, with what they were made of.
_STORED_VECTORS = """
SELECT namespace, external_id, title, content, embedding FROM memories
WHERE namespace = $1 OR starts_with(namespace, $1 || ':')"""


def embedding_cache_path(settings: Settings) -> Path:
    """The evaluation's embedding cache (retrieval.evaluation.embedding_cache): a file beside
    the data directory (which is the embedded server's own)."""
    d = settings.data_dir.expanduser().resolve()
    return d.with_name(d.name + "-eval-embeddings.sqlite")


class ForeignNamespace(RetrievalError):
    """The namespace holds memories the harness did not put there; replacing them needs --force."""


def clock_zone(now: datetime | None) -> str | None:
    """The calendar a question is asked in: the zone of its `now`'s offset, when that is whole
    hours (a LoCoMo question's `now` is UTC, so are its conversation's session dates; a Japanese
    set's +09:00 is Asia/Tokyo's). None without `now`: the service's own zone."""
    offset = now.utcoffset() if now is not None else None
    if offset is None:
        return None
    hours, rest = divmod(int(offset.total_seconds()), 3600)
    if rest or not -14 <= hours <= 12:
        return None
    return "UTC" if hours == 0 else f"Etc/GMT{-hours:+d}"


def sub_namespace(namespace: str, line_namespace: str | None) -> str:
    """Where the harness puts (and asks about) a corpus line's or a query's own namespace."""
    return namespace if line_namespace is None else f"{namespace}:{line_namespace}"


async def ensure_index(
    rt: Any,
    corpus: Path,
    namespace: str,
    vectors_path: Path | None,
    *,
    force: bool = False,
    only: set[str] | None = None,
) -> tuple[bool, float]:
    """Index the corpus into namespace unless the harness record says it is already there.
    Lines that name a namespace (a conversation set: one per conversation) go into
    `namespace:theirs`, each conversation indexed and recorded on its own, so that a run over
    a few questions (`only`: their namespaces) indexes only their conversations; the others
    into namespace itself. Returns whether everything needed was there already, and seconds.

    A namespace that holds memories the harness did not write is refused unless `force`:
    indexing replaces everything in it."""
    t0 = time.perf_counter()
    async with rt.pool.acquire() as conn:
        schema = await conn.fetchval("SELECT max(version) FROM schema_migrations")
        stored = await conn.fetchval(GET_HARNESS_KEY, namespace)
        occupied = await conn.fetchval(HAS_MEMORIES, namespace)
    key = cache_key(corpus, rt.embedder.name, int(schema or 0), vectors_path)
    if stored == key:
        return True, time.perf_counter() - t0
    if stored is None and occupied and not force:
        raise ForeignNamespace(
            f"namespace {namespace!r} holds memories that `retrieval eval` did not index; "
            "indexing would delete them. Choose another --namespace, or pass --force"
        )
    groups = read_corpus(corpus)
    embedder = CachedEmbedder(rt.embedder, embedding_cache_path(rt.settings))
    if None in groups:
        await _index_whole(rt, embedder, groups, namespace, vectors_path)
        reused = False
    else:
        reused = True
        for line_ns, group in groups.items():
            if line_ns is not None and (only is None or line_ns in only):
                reused &= await _index_one(rt, embedder, group, namespace, line_ns, key)
    async with rt.pool.acquire() as conn:
        if only is None or None in groups:
            await conn.execute(PUT_HARNESS_KEY, namespace, key)
        await conn.execute("ANALYZE memories")
    return reused, time.perf_counter() - t0


async def _index_whole(
    rt: Any,
    embedder: CachedEmbedder,
    groups: dict[str | None, list[tuple[int, MemoryIn]]],
    namespace: str,
    vectors_path: Path | None,
) -> None:
    """Replace what namespace (and its sub-namespaces) holds with the corpus."""
    vectors = None
    if vectors_path is not None:
        rows = sorted((row, it) for g in groups.values() for row, it in g)
        items = [it for _, it in rows]
        vectors = np.asarray(
            open_vectors(vectors_path, [it.id for it in items], rt.embedder.dim), np.float32
        )
        check_precomputed(rt.embedder, items, vectors)
    kept = await _dropped(rt, namespace, _DROP_NAMESPACE)
    total = sum(len(g) for g in groups.values())
    done = 0
    for line_ns, group in groups.items():
        for start in range(0, len(group), INDEX_BATCH):
            chunk = group[start : start + INDEX_BATCH]
            ns = sub_namespace(namespace, line_ns)
            if vectors is not None:
                vec: Vectors = np.ascontiguousarray(vectors[[r for r, _ in chunk]])
            else:
                vec = _reuse(embedder, kept, ns, [it for _, it in chunk])
            await ingest(
                rt.pool, rt.nlp, embedder, [it for _, it in chunk], namespace=ns, vectors=vec
            )
            done += len(chunk)
            logger.info("indexed %d/%d", done, total)


async def _index_one(
    rt: Any,
    embedder: CachedEmbedder,
    group: list[tuple[int, MemoryIn]],
    namespace: str,
    line_ns: str,
    key: str,
) -> bool:
    """One conversation of a conversation set into `namespace:line_ns`, unless its own record
    says it is there; whether it was."""
    ns = sub_namespace(namespace, line_ns)
    async with rt.pool.acquire() as conn:
        if await conn.fetchval(GET_HARNESS_KEY, ns) == key:
            return True
    kept = await _dropped(rt, ns, _DROP_ONE)
    for start in range(0, len(group), INDEX_BATCH):
        items = [it for _, it in group[start : start + INDEX_BATCH]]
        vec = _reuse(embedder, kept, ns, items)
        await ingest(rt.pool, rt.nlp, embedder, items, namespace=ns, vectors=vec)
    async with rt.pool.acquire() as conn:
        await conn.execute(PUT_HARNESS_KEY, ns, key)
    logger.info("indexed %s (%d memories)", ns, len(group))
    return False


async def _dropped(rt: Any, namespace: str, drop: list[str]) -> dict[tuple[Any, ...], Any]:
    """Empty `namespace` (by the `drop` statements); the vectors it held, by what they were
    made of: a re-index (a new tokenizer, a new schema) embeds again only what it has no
    vector for (the vectors depend on the text and the model, which the key also names)."""
    async with rt.pool.acquire() as conn, conn.transaction():
        kept = {
            (r["namespace"], r["external_id"], r["title"], r["content"]): r["embedding"]
            for r in await conn.fetch(_STORED_VECTORS, namespace, timeout=3600)
        }
        for sql in drop:
            await conn.execute(sql, namespace, timeout=3600)
    return kept


def _reuse(
    embedder: Any, kept: dict[tuple[Any, ...], Any], namespace: str, items: list[MemoryIn]
) -> list[np.ndarray | None]:
    """The chunk's vectors: the stored one where the same memory was indexed before, the rest
    embedded now by the recipe (retrieval.embedding.texts). A turn that may follow another is
    left to ingest (None): its vector depends on that turn too; so is a long memory, whose
    vector is its passages'."""
    out: list[np.ndarray | None] = [None] * len(items)
    missing: list[tuple[int, str]] = []
    for i, it in enumerate(items):
        own = recipe(it.title, it.content).own
        if may_follow(it) or own is None:
            continue
        v = kept.get((namespace, it.id, it.title, it.content))
        if v is None:
            missing.append((i, own))
        else:
            out[i] = np.asarray(v.to_numpy() if hasattr(v, "to_numpy") else v, np.float32)
    for start in range(0, len(missing), 32):
        part = missing[start : start + 32]
        got = embedder.embed_documents([text for _, text in part])
        for (i, _), v in zip(part, got, strict=True):
            out[i] = v
    return out


# The budget the harness fits the first 10 results of each answer into (characters).
EVAL_BUDGET_CHARS = 4000


def overlaps(h: Highlight | None, content: str, gold: str) -> bool:
    """Whether a highlight (or, without one, the content given) holds part of `gold`, the
    paragraph that answers, found in `content` (the whole stored text)."""
    at = content.find(gold)
    if at < 0:
        return False
    start, end = (h.start, h.end) if h is not None else (0, len(content))
    return start < at + len(gold) and at < end


class _Parts:
    """What the first results hold: characters whole and within a budget; highlight hits."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.whole: list[int] = []
        self.fitted: list[int] = []
        self.eligible = self.hits = self.kept = 0

    def add(self, q: EvalQuery, rel: dict[str, int], results: list[RetrievalResult]) -> None:
        top = results[:10]
        self.whole.append(sum(len(r.content) for r in top))
        fitted, report = fit(top, self.budget)
        self.fitted.append(report.used_chars)
        if q.gold_text is None:
            return
        first = next((r for r in results[:5] if rel.get(r.id, 0) > 0), None)
        if first is None:
            return
        self.eligible += 1
        self.hits += overlaps(first.highlight, first.content, q.gold_text)
        # Within the budget: the relevant result whole, or its highlight, still holds it.
        got = next((r for r in fitted if r.id == first.id), None)
        if got is not None:
            self.kept += (
                overlaps(got.highlight, first.content, q.gold_text)
                if got.cut
                else q.gold_text in got.content
            )

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "chars@10": round(float(np.mean(self.whole)), 1) if self.whole else 0.0,
            f"chars@10_budget{self.budget}": round(float(np.mean(self.fitted)), 1)
            if self.fitted
            else 0.0,
        }
        if self.eligible:
            out["highlight_questions"] = self.eligible
            out["highlight_hit"] = round(self.hits / self.eligible, 4)
            out[f"highlight_hit_budget{self.budget}"] = round(self.kept / self.eligible, 4)
        return out


class _Tally:
    """What a run of questions gave: each ranking (ranx reads scores; rank-derived scores keep
    the order exactly, ties included), the strategy used, latencies whole and per stage,
    degraded answers, and the promise of a named window (nothing from outside it, with its soft
    edges, in the top 5 while it holds at least 5 memories)."""

    def __init__(self, budget: int) -> None:
        self.run: dict[str, dict[str, float]] = {}
        self.used: dict[str, str] = {}
        self.latencies: list[float] = []
        self.stages: dict[str, list[float]] = defaultdict(list)
        self.parts = _Parts(budget)
        self.windowed = self.violations = self.degraded = 0
        # Per question of a set of sessions: (any relevant session in the first five sessions,
        # the share of them there).
        self.sessions: dict[str, tuple[float, float]] = {}

    async def add(
        self,
        rt: Any,
        q: EvalQuery,
        ns: str,
        resp: Any,
        ms: float,
        rel: dict[str, int],
        session_of: dict[str, str] | None = None,
    ) -> None:
        self.latencies.append(ms)
        self.degraded += bool(resp.metadata.degraded)
        for stage, x in resp.metadata.stage_latency_ms.items():
            self.stages[stage].append(x)
        for src, rep in resp.metadata.search_breakdown.items():
            if rep.status == "ok":
                self.stages[f"source_{src}"].append(rep.latency_ms)
        n = len(resp.results)
        self.run[q.id] = {r.id: float(n - i) for i, r in enumerate(resp.results)}
        if q.relevant_sessions and session_of is not None:
            self.sessions[q.id] = session_recall(
                [r.id for r in resp.results], session_of, q.relevant_sessions
            )
        self.used[q.id] = resp.metadata.strategy_used.value
        self.parts.add(q, rel, resp.results)
        tr = resp.metadata.query_intent.time_range
        start, end = (tr.outer_start, tr.outer_end) if tr is not None else (None, None)
        if start is not None and end is not None:
            async with rt.pool.acquire() as conn:
                held = await conn.fetchval(_IN_WINDOW, ns, start, end)
            if held >= 5:
                self.windowed += 1
                self.violations += any(not (start <= r.created_at < end) for r in resp.results[:5])

    def summary(
        self, queries: list[EvalQuery], qrels: dict[str, dict[str, int]], strategy: str
    ) -> dict[str, Any]:
        out: dict[str, Any] = {"n_queries": len(queries), **score(qrels, self.run)}
        out.update(percentiles(self.latencies))
        out["windowed_queries"] = self.windowed
        out["window_violations"] = self.violations
        # Answers with a source missing (a leg past its deadline): their ranking is not the
        # code's alone; a run with many is worth repeating.
        out["degraded_queries"] = self.degraded
        out["stages"] = {k: percentiles(v) for k, v in sorted(self.stages.items())}
        out.update(self.parts.summary())
        if strategy == "auto":
            out["by_strategy"] = _split(qrels, self.run, self.used)
        categories = {q.id: q.category for q in queries if q.category}
        if categories:
            out["by_category"] = _split(qrels, self.run, categories)
        if self.sessions:
            out.update(self._session_means(list(self.sessions)))
            for cat, sub in out.get("by_category", {}).items():
                ids = [x for x, c in categories.items() if c == cat and x in self.sessions]
                sub.update(self._session_means(ids))
        out["_run"] = self.run
        return out

    def _session_means(self, ids: list[str]) -> dict[str, float]:
        if not ids:
            return {}
        return {
            "session_any@5": round(float(np.mean([self.sessions[x][0] for x in ids])), 4),
            "session_all@5": round(float(np.mean([self.sessions[x][1] for x in ids])), 4),
        }


async def run_eval(
    rt: Any,
    queries: list[EvalQuery],
    qrels: dict[str, dict[str, int]],
    *,
    namespace: str,
    strategy: str = "auto",
    limit: int = 100,
    expand: bool = True,
    budget: int = EVAL_BUDGET_CHARS,
    session_of: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run every query through the orchestrator (a query that names its namespace is asked in
    `namespace:its own`); return metrics, latency (whole and per stage), the metrics per
    strategy used and per question category, and what the first 10 results hold: characters
    whole and within `budget` (retrieval.rank.budget), and for a set that names the
    paragraph that answers, how often a relevant result's highlight holds it; for a set of
    sessions (`session_of`: each memory's session), session recall at 5."""
    tally = _Tally(budget)
    force = None if strategy == "auto" else Strategy(strategy)
    for q in queries:
        ns = sub_namespace(namespace, q.namespace)
        options = RetrievalOptions(
            namespace=ns,
            limit=limit,
            now=q.now,
            timezone=clock_zone(q.now),
            force_strategy=force,
            log_run=False,
            expand=expand,
            # The ranking is measured; the turns around each of 100 results are not read.
            context_window=0,
        )
        t = time.perf_counter()
        resp = await _answered(rt, q.text, options)
        ms = (time.perf_counter() - t) * 1000.0
        await tally.add(rt, q, ns, resp, ms, qrels.get(q.id, {}), session_of)
    return tally.summary(queries, qrels, strategy)


def session_recall(
    ranked: list[str], session_of: dict[str, str], relevant: tuple[str, ...], k: int = 5
) -> tuple[float, float]:
    """A turn ranking read as a ranking of sessions (each at its first turn): whether one of
    the relevant sessions is among the first k, and the share of them that is (LongMemEval's
    session recall, any@k and all@k)."""
    first: list[str] = []
    for x in ranked:
        s = session_of.get(x)
        if s is not None and s not in first:
            first.append(s)
            if len(first) == k:
                break
    hit = set(first) & set(relevant)
    return float(bool(hit)), len(hit) / len(set(relevant))


async def evaluate(
    rt: Any,
    corpus: Path,
    queries_path: Path,
    qrels_path: Path,
    *,
    namespace: str,
    vectors: Path | None = None,
    max_queries: int | None = None,
    force: bool = False,
    **options: Any,
) -> tuple[dict[str, Any], bool, float]:
    """One labelled set, as `eval` and `eval-suite` run it: its first `max_queries` questions
    (all without), the corpus indexed as far as they need (a conversation set: their
    conversations only), session recall where the questions name sessions. Returns the
    results (run_eval's), whether the index was there already, and the seconds indexing took."""
    queries = read_queries(queries_path)[:max_queries]
    only = None
    if max_queries is not None and all(q.namespace for q in queries):
        only = {str(q.namespace) for q in queries}
    cached, secs = await ensure_index(rt, corpus, namespace, vectors, force=force, only=only)
    session_of = sessions_of(corpus) if any(q.relevant_sessions for q in queries) else None
    res = await run_eval(
        rt, queries, read_qrels(qrels_path), namespace=namespace, session_of=session_of, **options
    )
    return res, cached, secs


# A question no source answered (every leg past its deadline: a cold or busy database) is
# asked again this many times, a second apart, before the run fails: one such moment used to
# end a ten-minute suite.
ASK_AGAIN = 2
ASK_AGAIN_PAUSE_S = 1.0


async def _answered(rt: Any, text: str, options: RetrievalOptions) -> Any:
    for _ in range(ASK_AGAIN):
        try:
            return await rt.orchestrator.retrieve(text, options)
        except StoreUnavailable:
            logger.warning("no source answered %r; asking again", text[:40])
            await asyncio.sleep(ASK_AGAIN_PAUSE_S)
    return await rt.orchestrator.retrieve(text, options)


def percentiles(ms: list[float]) -> dict[str, float]:
    """p50 / p95 / p99 of a list of milliseconds (zeros when empty)."""
    lat = np.asarray(ms) if ms else np.zeros(1)
    return {f"p{p}_ms": round(float(np.percentile(lat, p)), 2) for p in (50, 95, 99)}


def _split(
    qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]], label: dict[str, str]
) -> dict[str, dict[str, float]]:
    """The metrics of each group of queries (by a label per query id)."""
    by: dict[str, list[str]] = defaultdict(list)
    for qid, x in label.items():
        by[x].append(qid)
    return {
        x: {"n_queries": len(ids), **score(qrels, {i: run[i] for i in ids if i in run})}
        for x, ids in sorted(by.items())
    }


def corpus_namespace(corpus: Path) -> str:
    """The namespace the harness indexes a corpus into unless told: one per corpus file."""
    return "eval-" + hashlib.sha1(str(corpus.resolve()).encode()).hexdigest()[:12]


def eval_settings(settings: Settings, limit: int) -> Settings:
    """The settings an evaluation runs with: no run log, the limit it asks for, and no
    server-side deadline (indexing a corpus writes thousands of memories a statement)."""
    return settings.model_copy(
        update={
            "max_limit": max(settings.max_limit, limit),
            "log_runs": False,
            "statement_timeout_ms": 0,
        }
    )


async def run_eval_cli(settings: Settings, args: argparse.Namespace) -> int:
    """The `retrieval eval` command."""
    from retrieval.runtime import open_runtime

    namespace = args.namespace or corpus_namespace(args.corpus)
    rt = await open_runtime(eval_settings(settings, args.limit))
    try:
        res, cached, secs = await evaluate(
            rt,
            args.corpus,
            args.queries,
            args.qrels,
            namespace=namespace,
            vectors=args.embeddings,
            max_queries=args.max_queries,
            force=args.force,
            strategy=args.strategy,
            limit=args.limit,
            expand=not args.no_expand,
        )
        print(
            f"index {'reused' if cached else 'built'} in {secs:.1f} s (namespace {namespace})",
            file=sys.stderr,
        )
    finally:
        await rt.close()
    res.pop("_run")
    if args.json:
        print(json.dumps(res, ensure_ascii=False))
    else:
        for k, v in res.items():
            if k not in ("by_strategy", "by_category", "stages"):
                print(f"{k:12s} {v}")
        for group in ("by_strategy", "by_category"):
            for s, sub in res.get(group, {}).items():
                print(f"  {s:14s} " + "  ".join(f"{k}={v}" for k, v in sub.items()))
    return 0


__all__ = [
    "EvalQuery",
    "ForeignNamespace",
    "corpus_namespace",
    "ensure_index",
    "eval_settings",
    "percentiles",
    "read_qrels",
    "read_queries",
    "run_eval",
    "run_eval_cli",
    "score",
]
