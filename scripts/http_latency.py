"""Latency over HTTP of a dev set's questions, as a context assembler asks them (default
request: limit 10, expansion on, context window 1), against a running `retrieval serve` over the
data directory `retrieval eval-suite` indexed the set into:

    RETRIEVAL_DATA_DIR=D retrieval eval-suite --sets locomo       # index it (cached)
    RETRIEVAL_DATA_DIR=D retrieval serve --port 8765 &
    python scripts/http_latency.py locomo --url http://127.0.0.1:8765 [--no-expand] [--repeat 2]

Prints client-side p50/p95/p99, the server's own stages and each source's time, the ranking
the answers give (MRR@10, R@10 and for a set of sessions session any@5, of the questions asked
in their own namespace, as the harness scores them in-process; each request names the calendar
the harness asks in, its date's zone), and with --slowest N the N slowest requests stage by
stage. Each question is asked once per pass; a
second pass (--repeat 2) shows what the query-embedding cache saves. A set indexed only in
part (eval-suite --max-queries N) gives more distinct requests with `--max-queries N
--every-namespace`: every question asked in each of those N haystacks.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from retrieval.evaluation.data import EvalQuery, read_qrels, sessions_of
from retrieval.evaluation.harness import (
    clock_zone,
    corpus_namespace,
    read_queries,
    score,
    session_recall,
    sub_namespace,
)
from retrieval.evaluation.suite import DEV_SETS, DevSet


def pct(xs: list[float]) -> str:
    a = np.asarray(xs)
    return " / ".join(f"{np.percentile(a, p):.1f}" for p in (50, 95, 99))


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("set", choices=[s.name for s in DEV_SETS])
    ap.add_argument("--url", default="http://127.0.0.1:8765")
    ap.add_argument("--dir", type=Path, default=Path("../shared/eval"))
    ap.add_argument("--limit", type=int, default=10)
    ap.add_argument("--no-expand", action="store_true")
    ap.add_argument("--context-window", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument(
        "--slowest",
        type=int,
        default=0,
        help="also print the N slowest requests of each pass: the question, its characters, "
        "strategy and server stages",
    )
    ap.add_argument("--max-queries", type=int, default=0)
    ap.add_argument(
        "--every-namespace",
        action="store_true",
        help="a conversation set: ask every question of the set in the namespace of each of "
        "the first --max-queries questions (the haystacks indexed), for more distinct requests",
    )
    args = ap.parse_args()
    s = next(x for x in DEV_SETS if x.name == args.set)
    asked = dev_requests(
        s,
        args.dir,
        limit=args.limit,
        expand=not args.no_expand,
        context_window=args.context_window,
        max_queries=args.max_queries,
        every_namespace=args.every_namespace,
    )
    queries = [q for q, _ in asked]
    # Each question's own namespace: the answers scored are those asked there.
    own = {q.id: q.namespace for q in read_queries(args.dir / s.queries)}
    with httpx.Client(base_url=args.url, timeout=30.0) as client:
        for n in range(args.repeat):
            client_ms: list[float] = []
            stages: dict[str, list[float]] = defaultdict(list)
            each: list[tuple[float, str, str, dict[str, float]]] = []
            ranked: dict[str, list[str]] = {}
            for q, body in asked:
                t = time.perf_counter()
                r = client.post("/v1/retrieve", json=body)
                client_ms.append((time.perf_counter() - t) * 1000.0)
                r.raise_for_status()
                answer = r.json()
                if q.namespace == own.get(q.id):
                    ranked[q.id] = [x["id"] for x in answer["results"]]
                meta = answer["metadata"]
                stages["total (server)"].append(meta["total_latency_ms"])
                for k, v in meta["stage_latency_ms"].items():
                    stages[k].append(v)
                for k, rep in meta["search_breakdown"].items():
                    stages[f"  {k}"].append(rep["latency_ms"])
                each.append(
                    (client_ms[-1], q.text, meta["strategy_used"], meta["stage_latency_ms"])
                )
            print(f"pass {n + 1}: {len(queries)} questions, p50 / p95 / p99 ms")
            print(f"  HTTP (client)   {pct(client_ms)}")
            # Stages, then each source (indented: part of search, expand or context).
            for k, v in sorted(stages.items(), key=lambda kv: (kv[0].startswith(" "), kv[0])):
                print(f"  {k:15s} {pct(v)}")
            print_ranking(args.dir, s, queries, ranked)
            for ms, text, strategy, st in sorted(each, key=lambda x: -x[0])[: args.slowest]:
                parts = ", ".join(f"{k} {v:.0f}" for k, v in st.items())
                print(
                    f"  {ms:6.1f} ms  {len(text):3d} chars  {strategy:13s} {parts}  {text[:60]!r}"
                )


def dev_requests(
    s: DevSet,
    root: Path,
    *,
    limit: int = 10,
    expand: bool = True,
    context_window: int = 1,
    max_queries: int = 0,
    every_namespace: bool = False,
) -> list[tuple[EvalQuery, dict]]:
    """A dev set's questions as `/v1/retrieve` bodies, each in the namespace `retrieval
    eval-suite` indexed its memories into, with its date and the calendar the harness asks in;
    the first `max_queries` only, or with `every_namespace` every question in each of their
    namespaces."""
    ns = corpus_namespace(root / s.corpus)
    queries = read_queries(root / s.queries)
    if max_queries:
        indexed = queries[:max_queries]
        queries = (
            [replace(q, namespace=x.namespace) for x in indexed for q in queries]
            if every_namespace
            else indexed
        )
    out = []
    for q in queries:
        options = {
            "limit": limit,
            "expand": expand,
            "context_window": context_window,
            **({"now": q.now.isoformat()} if q.now else {}),
            # The calendar the harness asks in (the zone of the question's date).
            **({"timezone": zone} if (zone := clock_zone(q.now)) else {}),
        }
        body = {"query": q.text, "namespace": sub_namespace(ns, q.namespace), "options": options}
        out.append((q, body))
    return out


def print_ranking(
    root: Path, s: DevSet, queries: list[EvalQuery], ranked: dict[str, list[str]]
) -> None:
    """The ranking the HTTP answers give, scored as the harness scores its own (ranx), with
    session recall where the questions name sessions."""
    run = {q: {d: float(len(ids) - i) for i, d in enumerate(ids)} for q, ids in ranked.items()}
    got = score(read_qrels(root / s.qrels), run)
    line = (
        f"  ranking: {len(run)} questions, MRR@10 {got['mrr@10']:.3f}, R@10 {got['recall@10']:.3f}"
    )
    named = {q.id: q.relevant_sessions for q in queries if q.relevant_sessions and q.id in run}
    if named:
        session_of = sessions_of(root / s.corpus)
        anys = [
            session_recall(run_ids, session_of, named[q])[0]
            for q, run_ids in ranked.items()
            if q in named
        ]
        line += f", session any@5 {float(np.mean(anys)):.3f}"
    print(line)


if __name__ == "__main__":
    main()
