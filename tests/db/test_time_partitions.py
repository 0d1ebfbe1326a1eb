"""The weekly vector partitions (migration 0009) on the real PostgreSQL: the copy follows every
write, windows are pruned to their weeks, new weeks are made once under concurrency and never
block a write for long, and the window search finds what exact search finds."""

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from db.memories import ensure_weeks
from tests.helpers import NOW_UTC as NOW
from tests.helpers import ingest_items

# What memory_vectors must hold for a namespace: one row per live memory, same fields.
LIVE = """
SELECT id AS memory_id, created_at, memory_type, source_type, expires_at, embedding::text AS e
FROM memories WHERE namespace = $1 AND NOT is_archived AND searchable ORDER BY 1"""
COPY = """
SELECT memory_id, created_at, memory_type, source_type, expires_at, embedding::text AS e
FROM memory_vectors WHERE namespace = $1 ORDER BY 1"""
# Each copied row and the partition it sits in, with that partition's week (none: default).
PLACED = """
SELECT v.created_at, w.lo, w.hi, v.tableoid::regclass::text AS part
FROM memory_vectors v LEFT JOIN memory_vector_weeks w ON w.relname = v.tableoid::regclass::text
WHERE v.namespace = $1"""
COVERING_WEEK = "SELECT count(*) FROM memory_vector_weeks WHERE lo <= $1 AND hi > $1"

INSERT = """
INSERT INTO memories (external_id, namespace, content, embedding, search_tokens, token_count,
                      created_at)
VALUES ($1, $2, 'x', $3::text::vector, 'x', 1, $4)"""


def vec_text(seed: int) -> str:
    """A 384-d vector literal (the test store's dimension), different per seed."""
    v = np.random.default_rng(seed).normal(size=384)
    return "[" + ",".join(f"{x:.5f}" for x in v) + "]"


async def fresh_week(conn, year: int) -> datetime:
    """An instant of `year` whose week has no partition yet (the test store outlives a test)."""
    at = datetime(year, 1, 7, 12, tzinfo=UTC) + timedelta(weeks=uuid.uuid4().int % 40)
    while await conn.fetchval(COVERING_WEEK, at):
        at += timedelta(weeks=1)
    return at


async def assert_in_step(conn, ns: str) -> None:
    """The copy equals the live memories, and each row sits in its week (or, only when no
    week covers it, in the default partition)."""
    live = [tuple(r) for r in await conn.fetch(LIVE, ns)]
    assert [tuple(r) for r in await conn.fetch(COPY, ns)] == live
    for r in await conn.fetch(PLACED, ns):
        if r["lo"] is None:
            assert r["part"] == "memory_vectors_other"
            assert await conn.fetchval(COVERING_WEEK, r["created_at"]) == 0
        else:
            assert r["lo"] <= r["created_at"] < r["hi"]


async def test_copy_follows_every_write(rt, ns):
    recent = (NOW - timedelta(days=2)).isoformat()
    await ingest_items(
        rt,
        ns,
        [
            {"id": "a", "content": "ジムで筋トレ", "created_at": recent},
            {"id": "b", "content": "映画を観た", "created_at": "2026-01-07T10:00:00+09:00"},
            {"id": "old", "content": "古い記録", "created_at": "1901-01-01T00:00:00Z"},
            {"id": "far", "content": "遠い予定", "created_at": "2199-12-31T00:00:00Z"},
            {"id": "now", "content": "日時なし"},
        ],
    )
    async with rt.pool.acquire() as conn:
        await assert_in_step(conn, ns)
        parts = {r["part"] for r in await conn.fetch(PLACED, ns)}
        assert "memory_vectors_other" in parts and len(parts) >= 3
        # A new text (new vector) and a new date: the copy moves to the other week.
        await ingest_items(
            rt, ns, [{"id": "b", "content": "映画館で映画を観た", "created_at": recent}]
        )
        await assert_in_step(conn, ns)
        for sql in (
            "UPDATE memories SET is_archived = true WHERE namespace = $1 AND external_id = 'a'",
            "UPDATE memories SET searchable = false WHERE namespace = $1 AND external_id = 'now'",
            "UPDATE memories SET title = 't' WHERE namespace = $1 AND external_id = 'b'",
            "UPDATE memories SET is_archived = false WHERE namespace = $1 AND external_id = 'a'",
            "UPDATE memories SET created_at = '2026-02-03T00:00:00Z' WHERE namespace = $1 "
            "AND external_id = 'old'",
            "DELETE FROM memories WHERE namespace = $1 AND external_id = 'far'",
        ):
            await conn.execute(sql, ns)
            await assert_in_step(conn, ns)
        assert (
            await conn.fetchval("SELECT count(*) FROM memory_vectors WHERE namespace = $1", ns) == 3
        )


