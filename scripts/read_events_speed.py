"""How long the event re-read of migration 0021 takes (`retrieval read-events`, the service's own
at start): N memories copied from the stored conversation turns of a namespace (their text,
time and vector; LoCoMo's after `retrieval eval-suite --sets locomo`) into a scratch namespace,
marked not read, then read by the pass as an upgraded store's would be; the scratch namespace
is erased after. Prints memories, seconds and memories per second.

    python scripts/read_events_speed.py --from 'eval-locomo%' --memories 100000
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from zoneinfo import ZoneInfo

import asyncpg

# Copies $3 memories of the namespaces LIKE $2 (cycled) into namespace $1, not read.
COPY = """
WITH src AS (SELECT m.*, row_number() OVER (ORDER BY m.id) - 1 AS k
             FROM memories m WHERE m.namespace LIKE $2),
     n AS (SELECT count(*) AS c FROM src)
INSERT INTO memories (external_id, namespace, content, title, memory_type, source_type,
                      embedding, search_tokens, token_count, created_at, term_tf, event_read)
SELECT 'm' || g.i, $1, s.content, s.title, s.memory_type, s.source_type, s.embedding,
       s.search_tokens, s.token_count, s.created_at, s.term_tf, NULL
FROM generate_series(1, $3) AS g(i) CROSS JOIN n JOIN src s ON s.k = (g.i - 1) % n.c"""


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="source", required=True, help="namespaces to copy (LIKE)")
    ap.add_argument("--memories", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=1000)
    args = ap.parse_args()
    from retrieval.maintenance.read_events import read_events
    from retrieval.settings import Settings

    settings = Settings()
    pool = await asyncpg.create_pool(await asyncio.to_thread(settings.dsn), min_size=1, max_size=4)
    ns = f"read-events-speed-{uuid.uuid4().hex[:8]}"
    try:
        async with pool.acquire() as conn:
            src = await conn.fetchval(
                "SELECT count(*) FROM memories WHERE namespace LIKE $1", args.source
            )
            if not src:
                raise SystemExit(f"no memories in namespaces like {args.source!r}")
            # the other memories of the store are read first: only the copies are timed
            await read_events(pool, ZoneInfo(settings.timezone), batch=args.batch)
            t = time.perf_counter()
            await conn.execute("SET statement_timeout = 0")
            await conn.execute(COPY, ns, args.source, args.memories)
            print(f"copied {args.memories} memories of {src} in {time.perf_counter() - t:.1f} s")
        t = time.perf_counter()
        n = await read_events(pool, ZoneInfo(settings.timezone), batch=args.batch)
        took = time.perf_counter() - t
        async with pool.acquire() as conn:
            placed = await conn.fetchval(
                "SELECT count(*) FROM memories WHERE namespace = $1 AND event_time IS NOT NULL", ns
            )
        print(f"read {n} memories in {took:.1f} s ({n / took:.0f}/s); {placed} given an event")
    finally:
        async with pool.acquire() as conn:
            await conn.execute("SET statement_timeout = 0")
            await conn.execute("DELETE FROM memories WHERE namespace = $1", ns)
        await pool.close()


if __name__ == "__main__":
    asyncio.run(main())
