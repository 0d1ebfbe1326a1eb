"""`retrieval eval`: index a corpus once (cached by content, model and schema), run labelled
queries through the real orchestrator, and score the rankings with ranx."""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from db.meta import GET_HARNESS_KEY, HAS_MEMORIES, PUT_HARNESS_KEY
from retrieval.config import Settings
from retrieval.errors import InvalidInput, RetrievalError
from retrieval.ingest import ingest, load_precomputed, read_jsonl
from retrieval.models import RetrievalOptions, Strategy

logger = logging.getLogger(__name__)

METRICS = ["mrr@10", "hit_rate@1", "hit_rate@5", "ndcg@10", "recall@100"]
_NAMES = {"hit_rate@1": "hit@1", "hit_rate@5": "hit@5"}


@dataclass(frozen=True)
class EvalQuery:
    id: str
    text: str
    now: datetime | None


def read_queries(path: Path) -> list[EvalQuery]:
    """JSONL of {id, text, now?}; a bad line is reported with its number."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                now = datetime.fromisoformat(obj["now"]) if obj.get("now") else None
                out.append(EvalQuery(str(obj["id"]), str(obj["text"]), now))
            except (json.JSONDecodeError, KeyError, ValueError, TypeError) as exc:
                raise InvalidInput(
                    [{"line": n, "field": "(query)", "reason": f"{type(exc).__name__}: {exc}"}]
                ) from exc
    return out


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """TSV query_id, doc_id, relevance (a header line is skipped)."""
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3 or not parts[2].strip().lstrip("-").isdigit():
                if n == 1 or not line.strip():
                    continue
                raise InvalidInput(
                    [
                        {
                            "line": n,
                            "field": "(qrels)",
                            "reason": "expected query_id<TAB>doc_id<TAB>relevance",
                        }
                    ]
                )
            qrels[parts[0]][parts[1]] = int(parts[2])
    return dict(qrels)


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
    from retrieval.nlp import TOKENIZER_VERSION

    h.update(
        f"|{model}|{schema}|{TOKENIZER_VERSION}|{'vectors' if vectors else 'embedded'}".encode()
    )
    return h.hexdigest()[:32]


# Returns how many live memories of a namespace lie in [start, end).
_IN_WINDOW = """
SELECT count(*) FROM memories WHERE namespace = $1 AND created_at >= $2 AND created_at < $3
  AND NOT is_archived AND searchable AND (expires_at IS NULL OR expires_at > now())"""

# Removes a namespace's memories (its statistics follow, by trigger) and harness record.
_DROP_NAMESPACE = [
    "DELETE FROM postings WHERE namespace = $1",
    "DELETE FROM memories WHERE namespace = $1",
    "DELETE FROM term_df WHERE namespace = $1",
    "DELETE FROM namespace_stats WHERE namespace = $1",
    "DELETE FROM harness_indexes WHERE namespace = $1",
]


class ForeignNamespace(RetrievalError):
    """The namespace holds memories the harness did not put there; replacing them needs --force."""


async def ensure_index(
    rt: Any, corpus: Path, namespace: str, vectors_path: Path | None, *, force: bool = False
) -> tuple[bool, float]:
    """Index the corpus into namespace unless the harness record says it is already there.

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
    items = read_jsonl(corpus)
    vectors = (
        load_precomputed(vectors_path, items, rt.embedder) if vectors_path is not None else None
    )
    async with rt.pool.acquire() as conn, conn.transaction():
        for sql in _DROP_NAMESPACE:
            await conn.execute(sql, namespace, timeout=3600)
    batch = 2000
    for start in range(0, len(items), batch):
        chunk = items[start : start + batch]
        vec = None if vectors is None else np.ascontiguousarray(vectors[start : start + batch])
        await ingest(rt.pool, rt.nlp, rt.embedder, chunk, namespace=namespace, vectors=vec)
        logger.info("indexed %d/%d", start + len(chunk), len(items))
    async with rt.pool.acquire() as conn:
        await conn.execute(PUT_HARNESS_KEY, namespace, key)
        await conn.execute("ANALYZE memories")
    return False, time.perf_counter() - t0


