"""`retrieval eval-suite`: every dev set of ../shared/eval in one run and one table, so that a
ranking change is judged on all of them at once (and, with --compare, against a saved run)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retrieval.errors import InvalidInput
from retrieval.evaluation.harness import corpus_namespace, eval_settings, evaluate
from retrieval.settings import Settings


@dataclass(frozen=True)
class DevSet:
    """One labelled set, its files relative to the suite's directory."""

    name: str
    corpus: str
    queries: str
    qrels: str
    embeddings: str | None = None
    # Run only when named (--sets): indexing it costs far more than the others together.
    on_request: bool = False


def _dir_set(name: str, folder: str, corpus: str = "corpus.jsonl", **kw: Any) -> DevSet:
    """A set laid out as one folder: corpus, queries.jsonl, qrels.tsv."""
    return DevSet(
        name, f"{folder}/{corpus}", f"{folder}/queries.jsonl", f"{folder}/qrels.tsv", **kw
    )


DEV_SETS = (
    DevSet(
        "jsquad",
        "jsquad/corpus.jsonl",
        "jsquad/queries_dev.jsonl",
        "jsquad/qrels_dev.tsv",
        "jsquad/corpus_e5.npy",
    ),
    DevSet(
        "semantic",
        "jsquad/corpus.jsonl",
        "jsquad/queries_semantic_dev.jsonl",
        "jsquad/qrels_semantic_dev.tsv",
        "jsquad/corpus_e5.npy",
    ),
    _dir_set("temporal", "temporal_dev"),
    _dir_set("temporal_hard", "temporal_hard_dev"),
    _dir_set("multihop", "multihop_dev"),
    _dir_set("locomo", "locomo_dev", "memories.jsonl"),
    _dir_set("asks", "asks_dev", "memories.jsonl"),
    # 909 articles of up to 38,000 characters: embedding them takes most of an hour here.
    _dir_set("longdoc", "longdoc_dev", on_request=True),
    # 12,285 turns of ~1,000 characters: hours to embed here (a question prefix, --max-queries,
    # indexes only those questions' haystacks).
    _dir_set("longmemeval", "longmemeval_dev", "memories.jsonl.gz", on_request=True),
)
SET_NAMES = tuple(s.name for s in DEV_SETS)

# The table's columns: (key in a result, heading).
COLUMNS = (
    ("mrr@10", "MRR@10"),
    ("hit@5", "hit@5"),
    ("recall@5", "R@5"),
    ("recall@10", "R@10"),
    ("p50_ms", "p50 ms"),
    ("p95_ms", "p95 ms"),
    ("highlight_hit", "highlight hit"),
    ("session_any@5", "session any@5"),
    ("chars@10", "chars@10"),
)


def chosen(names: list[str] | None, root: Path) -> list[DevSet]:
    """The sets to run: those named, else every set not run on request; each must be present."""
    sets = [s for s in DEV_SETS if (s.name in names if names else not s.on_request)]
    if not root.is_dir():
        reason = (
            f"{root} is not a folder; point --dir at the evaluation sets (the folder holding "
            "jsquad/, temporal_dev/, locomo_dev/, …: the team's shared/eval)"
        )
        raise InvalidInput([{"field": "--dir", "reason": reason}])
    missing = [
        f"{s.name}: {root / f}"
        for s in sets
        for f in (s.corpus, s.queries, s.qrels, s.embeddings)
        if f is not None and not (root / f).exists()
    ]
    if missing:
        raise InvalidInput([{"field": "--dir", "reason": "missing " + "; ".join(missing)}])
    return sets


def rows(results: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """One row per set, then one per question category of the sets that have them."""
    out: list[tuple[str, dict[str, Any]]] = []
    for name, res in results.items():
        out.append((name, res))
        for cat, sub in res.get("by_category", {}).items():
            out.append((f"{name} / {cat}", sub))
    return out


def _cell(key: str, now: Any, before: Any) -> str:
    if now is None:
        return ""
    fmt = "{:.1f}" if key.endswith("_ms") else "{:.3f}"
    text = fmt.format(now)
    if before is not None:
        text = f"{fmt.format(before)} → {text}"
    return text


def table(results: dict[str, dict[str, Any]], before: dict[str, dict[str, Any]] | None) -> str:
    """A Markdown table of the results (before → now where a saved run is given)."""
    then = dict(rows(before or {}))
    lines = [
        "| set | queries | " + " | ".join(h for _, h in COLUMNS) + " |",
        "|---|---|" + "---|" * len(COLUMNS),
    ]
    for name, res in rows(results):
        old = then.get(name, {}) if before is not None else {}
        cells = [
            _cell(k, res.get(k), old.get(k) if before is not None else None) for k, _ in COLUMNS
        ]
        lines.append(f"| {name} | {res.get('n_queries', '')} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


async def run_suite(
    rt: Any,
    root: Path,
    sets: list[DevSet],
    *,
    strategy: str = "auto",
    expand: bool = True,
    limit: int = 100,
    max_queries: int | None = None,
    log: Any = None,
) -> dict[str, dict[str, Any]]:
    """Index each set's corpus (cached; as far as its first `max_queries` questions need) and
    run its queries; the results by set name."""
    out: dict[str, dict[str, Any]] = {}
    for s in sets:
        corpus = root / s.corpus
        t = time.perf_counter()
        res, cached, secs = await evaluate(
            rt,
            corpus,
            root / s.queries,
            root / s.qrels,
            namespace=corpus_namespace(corpus),
            vectors=root / s.embeddings if s.embeddings else None,
            max_queries=max_queries,
            strategy=strategy,
            limit=limit,
            expand=expand,
        )
        res.pop("_run")
        out[s.name] = res
        if log is not None:
            log(
                f"{s.name}: index {'reused' if cached else 'built'} in {secs:.1f} s, "
                f"{res['n_queries']} queries in {time.perf_counter() - t - secs:.1f} s"
            )
    return out


async def run_suite_cli(settings: Settings, args: argparse.Namespace) -> int:
    """The `retrieval eval-suite` command."""
    from retrieval.runtime import open_runtime

    sets = chosen(args.sets, args.dir)
    before = None
    if args.compare is not None:
        try:
            before = json.loads(args.compare.read_text(encoding="utf-8"))["sets"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InvalidInput(
                [{"field": "--compare", "reason": f"not a saved eval-suite run: {exc}"}]
            ) from exc
    rt = await open_runtime(eval_settings(settings, args.limit))
    try:
        results = await run_suite(
            rt,
            args.dir,
            sets,
            strategy=args.strategy,
            expand=not args.no_expand,
            limit=args.limit,
            max_queries=args.max_queries,
            log=lambda msg: print(msg, file=sys.stderr, flush=True),
        )
    finally:
        await rt.close()
    saved = {"strategy": args.strategy, "expand": not args.no_expand, "sets": results}
    if args.save is not None:
        args.save.write_text(json.dumps(saved, ensure_ascii=False, indent=1), encoding="utf-8")
    if args.json:
        print(json.dumps(saved, ensure_ascii=False))
    else:
        print(table(results, before))
    return 0


__all__ = ["DEV_SETS", "SET_NAMES", "DevSet", "chosen", "run_suite", "run_suite_cli", "table"]
