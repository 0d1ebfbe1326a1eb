"""`retrieval read-events`, and the service's own re-read at start: every memory whose event was
not read when it was written (written before migration 0021) or was read by an older version of
the reader gets the event its words place (retrieval.analysis.time.events), read against its
created_at in the service's time zone (a stored time keeps no offset), a batch at a time. A
re-read, not a re-embed: no vector, term or name changes. Until a memory is read, windows match
it by when it was written alone."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import tzinfo

import asyncpg

from db import pass_events
from retrieval.analysis.time.events import EVENT_READER_VERSION
from retrieval.ingest.rows import read_memory, stored_event

logger = logging.getLogger(__name__)

BATCH = 1000


def _read(rows: list[asyncpg.Record], zone: tzinfo) -> tuple[list, list, list]:
    """Each row's event as a write stores it (ingest.rows): its range (or None), the offset it
    was read in, and the created_at read against."""
    ranges, offsets, read_at = [], [], []
    for r in rows:
        at = r["created_at"].astimezone(zone)
        got = read_memory(r["title"], r["content"], r["memory_type"], r["source_type"], at)
        rng, offset, _ = stored_event(got).columns()
        ranges.append(rng)
        offsets.append(offset)
        read_at.append(r["created_at"])
    return ranges, offsets, read_at


async def read_events(
    pool: asyncpg.Pool,
    zone: tzinfo,
    *,
    batch: int = BATCH,
    log: Callable[[str], None] | None = None,
    wait_s: float = 5.0,
) -> int:
    """Read the event of every memory still to be read, in id order; returns how many were
    read. Another process re-reading meanwhile is waited for (`wait_s` between tries)."""
    done, after, t0 = 0, 0, time.monotonic()
    while True:
        async with pool.acquire() as conn:
            rows = await pass_events.next_unread(conn, after, batch, EVENT_READER_VERSION)
        if not rows:
            break
        ranges, offsets, read_at = await asyncio.to_thread(_read, rows, zone)
        ids = [r["id"] for r in rows]
        if not await pass_events.write_events(
            pool, ids, ranges, offsets, read_at, EVENT_READER_VERSION
        ):
            await asyncio.sleep(wait_s)  # another process is at it: read what it leaves
            after = 0
            continue
        done += len(rows)
        after = ids[-1]
        if log is not None:
            log(f"{done} memories read ({time.monotonic() - t0:.1f} s)")
    return done


async def to_read(pool: asyncpg.Pool, most: int = 1) -> int:
    """How many memories are still to be read (at most `most` counted)."""
    async with pool.acquire() as conn:
        return await pass_events.unread(conn, EVENT_READER_VERSION, most)


async def in_the_background(pool: asyncpg.Pool, zone: tzinfo) -> None:
    """The service's re-read at start: nothing when every memory is read; else read them all,
    logged, the service answering meanwhile (a memory not read yet matches windows by when it
    was written)."""
    if not await to_read(pool):
        return
    t0 = time.monotonic()
    logger.info("reading the events of the memories written before they were read")
    n = await read_events(pool, zone)
    logger.info("events read for %d memories in %.1f s", n, time.monotonic() - t0)