async def run_eval(
    rt: Any,
    queries: list[EvalQuery],
    qrels: dict[str, dict[str, int]],
    *,
    namespace: str,
    strategy: str = "auto",
    limit: int = 100,
    expand: bool = True,
) -> dict[str, Any]:
    """Run every query through the orchestrator; return metrics, latency and per-strategy splits."""
    run: dict[str, dict[str, float]] = {}
    used: dict[str, str] = {}
    latencies = []
    windowed = violations = 0
    force = None if strategy == "auto" else Strategy(strategy)
    for q in queries:
        t = time.perf_counter()
        resp = await rt.orchestrator.retrieve(
            q.text,
            RetrievalOptions(
                namespace=namespace,
                limit=limit,
                now=q.now,
                force_strategy=force,
                log_run=False,
                expand=expand,
            ),
        )
        latencies.append((time.perf_counter() - t) * 1000.0)
        # ranx ranks by score; rank-derived scores keep our order exactly (ties included).
        n = len(resp.results)
        run[q.id] = {r.id: float(n - i) for i, r in enumerate(resp.results)}
        used[q.id] = resp.metadata.strategy_used.value
        tr = resp.metadata.query_intent.time_range
        start, end = (tr.outer_start, tr.outer_end) if tr is not None else (None, None)
        if start is not None and end is not None:
            # The promise of a named window: nothing from outside it (with its soft edges, when
            # fuzzy) in the top 5 while the window itself holds at least 5 memories.
            async with rt.pool.acquire() as conn:
                held = await conn.fetchval(_IN_WINDOW, namespace, start, end)
            if held >= 5:
                windowed += 1
                violations += any(not (start <= r.created_at < end) for r in resp.results[:5])
    out: dict[str, Any] = {"n_queries": len(queries), **score(qrels, run)}
    lat = np.asarray(latencies) if latencies else np.zeros(1)
    out["p50_ms"] = round(float(np.percentile(lat, 50)), 2)
    out["p95_ms"] = round(float(np.percentile(lat, 95)), 2)
    out["windowed_queries"] = windowed
    out["window_violations"] = violations
    if strategy == "auto":
        by: dict[str, list[str]] = defaultdict(list)
        for qid, s in used.items():
            by[s].append(qid)
        out["by_strategy"] = {
            s: {"n_queries": len(ids), **score(qrels, {i: run[i] for i in ids})}
            for s, ids in sorted(by.items())
        }
    out["_run"] = run
    return out


async def run_eval_cli(settings: Settings, args: argparse.Namespace) -> int:
    """The `retrieval eval` command."""
    from retrieval.runtime import open_runtime

    queries = read_queries(args.queries)
    if args.max_queries:
        queries = queries[: args.max_queries]
    qrels = read_qrels(args.qrels)
    # Indexing a corpus writes thousands of memories a statement: no server-side deadline.
    settings = settings.model_copy(
        update={
            "max_limit": max(settings.max_limit, args.limit),
            "log_runs": False,
            "statement_timeout_ms": 0,
        }
    )
    namespace = (
        args.namespace
        or "eval-" + hashlib.sha1(str(args.corpus.resolve()).encode()).hexdigest()[:12]
    )
    rt = await open_runtime(settings)
    try:
        cached, secs = await ensure_index(
            rt, args.corpus, namespace, args.embeddings, force=args.force
        )
        print(
            f"index {'reused' if cached else 'built'} in {secs:.1f} s (namespace {namespace})",
            file=sys.stderr,
        )
        res = await run_eval(
            rt,
            queries,
            qrels,
            namespace=namespace,
            strategy=args.strategy,
            limit=args.limit,
            expand=not args.no_expand,
        )
    finally:
        await rt.close()
    res.pop("_run")
    if args.json:
        print(json.dumps(res, ensure_ascii=False))
    else:
        for k, v in res.items():
            if k != "by_strategy":
                print(f"{k:12s} {v}")
        for s, sub in res.get("by_strategy", {}).items():
            print(f"  {s:14s} " + "  ".join(f"{k}={v}" for k, v in sub.items()))
    return 0


__all__ = ["run_eval", "run_eval_cli", "score", "read_qrels", "read_queries", "ensure_index"]
