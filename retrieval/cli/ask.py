"""The commands that ask: `query` (a retrieval) and `analyze` (the analysis and the plan)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from retrieval.cli.common import opened
from retrieval.models import RetrievalOptions, Strategy
from retrieval.settings import Settings


def _print_results(resp: Any) -> None:
    md = resp.metadata
    print(
        f"strategy {md.strategy_used.value} · {md.total_latency_ms:.1f} ms · "
        f"{md.num_results_before_rerank} candidates -> {md.num_results_after_rerank}"
        + (f" · DEGRADED: {', '.join(md.degraded)}" if md.degraded else "")
    )
    for i, r in enumerate(resp.results, 1):
        text = r.content.replace("\n", " ")
        print(f"{i:2d}. [{r.score:.3f} {r.relevance}] {r.created_at:%Y-%m-%d} {text[:100]}")
        print(f"    {r.reason}")
    if not resp.results:
        print("no memories matched")


async def query(settings: Settings, args: argparse.Namespace) -> int:
    """`retrieval query TEXT`: the answer as a list, or the API's JSON."""
    async with opened(settings) as rt:
        opts = RetrievalOptions(
            namespace=args.namespace,
            limit=args.limit,
            now=args.now,
            force_strategy=Strategy(args.strategy) if args.strategy else None,
        )
        resp = await rt.orchestrator.retrieve(args.text, opts)
        await rt.orchestrator.flush()
    if args.json:
        from retrieval_client.models import RetrieveResponse

        print(RetrieveResponse.model_validate(resp).model_dump_json())
    else:
        _print_results(resp)
    return 0


def analyze(settings: Settings, args: argparse.Namespace) -> int:
    """`retrieval analyze TEXT`: the analysis as the API reports it (`query_intent`), the
    strategy chosen and its parameters; no database needed."""
    from retrieval.analysis.analyzer import CueDictionary, QueryAnalyzer
    from retrieval.analysis.strategy import plan
    from retrieval.text.nlp import JapaneseNLP

    nlp = JapaneseNLP(settings.spacy_model, ner=settings.ner == "spacy")
    analyzer = QueryAnalyzer(
        nlp,
        timezone=settings.timezone,
        recent_days=settings.recent_days,
        dictionary=CueDictionary.load(settings.dictionary_path),
    )
    intent = analyzer.analyze(args.text, args.now)
    p = plan(intent)
    out = {**intent.to_json(), "strategy": p.strategy.value, "params": p.preset.to_json()}
    if args.json:
        print(json.dumps(out, ensure_ascii=False))
    else:
        for k, v in out.items():
            print(f"{k:12s} {json.dumps(v, ensure_ascii=False)}")
    return 0
