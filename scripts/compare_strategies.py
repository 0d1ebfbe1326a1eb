"""Prints the comparison table of all strategies (and the baselines) on one data set.

    python scripts/compare_strategies.py --corpus C --queries Q --qrels R [--embeddings F.npy]

Indexes once (cached like `retrieval eval`), then runs every strategy through the orchestrator.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from retrieval.evaluation import ensure_index, read_qrels, read_queries, run_eval
from retrieval.settings import Settings

STRATEGIES = [
    "auto",
    "vector_only",
    "keyword_only",
    "semantic_only",
    "keyword_boost",
    "hybrid",
    "temporal",
]
COLS = [
    "mrr@10",
    "hit@1",
    "hit@5",
    "ndcg@10",
    "recall@100",
    "p50_ms",
    "p95_ms",
    "window_violations",
]


async def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--queries", type=Path, required=True)
    ap.add_argument("--qrels", type=Path, required=True)
    ap.add_argument("--embeddings", type=Path)
    ap.add_argument("--strategies", nargs="+", default=STRATEGIES)
    args = ap.parse_args()
    from retrieval.runtime import open_runtime

    rt = await open_runtime(Settings().model_copy(update={"log_runs": False}))
    ns = "eval-" + hashlib.sha1(str(args.corpus.resolve()).encode()).hexdigest()[:12]
    try:
        await ensure_index(rt, args.corpus, ns, args.embeddings)
        queries, qrels = read_queries(args.queries), read_qrels(args.qrels)
        print(f"{args.queries.name}: {len(queries)} queries\n")
        print("| strategy | " + " | ".join(COLS) + " |")
        print("|---|" + "---|" * len(COLS))
        for s in args.strategies:
            res = await run_eval(rt, queries, qrels, namespace=ns, strategy=s, limit=100)
            print(
                f"| {s} | "
                + " | ".join(
                    f"{res[c]:.3f}"
                    if "@" in c
                    else f"{res[c]}"
                    if c.startswith("window")
                    else f"{res[c]:.1f}"
                    for c in COLS
                )
                + " |",
                flush=True,
            )
    finally:
        await rt.close()


if __name__ == "__main__":
    asyncio.run(main())