OPS = st.lists(
    st.tuples(
        st.sampled_from(["insert", "move", "archive", "restore", "hide", "delete", "revector"]),
        st.integers(0, 4),  # which memory
        st.integers(-800, 500),  # days from now
    ),
    max_size=12,
)


async def _run_ops(dsn: str, ops) -> None:
    ns = f"t-{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(dsn)
    try:
        for op, i, days in ops:
            at = NOW + timedelta(days=days)
            key = f"m{i}"
            if op == "insert":
                await ensure_weeks(conn, [at], None)
                await conn.execute(
                    INSERT + " ON CONFLICT (namespace, external_id) DO UPDATE SET "
                    "created_at = EXCLUDED.created_at",
                    key,
                    ns,
                    vec_text(i),
                    at,
                )
            elif op == "move":
                await conn.execute(
                    "UPDATE memories SET created_at = $3 WHERE namespace = $1 AND external_id = $2",
                    ns,
                    key,
                    at,
                )
            elif op == "revector":
                await conn.execute(
                    "UPDATE memories SET embedding = $3::text::vector "
                    "WHERE namespace = $1 AND external_id = $2",
                    ns,
                    key,
                    vec_text(days + 1000),
                )
            else:
                sql = {
                    "archive": "UPDATE memories SET is_archived = true",
                    "restore": "UPDATE memories SET is_archived = false, searchable = true",
                    "hide": "UPDATE memories SET searchable = false",
                    "delete": "DELETE FROM memories",
                }[op]
                await conn.execute(sql + " WHERE namespace = $1 AND external_id = $2", ns, key)
            await assert_in_step(conn, ns)
    finally:
        await conn.close()


