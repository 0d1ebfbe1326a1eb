"""Read the misses of a dev set: for queries whose relevant memories are not all in the top K,
print the top K (id, score, reason) and where each relevant memory ranked.

    python scripts/eval_misses.py locomo --per-category 3 --k 10 [--no-expand] [--seed 1]
    python scripts/eval_misses.py longmemeval --max-queries 6 --per-category 5

Uses the suite's set definitions and the same (cached) index as `retrieval eval-suite`.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from retrieval.evaluation.harness import (
    clock_zone,
    corpus_namespace,
    ensure_index,
    eval_settings,
    haystacks,
    read_qrels,
    read_queries,
    sub_namespace,
)
from retrieval.evaluation.suite import DEV_SETS
from retrieval.models import RetrievalOptions
from retrieval.settings import Settings


async def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("set", choices=[s.name for s in DEV_SETS])
    ap.add_argument("--dir", type=Path, default=Path("../shared/eval"))
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--per-category", type=int, default=3)
    ap.add_argument("--no-expand", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--max-queries",
        type=int,
        default=None,
        help="the set's first N questions only (a conversation set indexes only theirs)",
    )
    args = ap.parse_args()
    from retrieval.runtime import open_runtime

    s = next(x for x in DEV_SETS if x.name == args.set)
    corpus = args.dir / s.corpus
    ns = corpus_namespace(corpus)
    rt = await open_runtime(eval_settings(Settings(), 100))
    try:
        queries = read_queries(args.dir / s.queries)[: args.max_queries]
        only = haystacks(queries) if args.max_queries is not None else None
        vectors = args.dir / s.embeddings if s.embeddings else None
        await ensure_index(rt, corpus, ns, vectors, only=only)
        qrels = read_qrels(args.dir / s.qrels)
        random.Random(args.seed).shuffle(queries)
        shown: dict[str, int] = {}
        for q in queries:
            cat = q.category or "all"
            if shown.get(cat, 0) >= args.per_category:
                continue
            resp = await rt.orchestrator.retrieve(
                q.text,
                RetrievalOptions(
                    namespace=sub_namespace(ns, q.namespace),
                    limit=100,
                    now=q.now,
                    timezone=clock_zone(q.now),
                    log_run=False,
                    expand=not args.no_expand,
                    context_window=0,
                ),
            )
            ids = [r.id for r in resp.results]
            rel = [d for d, v in qrels.get(q.id, {}).items() if v > 0]
            if all(d in ids[: args.k] for d in rel):
                continue
            shown[cat] = shown.get(cat, 0) + 1
            print(f"\n## [{cat}] {q.id}: {q.text}  ({resp.metadata.strategy_used.value})")
            print(f"   keywords {list(resp.metadata.query_intent.keywords)}")
            for d in rel:
                rank = ids.index(d) + 1 if d in ids else None
                print(f"   relevant {d}: rank {rank}")
                if rank is not None and rank > args.k:
                    r = resp.results[rank - 1]
                    print(f"       {r.score:.3f} {r.content[:90]!r}\n       {r.reason[:200]}")
            for i, r in enumerate(resp.results[: args.k], 1):
                mark = "*" if r.id in rel else " "
                print(
                    f" {mark}{i:2d} {r.score:.3f} {r.id} {r.content[:90]!r}\n       {r.reason[:200]}"
                )
    finally:
        await rt.close()


if __name__ == "__main__":
    asyncio.run(main())
