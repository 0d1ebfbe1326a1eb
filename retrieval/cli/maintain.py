"""The commands that change a store: migrate, ingest a file, and the resumable maintenance passes
(retokenize, read-events, reembed-turns, embed-passages)."""

from __future__ import annotations

import argparse
import asyncio
import sys

import asyncpg

from db.bulk import Rebuild
from retrieval.cli.common import err, opened
from retrieval.errors import InvalidInput
from retrieval.settings import Settings

# A database failure in a pass that commits batch by batch (retokenize, reembed-turns,
# embed-passages).
DB_FAILURES = (asyncpg.PostgresError, asyncpg.InterfaceError, ConnectionError, TimeoutError)

# A file is published in one transaction; each of its statements may take this long.
INGEST_TIMEOUT_S = 6 * 3600.0


def _stopped(command: str, exc: BaseException) -> int:
    """The message for a resumable pass the database stopped: what stands, how to go on."""
    return err(
        f"the database failed ({type(exc).__name__}: {exc}); every batch before it is written; "
        f"run `retrieval {command}` again to resume where it stopped"
    )


async def migrate(settings: Settings, args: argparse.Namespace) -> int:
    """`retrieval migrate`."""
    from retrieval.runtime import migrate_database

    dsn = await asyncio.to_thread(settings.dsn)
    applied = await migrate_database(dsn, settings.embedding_dim, settings.timezone)
    print(
        f"applied {len(applied)} migration(s)"
        + (f": {applied}" if applied else "; database is up to date")
    )
    return 0


async def ingest(settings: Settings, args: argparse.Namespace) -> int:
    """`retrieval ingest FILE`: all or nothing, resumable; each bad line named."""
    from tqdm import tqdm

    from retrieval.ingest.importer import import_file
    from retrieval.ingest.memory_in import parse_line

    # A file is published in one transaction, as long as it takes: no server-side deadline.
    async with opened(settings.model_copy(update={"statement_timeout_ms": 0})) as rt:
        try:
            with tqdm(unit="mem", disable=not sys.stderr.isatty(), file=sys.stderr) as bar:
                rep = await import_file(
                    rt,
                    args.file,
                    namespace=args.namespace,
                    parse=parse_line,
                    embeddings=args.embeddings,
                    workers=args.workers or 0,
                    rebuild=Rebuild(args.rebuild_indexes),
                    progress=bar.update,
                    timeout_s=INGEST_TIMEOUT_S,
                )
        except InvalidInput as exc:
            return _refused(args, exc)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, ConnectionError) as exc:
            return err(
                f"the database failed during the import ({type(exc).__name__}: {exc}); nothing "
                "was published; rerun the same command to resume"
            )
        except TimeoutError:
            return err(
                f"the database did not finish the write within {INGEST_TIMEOUT_S:g} s; nothing "
                "was published (rerun the command to resume)"
            )
        except OSError as exc:
            return err(f"cannot read {args.file}: {exc.strerror}")
    rate = rep.received / rep.seconds if rep.seconds else 0.0
    print(
        f"ingested {rep.received} memories into {rep.namespace!r}: {rep.inserted} new, "
        f"{rep.updated} updated, {rep.embedded} embedded, {rep.seconds:.1f} s ({rate:.1f}/s)"
        + (f"; resumed after line {rep.resumed_from}" if rep.resumed_from else "")
        + (f"; rebuilt {', '.join(rep.rebuilt)}" if rep.rebuilt else "")
    )
    return 0


def _refused(args: argparse.Namespace, exc: InvalidInput) -> int:
    """A file with bad lines: each named (`FILE:LINE: field: reason`, the first 20)."""
    for e in exc.errors[:20]:
        where = f"{args.file}:{e['line']}" if "line" in e else str(args.file)
        print(f"{where}: {e.get('field')}: {e.get('reason')}", file=sys.stderr)
    if len(exc.errors) > 20:
        print(f"... and {len(exc.errors) - 20} more", file=sys.stderr)
    print("retrieval: nothing was written", file=sys.stderr)
    return 2


async def retokenize(settings: Settings, args: argparse.Namespace) -> int:
    """`retrieval retokenize`."""
    from retrieval.maintenance.retokenize import retokenize as run

    try:
        async with opened(settings) as rt:
            n = await run(rt.pool, rt.nlp, batch=args.batch, log=_log)
    except DB_FAILURES as exc:
        return _stopped("retokenize", exc)
    print(f"{n} memories re-tokenized; the store's terms are current")
    return 0


async def read_events(settings: Settings, args: argparse.Namespace) -> int:
    """`retrieval read-events`."""
    import time
    from zoneinfo import ZoneInfo

    from retrieval.maintenance.read_events import read_events as run

    t0 = time.monotonic()
    try:
        async with opened(settings) as rt:
            n = await run(rt.pool, ZoneInfo(settings.timezone), batch=args.batch, log=_log)
    except DB_FAILURES as exc:
        return _stopped("read-events", exc)
    print(f"{n} memories' events read in {time.monotonic() - t0:.1f} s; every memory is read")
    return 0


async def embedding_pass(settings: Settings, args: argparse.Namespace) -> int:
    """reembed-turns and embed-passages: a resumable pass that embeds stored memories again."""
    from retrieval.maintenance.embed_passages import embed_passages
    from retrieval.maintenance.reembed_turns import reembed_turns

    run, done = {
        "reembed-turns": (reembed_turns, "conversation turns embedded in context"),
        "embed-passages": (embed_passages, "long memories given passages"),
    }[args.command]
    try:
        async with opened(settings) as rt:
            n = await run(
                rt.pool, rt.embedder, namespace=args.namespace, batch=args.batch, log=_log
            )
    except DB_FAILURES as exc:
        return _stopped(args.command, exc)
    print(f"{n} {done}")
    return 0


def _log(message: str) -> None:
    print(message, file=sys.stderr)
