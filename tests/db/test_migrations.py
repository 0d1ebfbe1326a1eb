"""Migrations on the real PostgreSQL: idempotent, upgrades fill what they add, concurrent
starts, the embedding model guard."""

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import asyncpg
import pytest

from db import migrate as migrations
from db.meta import check_embedding_model
from retrieval.errors import EmbeddingModelMismatch


async def test_migrations_are_idempotent(rt):
    conn = await asyncpg.connect(rt.dsn)
    try:
        assert await migrations.migrate(conn, embedding_dim=384) == []
        assert await migrations.migrate(conn, embedding_dim=384) == []
        assert await migrations.pending(conn) == []
        assert await conn.fetchval("SELECT count(*) FROM schema_migrations") == len(
            migrations.load_migrations()
        )
    finally:
        await conn.close()


async def test_upgrade_fills_postings_for_existing_memories(rt, tmp_path):
    """A store made before migration 0002 gets postings for the memories it already holds."""
    async with _old_store(rt, tmp_path, "upgrade", up_to=1) as conn:
        await conn.execute(
            "INSERT INTO memories (external_id, namespace, content, embedding, search_tokens, "
            "token_count, term_tf) "
            "VALUES ('a', 'ns', 'x', '[1,0,0]', 'ジム ジム 筋トレ', 3, '{\"ジム\": 2, \"筋トレ\": 1}')"
        )
        # Statistics that drifted under the old write path (a duplicate id counted twice),
        # and an eval cache key in the service table.
        await conn.execute("INSERT INTO term_df VALUES ('ns', 'ジム', 2), ('ns', '筋トレ', 2)")
        await conn.execute("INSERT INTO namespace_stats VALUES ('ns', 2, 6, 'k1')")
        assert (
            await migrations.migrate(conn, embedding_dim=3)
            == [m.version for m in migrations.load_migrations()][1:]
        )
        rows = await conn.fetch("SELECT term, tf, dl FROM postings ORDER BY term")
        assert [(r["term"], r["tf"], r["dl"]) for r in rows] == [
            ("ジム", 2, 3),
            ("筋トレ", 1, 3),
        ]
        # 0004 recounts them from the rows and moves the harness's key to its own table.
        assert dict(await conn.fetch("SELECT term, df FROM term_df")) == {
            "ジム": 1,
            "筋トレ": 1,
        }
        assert tuple(
            await conn.fetchrow("SELECT doc_count, total_tokens FROM namespace_stats")
        ) == (1, 3)
        assert (
            await conn.fetchval("SELECT cache_key FROM harness_indexes WHERE namespace = 'ns'")
            == "k1"
        )


def test_concurrent_migrate_from_two_processes(tmp_path):
    """Two processes migrating a fresh database at once: one applies, the other waits, both succeed."""
    from db.embedded_server import embedded_dsn

    dsn = embedded_dsn(tmp_path / "fresh")
    code = (
        "import asyncio, asyncpg, json, sys\n"
        "from db import migrate\n"
        "async def main():\n"
        "    c = await asyncpg.connect(sys.argv[1])\n"
        "    print(json.dumps(await migrate.migrate(c, embedding_dim=384)))\n"
        "asyncio.run(main())\n"
    )
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, dsn],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-500:] for o in outs]
    applied = sorted(json.loads(o[0]) for o in outs)
    assert applied[0] == [] and applied[1] == [m.version for m in migrations.load_migrations()]
    from db.embedded_server import stop_embedded

    stop_embedded(tmp_path / "fresh")


async def test_embedding_model_mismatch_is_refused(rt):
    async with rt.pool.acquire() as conn:
        await check_embedding_model(conn, rt.embedder.name, rt.embedder.dim)
        with pytest.raises(EmbeddingModelMismatch, match="multilingual-e5-small"):
            await check_embedding_model(conn, "text-embedding-3-small", 1536)


