"""Recall of the vector and temporal legs' HNSW walks against exact search, on `retrieval bench`'s
data (load it first: `retrieval bench --memories N`).

For each window (none, 先週, 今月, 先月 relative to now, as the temporal leg resolves them, and
two small ones: 昨日, and 12 hours in the middle of last week), each path (a window over its
weekly partitions' graphs, `week_graphs`, as the temporal leg runs it past EXACT_WINDOW_MAX
memories; the filtered walk of the whole store's graph, `store_graph`, as it ran before
migration 0009; for a window of at most EXACT_WINDOW_MAX memories, `exact_copies`, the exact
search over the weekly copies the leg runs there) and each `ef_search`, runs the legs' own SQL
(HNSW, `hnsw.iterative_scan = relaxed_order`) and the same query with exact distances over
`memories`, and prints one JSON line: how often the best match is found (top-1 agrees), by how
much cosine the best found misses the best there is (mean, max), the share of the exact top 10
matched by a found row at least as close (within 0.005), latency (and `exact_ms`, the exact
search over `memories` per query).

    RETRIEVAL_DATA_DIR=/tmp/m1 python scripts/temporal_recall.py --queries 30 --ef 40,100,200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import asyncpg
import numpy as np
from pgvector.asyncpg import register_vector

from retrieval.embedding.providers import create_embedder
from retrieval.evaluation.bench import NAMESPACE, QUERIES, TAILS, bench_dsn
from retrieval.search.vector import (
    EXACT_VECTOR_SQL,
    EXACT_WINDOW_MAX,
    EXACT_WINDOW_SQL,
    VECTOR_SQL,
    WINDOW_VECTOR_SQL,
)
from retrieval.settings import Settings

COUNT_SQL = """SELECT count(*) FROM memories WHERE namespace = $1
  AND ($2::timestamptz IS NULL OR created_at >= $2) AND ($3::timestamptz IS NULL OR created_at < $3)"""


def windows(now: datetime) -> dict[str, tuple[datetime | None, datetime | None]]:
    """先週 (Monday to Monday), 今月 (to now), 先月, no window, 昨日, and 12 hours of last week's
    Wednesday."""
    monday = (now - timedelta(days=now.weekday())).replace(
        hour=0, minute=0, second=0, microsecond=0
    )
    first = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    return {
        "none": (None, None),
        "last_week": (monday - timedelta(days=7), monday),
        "this_month": (first, now),
        "last_month": ((first - timedelta(days=1)).replace(day=1), first),
        "yesterday": (today - timedelta(days=1), today),
        "half_day": (monday - timedelta(days=5, hours=-6), monday - timedelta(days=4, hours=6)),
    }


async def measure(
    conn: asyncpg.Connection,
    vecs: list[np.ndarray],
    window: tuple[Any, Any],
    ef: int,
    sql: str,
    exact: list[list[asyncpg.Record]],
) -> dict[str, float]:
    start, end = window
    await conn.execute(f"SET hnsw.ef_search = {int(ef)}")
    lat, top1, gap, close = [], [], [], []
    for v, ex_rows in zip(vecs, exact, strict=True):
        t = time.perf_counter()
        rows = await conn.fetch(sql, NAMESPACE, [], [], start, end, v, 50)
        lat.append((time.perf_counter() - t) * 1000.0)
        got = sorted(rows, key=lambda r: r["score"], reverse=True)
        if not ex_rows:
            continue
        ex = [float(r["score"]) for r in ex_rows]
        top1.append(bool(got) and got[0]["id"] == ex_rows[0]["id"])
        found = [float(r["score"]) for r in got[:10]]
        gap.append(ex[0] - (found[0] if found else 0.0))
        close.append(sum(1 for a, b in zip(ex, found, strict=False) if b >= a - 0.005) / len(ex))
    return {
        "top1": round(float(np.mean(top1)), 3) if top1 else float("nan"),
        "best_cos_gap_mean": round(float(np.mean(gap)), 4) if gap else float("nan"),
        "best_cos_gap_max": round(float(np.max(gap)), 4) if gap else float("nan"),
        "top10_within_0.005": round(float(np.mean(close)), 3) if close else float("nan"),
        "p50_ms": round(float(np.percentile(lat, 50)), 1),
        "p95_ms": round(float(np.percentile(lat, 95)), 1),
    }


def _positive(text: str) -> int:
    if not text.strip().isdigit() or not 0 < int(text) <= 10_000:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 1 to 10000")
    return int(text)


def _ef_list(text: str) -> list[int]:
    """`ef_search` values, comma-separated, each from 1 to 1000 (what pgvector accepts)."""
    values = [_positive(x) for x in text.split(",")]
    if any(v > 1000 for v in values):
        raise argparse.ArgumentTypeError("ef_search must be at most 1000")
    return values


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queries", type=_positive, default=30)
    ap.add_argument(
        "--ef", type=_ef_list, default=[40, 100, 200], help="ef_search values, comma-separated"
    )
    args = ap.parse_args()
    settings = Settings()
    dsn = bench_dsn(settings.dsn())
    embedder = create_embedder(settings)
    rng = random.Random(3)
    texts = [f"{rng.choice(QUERIES)}{rng.choice(TAILS)}" for _ in range(args.queries)]
    vecs = [embedder.embed_query(t) for t in texts]
    try:
        conn = await asyncpg.connect(dsn)
    except asyncpg.InvalidCatalogNameError:
        raise SystemExit(
            "no bench database here: run `retrieval bench --memories N` with this "
            "RETRIEVAL_DATA_DIR (or DATABASE_URL) first"
        ) from None
    try:
        await register_vector(conn)
        await conn.execute("SET hnsw.iterative_scan = relaxed_order")
        for name, window in windows(datetime.now(ZoneInfo(settings.timezone))).items():
            rows = await conn.fetchval(COUNT_SQL, NAMESPACE, *window)
            t = time.perf_counter()
            exact = [
                await conn.fetch(EXACT_VECTOR_SQL, NAMESPACE, [], [], *window, v, 10) for v in vecs
            ]
            exact_ms = (time.perf_counter() - t) * 1000.0 / max(len(vecs), 1)
            # The window's weeks (what the temporal leg runs past EXACT_WINDOW_MAX rows), and
            # the filtered walk of the whole store's graph it ran before migration 0009.
            paths = {"store_graph": VECTOR_SQL}
            if window != (None, None):
                paths = {"week_graphs": WINDOW_VECTOR_SQL, **paths}
            if window != (None, None) and rows <= EXACT_WINDOW_MAX:
                paths = {"exact_copies": EXACT_WINDOW_SQL, **paths}
            for path, sql in paths.items():
                for ef in args.ef[:1] if path == "exact_copies" else args.ef:
                    got = await measure(conn, vecs, window, ef, sql, exact)
                    print(
                        json.dumps(
                            {
                                "window": name,
                                "rows": rows,
                                "path": path,
                                "ef_search": ef,
                                **got,
                                "exact_ms": round(exact_ms, 1),
                            }  # fmt: skip
                        ),
                        flush=True,
                    )
    finally:
        await conn.close()


if __name__ == "__main__":
    asyncio.run(main())
