"""`retrieval` command line: serve, migrate, retokenize, reembed-turns, embed-passages, ingest,
query, analyze, eval, eval-suite, bench."""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import logging
import os
import shutil
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
from pydantic import ValidationError

from db.bulk import Rebuild
from retrieval.errors import InvalidInput, RetrievalError
from retrieval.ingest.importer import PARALLEL_FROM
from retrieval.models import Strategy
from retrieval.settings import Settings
from retrieval.validation import check_instant, check_namespace

STRATEGY_CHOICES = [s.value for s in Strategy]


def _iso(value: str) -> datetime:
    try:
        dt = datetime.fromisoformat(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {value!r}") from exc
    try:
        check_instant(dt)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value}: {exc}") from None
    return dt


def _namespace(value: str) -> str:
    try:
        check_namespace(value)
    except InvalidInput as exc:
        raise argparse.ArgumentTypeError(f"{value!r}: {exc.errors[0]['reason']}") from None
    return value


def _positive(value: str) -> int:
    try:
        n = int(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from exc
    if n < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return n


def _bench_queries(value: str) -> int:
    from retrieval.evaluation.bench import MAX_QUERIES

    n = _positive(value)
    if n > MAX_QUERIES:
        raise argparse.ArgumentTypeError(f"at most {MAX_QUERIES} (distinct benchmark queries)")
    return n


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="retrieval",
        description="Retrieval Orchestrator: Japanese-first memory retrieval over PostgreSQL + pgvector. "
        "Uses DATABASE_URL when set, else an embedded PostgreSQL in RETRIEVAL_DATA_DIR.",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = p.add_subparsers(dest="command", required=True)

    _add_serve(sub)
    sub.add_parser(
        "mcp",
        help="serve the MCP tools (search_memories, remember, forget, feedback) over stdio, "
        "for a local agent host (retrieval serve has them at /mcp/)",
    )
    _add_migrate(sub)
    _add_retokenize(sub)
    _add_reembed_turns(sub)
    _add_embed_passages(sub)
    _add_ingest(sub)
    _add_query(sub)
    _add_analyze(sub)
    _add_eval(sub)
    _add_eval_suite(sub)
    _add_bench(sub)
    return p


def _add_serve(sub: Any) -> None:
    """The `serve` command's arguments."""
    s = sub.add_parser("serve", help="run the HTTP service (uvicorn)")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--workers", type=_positive, default=1)
    s.add_argument(
        "--sample",
        action="store_true",
        help="load the packaged sample memories into namespace 'default' first",
    )


def _add_migrate(sub: Any) -> None:
    """The `migrate` command's arguments."""
    sub.add_parser("migrate", help="apply pending database migrations")


def _add_ingest(sub: Any) -> None:
    """The `ingest` command's arguments."""
    i = sub.add_parser(
        "ingest",
        help="import memories from a JSONL file (all or nothing; an interrupted run resumes)",
        description="Validate every line, analyse and embed in chunks (staged and committed, so "
        "rerunning the same command resumes), then publish the whole file in one transaction.",
    )
    i.add_argument("file", type=Path)
    i.add_argument("--namespace", default="default")
    i.add_argument(
        "--embeddings", type=Path, help="precomputed passage vectors (.npy, row i = item i)"
    )
    i.add_argument(
        "--workers",
        type=_positive,
        default=None,
        help=f"processes analysing the text (default: one per core from {PARALLEL_FROM} items, else 1)",
    )
    i.add_argument(
        "--rebuild-indexes",
        choices=[r.value for r in Rebuild],
        default=Rebuild.AUTO.value,
        help="drop and rebuild the vector, trigram and postings indexes around the publish "
        "(auto: when the file holds more memories than the table); while they "
        "are rebuilt the table is locked for every namespace",
    )


def _add_query(sub: Any) -> None:
    """The `query` command's arguments."""
    q = sub.add_parser("query", help="retrieve memories for a query")
    q.add_argument("text")
    q.add_argument("--namespace", default="default")
    q.add_argument("--limit", type=_positive, default=10)
    q.add_argument("--strategy", choices=STRATEGY_CHOICES, help="force a strategy")
    q.add_argument("--now", type=_iso, help="resolve time words against this ISO 8601 instant")
    q.add_argument("--json", action="store_true", help="print the full response as JSON")


def _add_analyze(sub: Any) -> None:
    """The `analyze` command's arguments."""
    a = sub.add_parser("analyze", help="show the query analysis and chosen strategy")
    a.add_argument("text")
    a.add_argument("--now", type=_iso)
    a.add_argument("--json", action="store_true")


def _add_eval(sub: Any) -> None:
    """The `eval` command's arguments."""
    e = sub.add_parser(
        "eval", help="measure retrieval quality (MRR, hit@k, nDCG) on a labelled set"
    )
    e.add_argument("--corpus", type=Path, required=True)
    e.add_argument("--queries", type=Path, required=True)
    e.add_argument("--qrels", type=Path, required=True)
    e.add_argument("--strategy", default="auto", choices=["auto", *STRATEGY_CHOICES])
    e.add_argument("--limit", type=_positive, default=100)
    e.add_argument("--embeddings", type=Path, help="precomputed corpus vectors (.npy)")
    e.add_argument("--namespace", help="namespace to index into (default: derived from the corpus)")
    e.add_argument(
        "--force",
        action="store_true",
        help="index into --namespace even if it holds memories eval did not put there (they are deleted)",
    )
    e.add_argument("--max-queries", type=_positive, help="evaluate only the first N queries")
    e.add_argument(
        "--no-expand",
        action="store_true",
        help="turn multi-hop expansion off (options.expand=false)",
    )
    e.add_argument("--json", action="store_true")


def _add_retokenize(sub: Any) -> None:
    """The `retokenize` command's arguments."""
    from retrieval.maintenance.retokenize import BATCH

    r = sub.add_parser(
        "retokenize",
        help="make every memory's keyword terms again with this version's tokenizer",
        description="After an upgrade that changed the index terms (the service warns at start), "
        "re-tokenize every stored memory, a namespace and a batch at a time; an interrupted run "
        "resumes where it stopped. The service keeps answering meanwhile.",
    )
    r.add_argument("--batch", type=_positive, default=BATCH, help="memories per transaction")


def _add_reembed_turns(sub: Any) -> None:
    """The `reembed-turns` command's arguments."""
    from retrieval.maintenance.reembed_turns import BATCH

    r = sub.add_parser(
        "reembed-turns",
        help="embed the stored conversation turns in context (stores from before migration 0013)",
        description="Embed every stored memory that follows another (a thread, a reply_to link) "
        "again, alone and after the turn it follows, as writes do since migration 0013; a batch "
        "at a time, an interrupted run resumes where it stopped. The service keeps answering "
        "meanwhile. Costs about three embeddings of each turn.",
    )
    r.add_argument("--batch", type=_positive, default=BATCH, help="turns per transaction")
    r.add_argument("--namespace", type=_namespace, help="only this namespace (default: all)")


def _add_embed_passages(sub: Any) -> None:
    """The `embed-passages` command's arguments."""
    from retrieval.maintenance.embed_passages import BATCH

    r = sub.add_parser(
        "embed-passages",
        help="give the stored long memories their passages (stores from before migration 0014)",
        description="Cut every stored memory longer than 2,000 characters that has no passages "
        "into passages and embed each, as writes do since migration 0014 (the memory's vector "
        "becomes their mean); a batch at a time, an interrupted run resumes where it stopped. "
        "The service keeps answering meanwhile. Costs one embedding of the whole text (about "
        "700-900 characters a second on 2 cores).",
    )
    r.add_argument("--batch", type=_positive, default=BATCH, help="memories per transaction")
    r.add_argument("--namespace", type=_namespace, help="only this namespace (default: all)")


def _add_eval_suite(sub: Any) -> None:
    """The `eval-suite` command's arguments."""
    from retrieval.evaluation.suite import SET_NAMES

    e = sub.add_parser(
        "eval-suite",
        help="every dev set (JSQuAD, semantic, temporal, temporal-hard, multi-hop, LoCoMo) in one table",
        description="Index each dev set of DIR once (cached), run its questions through the "
        "orchestrator and print one table: MRR@10, hit@5, recall@5/@10 and latency per set, and "
        "per question category where a set has them (LoCoMo). The long-document set runs only "
        "when named in --sets (indexing it takes most of an hour).",
    )
    e.add_argument(
        "--dir", type=Path, default=Path("../shared/eval"), help="the sets (default ../shared/eval)"
    )
    e.add_argument("--sets", nargs="+", choices=SET_NAMES, help="run only these sets")
    e.add_argument("--strategy", default="auto", choices=["auto", *STRATEGY_CHOICES])
    e.add_argument("--limit", type=_positive, default=100)
    e.add_argument("--no-expand", action="store_true", help="turn multi-hop expansion off")
    e.add_argument("--save", type=Path, help="write the results (JSON) to this file")
    e.add_argument(
        "--compare", type=Path, help="a file written by --save: print 'before -> now' per cell"
    )
    e.add_argument("--json", action="store_true")


def _add_bench(sub: Any) -> None:
    """The `bench` command's arguments."""
    b = sub.add_parser("bench", help="latency per stage and over HTTP at N memories")
    b.add_argument("--memories", type=_positive, default=10_000)
    b.add_argument("--queries", type=_bench_queries, default=200)
    b.add_argument("--concurrency", type=_positive, default=4)
    b.add_argument(
        "--corpus", type=Path, help="use this JSONL corpus instead of synthetic memories"
    )
    b.add_argument("--embeddings", type=Path, help="precomputed vectors for --corpus")
    b.add_argument("--no-http", action="store_true", help="skip the HTTP part")
    b.add_argument("--json", action="store_true")


def _err(msg: str) -> int:
    print(f"retrieval: error: {msg}", file=sys.stderr)
    return 2


# A database failure in a pass that commits batch by batch (retokenize, reembed-turns,
# embed-passages).
_DB_FAILURES = (asyncpg.PostgresError, asyncpg.InterfaceError, ConnectionError, TimeoutError)


def _stopped(command: str, exc: BaseException) -> int:
    """The message for a resumable pass the database stopped: what stands, how to go on."""
    return _err(
        f"the database failed ({type(exc).__name__}: {exc}); every batch before it is written; "
        f"run `retrieval {command}` again to resume where it stopped"
    )


async def _open(settings: Settings) -> Any:
    from retrieval.runtime import open_runtime

    return await open_runtime(settings)


async def _cmd_migrate(settings: Settings) -> int:
    from retrieval.runtime import migrate_database

    dsn = await asyncio.to_thread(settings.dsn)
    applied = await migrate_database(dsn, settings.embedding_dim, settings.timezone)
    print(
        f"applied {len(applied)} migration(s)"
        + (f": {applied}" if applied else "; database is up to date")
    )
    return 0


# A file is published in one transaction; each of its statements may take this long.
INGEST_TIMEOUT_S = 6 * 3600.0


async def _cmd_ingest(settings: Settings, args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from retrieval.ingest.importer import import_file

    # A file is published in one transaction, as long as it takes: no server-side deadline.
    rt = await _open(settings.model_copy(update={"statement_timeout_ms": 0}))
    try:
        with tqdm(unit="mem", disable=not sys.stderr.isatty(), file=sys.stderr) as bar:
            rep = await import_file(
                rt,
                args.file,
                namespace=args.namespace,
                embeddings=args.embeddings,
                workers=args.workers or 0,
                rebuild=Rebuild(args.rebuild_indexes),
                progress=bar.update,
                timeout_s=INGEST_TIMEOUT_S,
            )
    except InvalidInput as exc:
        for e in exc.errors[:20]:
            where = f"{args.file}:{e['line']}" if "line" in e else str(args.file)
            print(f"{where}: {e.get('field')}: {e.get('reason')}", file=sys.stderr)
        if len(exc.errors) > 20:
            print(f"... and {len(exc.errors) - 20} more", file=sys.stderr)
        print("retrieval: nothing was written", file=sys.stderr)
        return 2
    except (asyncpg.PostgresError, asyncpg.InterfaceError, ConnectionError) as exc:
        return _err(
            f"the database failed during the import ({type(exc).__name__}: {exc}); nothing was "
            "published; rerun the same command to resume"
        )
    except TimeoutError:
        return _err(
            f"the database did not finish the write within {INGEST_TIMEOUT_S:g} s; nothing was published "
            "(rerun the command to resume)"
        )
    except OSError as exc:
        return _err(f"cannot read {args.file}: {exc.strerror}")
    finally:
        await rt.close()
    rate = rep.received / rep.seconds if rep.seconds else 0.0
    print(
        f"ingested {rep.received} memories into {rep.namespace!r}: {rep.inserted} new, {rep.updated} updated, "
        f"{rep.embedded} embedded, {rep.seconds:.1f} s ({rate:.1f}/s)"
        + (f"; resumed after line {rep.resumed_from}" if rep.resumed_from else "")
        + (f"; rebuilt {', '.join(rep.rebuilt)}" if rep.rebuilt else "")
    )
    return 0


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


async def _cmd_query(settings: Settings, args: argparse.Namespace) -> int:
    from retrieval.models import RetrievalOptions

    rt = await _open(settings)
    try:
        opts = RetrievalOptions(
            namespace=args.namespace,
            limit=args.limit,
            now=args.now,
            force_strategy=Strategy(args.strategy) if args.strategy else None,
        )
        resp = await rt.orchestrator.retrieve(args.text, opts)
        await rt.orchestrator.flush()
    finally:
        await rt.close()
    if args.json:
        from retrieval_client.models import RetrieveResponse

        print(RetrieveResponse.model_validate(resp).model_dump_json())
    else:
        _print_results(resp)
    return 0


async def _cmd_retokenize(settings: Settings, args: argparse.Namespace) -> int:
    from retrieval.maintenance.retokenize import retokenize
    from retrieval.runtime import open_runtime

    rt = await open_runtime(settings)
    try:
        n = await retokenize(
            rt.pool, rt.nlp, batch=args.batch, log=lambda m: print(m, file=sys.stderr)
        )
    except _DB_FAILURES as exc:
        return _stopped("retokenize", exc)
    finally:
        await rt.close()
    print(f"{n} memories re-tokenized; the store's terms are current")
    return 0


async def _cmd_embedding_pass(settings: Settings, args: argparse.Namespace) -> int:
    """reembed-turns and embed-passages: a resumable pass that embeds stored memories again."""
    from retrieval.maintenance.embed_passages import embed_passages
    from retrieval.maintenance.reembed_turns import reembed_turns
    from retrieval.runtime import open_runtime

    run, done = {
        "reembed-turns": (reembed_turns, "conversation turns embedded in context"),
        "embed-passages": (embed_passages, "long memories given passages"),
    }[args.command]
    rt = await open_runtime(settings)
    try:
        n = await run(
            rt.pool,
            rt.embedder,
            namespace=args.namespace,
            batch=args.batch,
            log=lambda m: print(m, file=sys.stderr),
        )
    except _DB_FAILURES as exc:
        return _stopped(args.command, exc)
    finally:
        await rt.close()
    print(f"{n} {done}")
    return 0


def _cmd_analyze(settings: Settings, args: argparse.Namespace) -> int:
    from retrieval.analysis.analyzer import CueDictionary, QueryAnalyzer
    from retrieval.analysis.nlp import JapaneseNLP
    from retrieval.analysis.strategy import plan

    nlp = JapaneseNLP(settings.spacy_model, ner=settings.ner == "spacy")
    analyzer = QueryAnalyzer(
        nlp,
        timezone=settings.timezone,
        recent_days=settings.recent_days,
        dictionary=CueDictionary.load(settings.dictionary_path),
    )
    intent = analyzer.analyze(args.text, args.now)
    p = plan(intent)
    tr = intent.time_range
    out = {
        "query_type": intent.query_type.value,
        "keywords": list(intent.keywords),
        "entities": [{"text": e.text, "label": e.label} for e in intent.entities],
        "time_range": {
            "start": tr.start.isoformat() if tr and tr.start else None,
            "end": tr.end.isoformat() if tr and tr.end else None,
            "relative": tr.relative if tr else None,
        },
        "time_hints": list(intent.time_hints),
        "focus": intent.focus,
        "asks": intent.asks,
        "strategy": p.strategy.value,
        "params": p.preset.to_json(),
    }
    if args.json:
        print(json.dumps(out, ensure_ascii=False))
    else:
        for k, v in out.items():
            print(f"{k:12s} {json.dumps(v, ensure_ascii=False)}")
    return 0


async def _load_sample(settings: Settings) -> int:
    from retrieval.ingest.sample import load_sample

    rt = await _open(settings)
    try:
        return await load_sample(rt)
    finally:
        await rt.close()


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _serve(settings: Settings, args: argparse.Namespace) -> int:
    import uvicorn

    if args.sample:
        n = asyncio.run(_load_sample(settings))
        print(f"sample: {n} memories in namespace 'default'", file=sys.stderr)
    if not settings.parsed_api_keys() and not _is_loopback(args.host):
        print(
            f"WARNING: serving on {args.host} with no RETRIEVAL_API_KEYS: anyone who can reach this "
            "port can read, write and delete every namespace's memories",
            file=sys.stderr,
        )
    if args.workers > 1:
        # One truth for /metrics: each worker writes its samples to a directory of this start
        # (emptied now: an earlier start's files would be added in), and any worker sums them.
        from retrieval.metrics import MULTIPROC_ENV, prepare_multiprocess_dir

        given = os.environ.get(MULTIPROC_ENV)
        path = Path(given) if given else Path(tempfile.mkdtemp(prefix="retrieval-metrics-"))
        os.environ[MULTIPROC_ENV] = str(prepare_multiprocess_dir(path))
        if not given:
            atexit.register(shutil.rmtree, path, True)
    print(
        f"serving on http://{args.host}:{args.port} (OpenAPI at /docs, {args.workers} worker(s))",
        file=sys.stderr,
    )
    uvicorn.run(
        "retrieval.api:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level="warning",
    )
    return 0


async def _cmd_mcp(settings: Settings) -> int:
    """The MCP server over stdio: stdout carries the protocol only (logs go to stderr)."""
    from retrieval.api import create_app
    from retrieval.api.mcp import ApiClients, build

    app = create_app(settings)
    async with app.router.lifespan_context(app):
        api = ApiClients(app, default_key=settings.mcp_api_key)
        try:
            await build(api).run_stdio_async()
        finally:
            await api.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        settings = Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        return _err(f"configuration: {'.'.join(str(x) for x in first['loc'])}: {first['msg']}")
    try:
        if args.command == "serve":
            return _serve(settings, args)
        if args.command == "mcp":
            return asyncio.run(_cmd_mcp(settings))
        if args.command == "migrate":
            return asyncio.run(_cmd_migrate(settings))
        if args.command == "retokenize":
            return asyncio.run(_cmd_retokenize(settings, args))
        if args.command in ("reembed-turns", "embed-passages"):
            return asyncio.run(_cmd_embedding_pass(settings, args))
        if args.command == "ingest":
            return asyncio.run(_cmd_ingest(settings, args))
        if args.command == "query":
            return asyncio.run(_cmd_query(settings, args))
        if args.command == "analyze":
            return _cmd_analyze(settings, args)
        if args.command == "eval":
            from retrieval.evaluation.harness import run_eval_cli

            return asyncio.run(run_eval_cli(settings, args))
        if args.command == "eval-suite":
            from retrieval.evaluation.suite import run_suite_cli

            return asyncio.run(run_suite_cli(settings, args))
        if args.command == "bench":
            from retrieval.evaluation.bench import run_bench_cli

            return asyncio.run(run_bench_cli(settings, args))
    except RetrievalError as exc:
        return _err(str(exc))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `retrieval query ... | head`: the reader left, nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return _err(f"unknown command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