def test_copy_follows_any_sequence_of_writes(rt):
    """Property: whatever inserts, moves across weeks (and out of the horizon), archives,
    restores, hides, deletes and new vectors a namespace sees, the copy stays in step."""

    @given(ops=OPS)
    @settings(
        max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    def check(ops):
        asyncio.run(_run_ops(rt.dsn, ops))

    check()


async def test_a_window_reads_only_its_weeks(rt, ns):
    monday = datetime(2026, 3, 2, tzinfo=UTC) - timedelta(hours=9)  # Monday 00:00 in Tokyo
    await ingest_items(
        rt,
        ns,
        [
            {
                "id": f"d{i}",
                "content": f"日記{i}",
                "created_at": (monday + timedelta(days=i)).isoformat(),
            }
            for i in range(0, 21, 3)
        ],
    )
    from retrieval.search.vector import WINDOW_VECTOR_SQL

    vec = rt.embedder.embed_query("日記")
    async with rt.pool.acquire() as conn:
        week = await conn.fetchval(
            "SELECT relname FROM memory_vector_weeks WHERE lo = $1", monday + timedelta(days=7)
        )
        assert week is not None
        # A custom plan prunes when planning; asyncpg's cached generic plan when it starts.
        for mode in ("force_custom_plan", "force_generic_plan"):
            await conn.execute(f"SET plan_cache_mode = {mode}")
            plan = await conn.fetchval(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + WINDOW_VECTOR_SQL,
                ns,
                [],
                [],
                monday + timedelta(days=7),
                monday + timedelta(days=14),
                vec,
                10,
            )
            rels = _relations(json.loads(plan) if isinstance(plan, str) else plan)
            assert {r for r in rels if r.startswith("memory_vectors")} == {week}, mode
        await conn.execute("RESET plan_cache_mode")


def _relations(node) -> set[str]:
    out: set[str] = set()
    if isinstance(node, dict):
        if "Relation Name" in node:
            out.add(node["Relation Name"])
        for v in node.values():
            out |= _relations(v)
    elif isinstance(node, list):
        for v in node:
            out |= _relations(v)
    return out


async def test_window_search_matches_exact_search(rt, ns, monkeypatch):
    """Past EXACT_WINDOW_MAX the window is searched over its weeks' graphs; on a few hundred
    memories across four weeks that must give the exact nearest, in order."""
    import retrieval.search.vector as src
    from retrieval.models import Filters, TimeRange
    from retrieval.search.run import Given, SearchRun

    topics = [
        "ジムで筋トレ",
        "映画を観た",
        "カレーを作った",
        "ランニング5km",
        "読書会に参加",
        "英語の勉強",
    ]
    start = datetime(2026, 4, 6, tzinfo=UTC) - timedelta(hours=9)
    await ingest_items(
        rt,
        ns,
        [
            {
                "id": f"d{i}",
                "content": f"{topics[i % 6]}({i}回目、{i % 11}人で)",
                "created_at": (start + timedelta(hours=7 * i)).isoformat(),
            }
            for i in range(120)
        ],
    )
    window = TimeRange(start=start + timedelta(days=3), end=start + timedelta(days=24))
    monkeypatch.setattr(src, "EXACT_WINDOW_MAX", 10)
    for query in ("ジムでのトレーニング", "料理", "本を読む会"):
        vec = rt.embedder.embed_query(query)
        run = SearchRun(
            pool=rt.pool,
            intent=rt.analyzer.analyze(query),
            filters=Filters(namespace=ns),
            k=10,
            window=window,
        )
        assert src.window_sql(11) is src.WINDOW_VECTOR_SQL  # the graphs, not exact distances
        got = [c.external_id for c in await src.temporal(run, Given(vectors=(vec,)))]
        async with rt.pool.acquire() as conn:
            exact = await conn.fetch(
                src.EXACT_VECTOR_SQL, ns, [], [], window.start, window.end, vec, 10
            )
        assert got == [r["external_id"] for r in exact], query


async def test_one_new_week_is_made_once_by_concurrent_writers(rt):
    async with rt.pool.acquire() as conn:
        at = await fresh_week(conn, 2023)
    conns = [await asyncpg.connect(rt.dsn) for _ in range(4)]
    try:
        made = await asyncio.gather(*(ensure_weeks(c, [at], None) for c in conns))
        assert sorted(made) == [0, 0, 0, 1]
        assert await conns[0].fetchval(COVERING_WEEK, at) == 1
    finally:
        for c in conns:
            await c.close()


async def test_making_a_week_leaves_the_callers_lock_timeout_alone(rt):
    """The function waits at most 3 s for a week's locks, and only while it makes the week:
    a caller's transaction keeps its own lock_timeout afterwards."""
    async with rt.pool.acquire() as conn:
        at = await fresh_week(conn, 2022)
        async with conn.transaction():
            await conn.execute("SET LOCAL lock_timeout = '7s'")
            assert await ensure_weeks(conn, [at], None) == 1
            assert await conn.fetchval("SHOW lock_timeout") == "7s"


async def test_a_busy_default_partition_delays_no_write(rt, ns):
    """Making a week needs the default partition's lock; while another transaction holds it,
    a write of a new week gives up on the week after the lock timeout and goes ahead, its copy
    waits in the default partition (and is found there), and moves into its week with the next
    write of that week."""
    async with rt.pool.acquire() as conn:
        at = await fresh_week(conn, 2024)
    holder = await asyncpg.connect(rt.dsn)
    try:
        tx = holder.transaction()
        await tx.start()
        await holder.execute("LOCK TABLE memory_vectors_other IN ACCESS EXCLUSIVE MODE")
        loop = asyncio.get_running_loop()
        t = loop.time()
        write = asyncio.create_task(
            ingest_items(
                rt, ns, [{"id": "x", "content": "九月の記録", "created_at": at.isoformat()}]
            )
        )
        await asyncio.sleep(4)  # the lock timeout (3 s) passes; the insert then waits on the lock
        await tx.rollback()
        await write
        assert loop.time() - t < 10
    finally:
        await holder.close()
    async with rt.pool.acquire() as conn:
        await assert_in_step(conn, ns)
        assert await conn.fetchval(COVERING_WEEK, at) == 0
        part = await conn.fetchval(
            "SELECT tableoid::regclass::text FROM memory_vectors WHERE namespace = $1", ns
        )
        assert part == "memory_vectors_other"
        assert await ensure_weeks(conn, [at], None) == 1
        await assert_in_step(conn, ns)
        assert await conn.fetchval(COVERING_WEEK, at) == 1