async def test_upgrade_to_time_partitions_copies_live_memories(rt, tmp_path):
    """A store of migration 0008 gets its live memories' vectors copied into weekly partitions
    (0009), each week with its HNSW graph; archived and hidden memories are not copied, and a
    date outside the horizon goes to the default partition."""
    async with _old_store(rt, tmp_path, "upgrade9", up_to=8) as conn:
        now = datetime.now(UTC)
        rows = [
            ("live", now - timedelta(days=3), False, True),
            ("older", now - timedelta(days=40), False, True),
            ("ancient", datetime(1901, 1, 1, tzinfo=UTC), False, True),
            ("archived", now - timedelta(days=3), True, True),
            ("hidden", now - timedelta(days=3), False, False),
        ]
        for ext, at, archived, searchable in rows:
            await conn.execute(
                "INSERT INTO memories (external_id, namespace, content, embedding, "
                "search_tokens, token_count, created_at, is_archived, searchable) "
                "VALUES ($1, 'ns', 'x', '[1,0,0]', 'x', 1, $2, $3, $4)",
                ext,
                at,
                archived,
                searchable,
            )
        applied = await migrations.migrate(conn, embedding_dim=3, timezone="Asia/Tokyo")
        assert applied == [m.version for m in migrations.load_migrations() if m.version >= 9]
        got = await conn.fetch(
            "SELECT m.external_id, v.tableoid::regclass::text AS part, w.lo, w.hi, "
            "v.created_at FROM memory_vectors v JOIN memories m ON m.id = v.memory_id "
            "LEFT JOIN memory_vector_weeks w ON w.relname = v.tableoid::regclass::text "
            "ORDER BY 1"
        )
        assert [r["external_id"] for r in got] == ["ancient", "live", "older"]
        for r in got:
            if r["external_id"] == "ancient":
                assert r["part"] == "memory_vectors_other"
            else:
                assert r["lo"] <= r["created_at"] < r["hi"]
                # A week is Monday 00:00 to Monday 00:00 in Tokyo.
                local = r["lo"].astimezone(ZoneInfo("Asia/Tokyo"))
                assert (local.weekday(), local.hour, local.minute) == (0, 0, 0)
        graphs = await conn.fetchval(
            "SELECT count(*) FROM pg_indexes WHERE tablename LIKE 'memory_vectors%' "
            "AND indexdef LIKE '%USING hnsw%'"
        )
        # parent + default + one per week made
        weeks = await conn.fetchval("SELECT count(*) FROM memory_vector_weeks")
        assert weeks == 2 and graphs == weeks + 2
        # 0013: every graph, the weeks' and the whole store's, ranks by inner product.
        by_ip = await conn.fetchval(
            "SELECT count(*) FROM pg_indexes WHERE indexdef LIKE '%USING hnsw (embedding "
            "vector_ip_ops)%' AND (tablename LIKE 'memory_vectors%' OR tablename = 'memories')"
        )
        assert by_ip == graphs + 1


def test_time_zone_names_only_reach_migrations_as_names():
    assert migrations._zone_literal("America/Argentina/Buenos_Aires") == (
        "'America/Argentina/Buenos_Aires'"
    )
    with pytest.raises(ValueError, match="not a time zone name"):
        migrations._zone_literal("Asia/Tokyo'; DROP TABLE memories; --")


@contextlib.asynccontextmanager
async def _old_store(rt, tmp_path, name: str, *, up_to: int) -> AsyncIterator[asyncpg.Connection]:
    """A database of its own (3-d vectors) whose schema stops at migration `up_to`."""
    db = f"{name}_{os.getpid()}"
    old = tmp_path / name
    old.mkdir()
    for m in migrations.load_migrations():
        if m.version <= up_to:
            shutil.copy(migrations.migrations_dir() / f"{m.version:04d}_{m.name}.sql", old)
    admin = await asyncpg.connect(rt.dsn)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{db}"')  # a constant, not user input
        await admin.execute(f'CREATE DATABASE "{db}"')
        conn = await asyncpg.connect(rt.dsn, database=db)
        try:
            applied = await migrations.migrate(conn, embedding_dim=3, folder=old)
            assert applied == list(range(1, up_to + 1))
            yield conn
        finally:
            await conn.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{db}"')
        await admin.close()


def test_a_folder_without_migrations_is_an_error_not_an_empty_schema(tmp_path, monkeypatch):
    """A plain `pip install .` shipped no migrations: the start found none, applied none, and
    failed later on `unknown type: public.vector`. Now the migrations ship inside `db`, and a
    folder without any says so at once."""
    assert migrations.migrations_dir().parent == Path(migrations.__file__).resolve().parent
    assert len(migrations.load_migrations()) >= 14
    monkeypatch.setenv("RETRIEVAL_MIGRATIONS_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="RETRIEVAL_MIGRATIONS_DIR"):
        migrations.load_migrations()


async def test_the_trigram_index_holds_the_namespace(rt):
    """Migrations 0016 and 0020: the names leg's index is by namespace and content, so that a
    lookup reads only its own namespace's matches, never another tenant's; its namespace key is
    `namespace || ''`, which no btree index serves, so the planner cannot read a namespace
    through its btree and match the pattern against every memory of it."""
    async with rt.pool.acquire() as conn:
        index = await conn.fetchval(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'idx_memories_content_trgm'"
        )
        assert await conn.fetchval("SELECT count(*) FROM pg_extension WHERE extname = 'btree_gin'")
    assert index.endswith("USING gin (((namespace || ''::text)), content gin_trgm_ops)")


async def test_a_start_that_does_not_migrate_waits_for_whoever_does(rt, tmp_path):
    """RETRIEVAL_MIGRATE_AT_START=false (the Kubernetes pods; the migration Job migrates): the
    start waits while migrations are pending, and goes on once they are applied."""
    import asyncio

    from retrieval.runtime import wait_for_migrations

    async with _old_store(rt, tmp_path, "waits", up_to=1) as conn:
        from urllib.parse import urlparse, urlunparse

        dsn = urlunparse(urlparse(rt.dsn)._replace(path=f"/waits_{os.getpid()}"))
        waiting = asyncio.create_task(wait_for_migrations(dsn, every_s=0.1))
        await asyncio.sleep(0.5)
        assert not waiting.done()
        await migrations.migrate(conn, embedding_dim=3)
        await asyncio.wait_for(waiting, 10)
