"""Offline fusion tuning: collect every source's candidates once, then score fusion settings.

    python scripts/tune_fusion.py collect --corpus C --queries Q --out cands.pkl [--embeddings F.npy]
    python scripts/tune_fusion.py grid cands.pkl --qrels R

Collecting runs the real analyzer and sources (k=100 each); the grid re-fuses those lists with
the pure reranker functions, so a weight grid costs seconds, not a re-run of the database.
Tune on dev sets only.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import pickle
import sys
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from types import MappingProxyType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from retrieval.analysis.strategy import HYBRID, PRESETS, _w, plan
from retrieval.evaluation import ensure_index, read_qrels, read_queries, score
from retrieval.models import Filters, Fusion, RetrievalOptions, Source
from retrieval.rank.rerank import rerank
from retrieval.search.legs import SOURCES
from retrieval.search.run import Given, SearchRun
from retrieval.settings import Settings


async def collect(args: argparse.Namespace) -> None:
    from retrieval.runtime import open_runtime

    rt = await open_runtime(Settings())
    ns = args.namespace
    await ensure_index(rt, args.corpus, ns, args.embeddings)
    out = []
    for q in read_queries(args.queries):
        intent = rt.analyzer.analyze(q.text, q.now)
        vec = rt.embedder.embed_query(q.text)
        p = plan(intent)
        run = SearchRun(
            pool=rt.pool,
            intent=intent,
            filters=Filters(namespace=ns),
            k=100,
            window=p.time_range,
            timeout_s=10,
        )
        per = {}
        for s in (Source.VECTOR, Source.KEYWORD, Source.TRIGRAM, Source.TEMPORAL):
            per[s] = await SOURCES[s](run, Given(vectors=(vec,)))
        out.append((q.id, intent, p.strategy, per, q.now))
    await rt.close()
    with open(args.out, "wb") as fh:
        pickle.dump(out, fh)
    print(f"collected {len(out)} queries into {args.out}")


def evaluate(data, qrels, preset_for, limit: int = 100) -> dict[str, float]:
    run = {}
    for qid, _intent, strategy, per, now in data:
        # Dedupe off: it is O(n^2) in Python and near-duplicates are rare in this corpus.
        preset = replace(preset_for(strategy), dedupe_threshold=1.01)
        now = now or datetime.now().astimezone()
        use = {s: per[s] for s in preset.sources if s in per}
        res, _ = rerank(use, preset, _intent, RetrievalOptions(limit=limit), now=now, window=None)
        run[qid] = {r.candidate.external_id: float(len(res) - i) for i, r in enumerate(res)}
    return score(qrels, run)


def grid(args: argparse.Namespace) -> None:
    import retrieval.rank.lexical as lx
    from retrieval.cache import ByteLRU

    # The grid reranks the same candidates thousands of times: hold every memory's n-grams.
    lx._CODES = ByteLRU(1 << 40, lx.held_bytes)
    with open(args.cands, "rb") as fh:
        data = pickle.load(fh)
    qrels = read_qrels(args.qrels)
    base = {
        "vector_only": lambda s: PRESETS[s.__class__("vector_only")],
        "keyword_only": lambda s: PRESETS[s.__class__("keyword_only")],
        "auto(presets)": lambda s: PRESETS[s],
    }
    for name, fn in ({} if args.no_baselines else base).items():
        print(f"{name:40s}", evaluate(data, qrels, fn))
    rrf = replace(HYBRID, fusion=Fusion.RRF, weights=_w(vector=1.0, keyword=1.0), min_score=0.0)
    if not args.no_baselines:
        print(f"{'rrf v+k':40s}", evaluate(data, qrels, lambda s: rrf))
    for wv, wk, wt, lex, kn, n in itertools.product(
        args.wv, args.wk, args.wt, args.lex, args.knorm, args.lexn
    ):
        p = replace(
            HYBRID,
            weights=_w(vector=wv, keyword=wk, trigram=wt),
            min_score=0.0,
            recency_weight=0.0,
            lex_weight=lex,
            lex_n=n,
            norms=MappingProxyType({Source.KEYWORD: kn, Source.TRIGRAM: kn}),
        )
        print(
            f"{f'v={wv} k={wk} t={wt} lex={lex}/{n} knorm={kn}':44s}",
            evaluate(data, qrels, lambda s, p=p: p),
        )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--corpus", type=Path, required=True)
    c.add_argument("--queries", type=Path, required=True)
    c.add_argument("--embeddings", type=Path)
    c.add_argument("--namespace", required=True)
    c.add_argument("--out", type=Path, required=True)
    g = sub.add_parser("grid")
    g.add_argument("cands", type=Path)
    g.add_argument("--qrels", type=Path, required=True)
    g.add_argument("--wv", type=float, nargs="+", default=[0.3, 0.5, 0.7])
    g.add_argument("--wk", type=float, nargs="+", default=[0.3, 0.5, 0.7])
    g.add_argument("--wt", type=float, nargs="+", default=[0.0, 0.1])
    g.add_argument("--lex", type=float, nargs="+", default=[0.0, 0.3])
    g.add_argument("--knorm", nargs="+", default=["minmax"])
    g.add_argument("--lexn", type=int, nargs="+", default=[2])
    g.add_argument("--no-baselines", action="store_true")
    args = ap.parse_args()
    if args.cmd == "collect":
        asyncio.run(collect(args))
    else:
        grid(args)


if __name__ == "__main__":
    main()
