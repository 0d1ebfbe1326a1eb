"""The commands over a namespace's memories: list (a page), export (every memory as JSONL, the
format `retrieval ingest` reads back), erase (memories by id, for real) and purge (a whole
namespace)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator
from datetime import datetime
from typing import IO, Any

from retrieval.cli.common import err, opened
from retrieval.settings import Settings

# Memories a page of export reads at a time.
EXPORT_PAGE = 500

# The fields of an exported memory, in the order `retrieval ingest` reads them.
EXPORTED = (
    "id",
    "content",
    "title",
    "created_at",
    "expires_at",
    "memory_type",
    "source_type",
    "metadata",
    "thread",
    "links",
    "event_time",
)


def exported(row: dict[str, Any]) -> dict[str, Any]:
    """A memory as a line of an export: what an import needs to give it back the same (its
    id, texts, times, kinds, metadata (a chat turn's role too), thread, links, expiry, and
    its event, when its words place one: an import keeps it as given)."""
    out: dict[str, Any] = {}
    for k in EXPORTED:
        v = row.get(k)
        if v is None or (k == "links" and not v):
            continue
        out[k] = v.isoformat() if isinstance(v, datetime) else v
    return out


async def _pages(rt: Any, namespace: str, page: Any, size: int) -> AsyncIterator[list[dict]]:
    from dataclasses import replace

    from db import memories
    from db.session import session

    while True:
        async with session(rt.pool, rt.settings.write_timeout_s) as conn:
            rows = await memories.list_memories(
                conn, namespace, page, size, timeout_s=rt.settings.write_timeout_s
            )
        if rows:
            yield rows
        if len(rows) < size:
            return
        page = replace(page, after=rows[-1]["id"])


def _page_of(args: argparse.Namespace) -> Any:
    from db.memories import Page

    return Page(
        thread=getattr(args, "thread", None),
        since=getattr(args, "since", None),
        until=getattr(args, "until", None),
        include_archived=bool(getattr(args, "include_archived", False)),
    )


async def export(settings: Settings, args: argparse.Namespace) -> int:
    """`retrieval export --namespace NS`: every memory, one JSON line each, in id order."""
    out: IO[str] = sys.stdout if args.output is None else open(args.output, "w", encoding="utf-8")  # noqa: SIM115
    n = 0
    try:
        async with opened(settings) as rt:
            async for rows in _pages(rt, args.namespace, _page_of(args), EXPORT_PAGE):
                for r in rows:
                    out.write(json.dumps(exported(r), ensure_ascii=False) + "\n")
                n += len(rows)
    finally:
        if out is not sys.stdout:
            out.close()
    print(f"exported {n} memories of {args.namespace!r}", file=sys.stderr)
    return 0


async def list_page(settings: Settings, args: argparse.Namespace) -> int:
    """`retrieval list --namespace NS`: one page as JSON lines; the next page's cursor on
    stderr."""
    from retrieval.api.pages import make_cursor, read_cursor
    from retrieval.errors import InvalidInput

    page = _page_of(args)
    if args.cursor:
        from dataclasses import replace

        try:
            page = replace(page, after=read_cursor(args.cursor, args.namespace, page))
        except InvalidInput as exc:
            return err(str(exc))
    async with opened(settings) as rt:
        from db import memories
        from db.session import session

        async with session(rt.pool, rt.settings.write_timeout_s) as conn:
            rows = await memories.list_memories(
                conn, args.namespace, page, args.limit + 1, timeout_s=rt.settings.write_timeout_s
            )
    for r in rows[: args.limit]:
        print(json.dumps(exported(r), ensure_ascii=False))
    if len(rows) > args.limit:
        print(
            f"next: {make_cursor(args.namespace, page, rows[args.limit - 1]['id'])}",
            file=sys.stderr,
        )
    return 0


async def erase(settings: Settings, args: argparse.Namespace) -> int:
    """`retrieval erase --namespace NS ID...`: erased for real, in one transaction."""
    async with opened(settings) as rt:
        gone = await rt.writer.erase(args.namespace, list(args.ids))
    missing = sorted(set(args.ids) - set(gone.external_ids))
    print(f"erased {len(gone.external_ids)} memories of {args.namespace!r}")
    if missing:
        print(f"not in {args.namespace!r}: {', '.join(missing)}", file=sys.stderr)
    return 0


async def purge(settings: Settings, args: argparse.Namespace) -> int:
    """`retrieval purge --namespace NS`: every memory and every row naming the namespace
    erased, then VACUUM; resumes a purge that stopped."""
    async with opened(settings) as rt:
        purges = rt.writer.purges
        assert purges is not None
        state = await purges.start(args.namespace, f"cli:{args.namespace}")
        # A purge another process left (its lease ran out) is taken up here too.
        claimer = asyncio.create_task(purges.run())
        try:
            await purges.wait(args.namespace)
            while state["state"] == "running":
                state = await purges.get(args.namespace, state["id"])
                if state["state"] == "running":
                    await asyncio.sleep(1.0)
        finally:
            claimer.cancel()
    print(
        f"purge {state['id']} of {args.namespace!r}: {state['state']}, {state['erased']} of "
        f"{state['total']} memories erased, vacuumed: {'yes' if state['vacuumed'] else 'no'}"
    )
    return 0 if state["state"] == "done" else 1
