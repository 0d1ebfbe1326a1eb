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
from pathlib import Path
from typing import Any

import numpy as np

from retrieval.errors import StoreUnavailable
from retrieval.evaluation.data import (
    EvalQuery,
    read_qrels,
    read_queries,
    sessions_of,
)
from retrieval.evaluation.indexing import (
    ForeignNamespace,
    clock_zone,
    ensure_index,
    sub_namespace,
)
from retrieval.models import Highlight, Result, RetrievalOptions, Strategy
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


# Returns how many live memories of a namespace lie in [start, end).
_IN_WINDOW = """
SELECT count(*) FROM memories WHERE namespace = $1 AND created_at >= $2 AND created_at < $3
  AND NOT is_archived AND searchable AND (expires_at IS NULL OR expires_at > now())"""


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

    def add(self, q: EvalQuery, rel: dict[str, int], results: list[Result]) -> None:
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
            out["by_strategy"] = _split_checked(qrels, self.run, self.used, out)
        categories = {q.id: q.category for q in queries if q.category}
        if categories:
            out["by_category"] = _split_checked(qrels, self.run, categories, out)
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


def haystacks(queries: list[EvalQuery]) -> set[str] | None:
    """The namespaces (conversations) these questions are asked in, the part of a conversation
    set to index for them; None when one names none (the whole corpus is needed)."""
    if all(q.namespace for q in queries):
        return {str(q.namespace) for q in queries}
    return None


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
    only = haystacks(queries) if max_queries is not None else None
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


# The metrics that are means over queries: a split's groups, weighted by their sizes, give the
# whole's.
_MEAN_METRICS = ("mrr@10", "hit@5", "recall@10")


def _split_checked(
    qrels: dict[str, dict[str, int]],
    run: dict[str, dict[str, float]],
    label: dict[str, str],
    whole: dict[str, Any],
) -> dict[str, dict[str, float]]:
    """_split(), checked against the whole (each split of a run: by strategy, by category):
    once, one question category's figures (ranx's) did not add up to the whole's of the same
    run (0.000 for two questions that scored 1.000 there and in every run after). Groups that
    do not add up are computed again, said in the log."""
    groups = _split(qrels, run, label)
    for attempt in range(2):
        labelled = sum(g["n_queries"] for g in groups.values())
        if labelled != whole["n_queries"] or all(
            abs(sum(g[m] * g["n_queries"] for g in groups.values()) / labelled - whole[m]) < 1e-3
            for m in _MEAN_METRICS
        ):
            return groups
        logger.warning("per-group figures do not add up to the whole (try %d); again", attempt + 1)
        groups = _split(qrels, run, label)
    raise RuntimeError("per-group figures do not add up to the whole in three tries")


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
    "haystacks",
    "percentiles",
    "read_qrels",
    "read_queries",
    "run_eval",
    "run_eval_cli",
    "score",
]
