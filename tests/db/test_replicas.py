"""Read replicas: a real primary and a hot standby (`pg_basebackup -R`) of the embedded wheel,
on this machine's sockets only. Searches and reads go to the standby, writes to the primary;
a read right after a write sees it; a dead standby costs nothing but a fallback."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import httpx
import pytest

from retrieval import metrics as m
from retrieval.api import create_app
from retrieval.replicas import lsn_value
from retrieval.runtime import open_runtime
from retrieval.settings import Settings

# The standby applies WAL this long after the primary wrote it: a read served by it right after
# a write would miss the write.
APPLY_DELAY_MS = 1500
DOCS = [
    {"id": f"m{i}", "content": text}
    for i, text in enumerate(
        [
            "ジムで筋トレをした",
            "京都旅行の計画を立てた",
            "先週の会議の議事録",
            "カレーの隠し味はチョコレート",
        ]
    )
]


@pytest.fixture(scope="module")
async def cluster(tmp_path_factory, nlp, embedder):
    from db.embedded_server import embedded_dsn, make_standby, stop_embedded

    base = tmp_path_factory.mktemp("repl")
    primary_dir, standby_dir = base / "primary", base / "standby"
    primary = await asyncio.to_thread(embedded_dsn, primary_dir)
    await asyncio.to_thread(make_standby, primary_dir, standby_dir)
    with open(standby_dir / "postgresql.auto.conf", "a") as f:
        f.write(f"recovery_min_apply_delay = '{APPLY_DELAY_MS}ms'\n")
    standby = await asyncio.to_thread(embedded_dsn, standby_dir)
    s = Settings(
        database_url=primary,
        replica_urls=standby,
        replica_check_s=0.1,
        replica_max_lag_s=30,
        run_retention_days=0,
        log_runs=False,
    )
    rt = await open_runtime(s, embedder=embedder, nlp=nlp)
    app = create_app(s, runtime=rt)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client,
    ):
        yield rt, client, standby, standby_dir
    await rt.close()
    stop_embedded(standby_dir)
    stop_embedded(primary_dir)


async def _caught_up(rt, namespace: str, timeout_s: float = 20.0) -> None:
    """Until the standby has replayed this namespace's last write."""
    deadline = time.monotonic() + timeout_s
    while rt.router.read_pool(namespace)[1] is None:
        assert time.monotonic() < deadline, rt.router.status()
        await asyncio.sleep(0.1)


async def _standby_xacts(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(
            await conn.fetchval(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
            )
        )
    finally:
        await conn.close()


def _legs(target: str) -> float:
    return m.DB_QUERIES.labels(target)._value.get()


async def test_searches_go_to_the_standby_and_a_read_after_a_write_sees_it(cluster):
    rt, client, standby, _ = cluster
    r = await client.post("/v1/memories", json={"namespace": "repl", "memories": DOCS})
    assert r.status_code == 200 and lsn_value(r.json()["lsn"]) > 0
    await _caught_up(rt, "repl")

    before, replica_legs, primary_legs = (
        await _standby_xacts(standby),
        _legs("replica"),
        _legs("primary"),
    )
    for q in ["筋トレ", "京都", "議事録", "隠し味"] * 3:
        r = await client.post("/v1/retrieve", json={"query": q, "namespace": "repl"})
        assert r.status_code == 200 and r.json()["results"] and not r.json()["metadata"]["degraded"]
    on_replica, on_primary = _legs("replica") - replica_legs, _legs("primary") - primary_legs
    print(f"search legs on the standby: {on_replica:.0f} of {on_replica + on_primary:.0f}")
    assert on_replica >= 12 and on_primary == 0
    # The standby's own count of transactions (its backends report them when idle, within ~10 s).
    deadline = time.monotonic() + 15
    while (served := await _standby_xacts(standby) - before) < 12 and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
    assert served >= 12, (served, rt.router.status())

    # Read-your-writes: the standby applies this write 1.5 s late, so the next reads of the
    # namespace go to the primary until the standby has it.
    r = await client.post(
        "/v1/memories",
        json={
            "namespace": "repl",
            "memories": [{"id": "new", "content": "新しいノートPCを買った"}],
        },
    )
    assert r.status_code == 200
    assert rt.router.read_pool("repl")[1] is None
    got = await client.post("/v1/retrieve", json={"query": "ノートPCを買った", "namespace": "repl"})
    assert got.json()["results"][0]["id"] == "new"
    assert (await client.get("/v1/memories/new", params={"namespace": "repl"})).status_code == 200
    # Another namespace, not written since the standby caught up, is still read from it;
    # unless the caller names the write's position (a write another process answered).
    assert rt.router.read_pool("elsewhere")[1] is not None
    lsn = r.json()["lsn"]
    assert rt.router.read_pool("elsewhere", lsn)[1] is None
    await _caught_up(rt, "repl")
    assert rt.router.read_pool("repl")[1] is not None
    assert rt.router.read_pool("elsewhere", lsn)[1] is not None
    got = await client.post(
        "/v1/retrieve",
        json={"query": "ノートPC", "namespace": "elsewhere", "options": {"after_lsn": lsn}},
    )
    assert got.status_code == 200
    bad = await client.post(
        "/v1/retrieve", json={"query": "x", "options": {"after_lsn": "'; DROP TABLE x"}}
    )
    assert bad.status_code == 422 and "after_lsn" in bad.text
    ready = (await client.get("/readyz")).json()
    assert ready["ready"] and ready["replicas"][0]["healthy"]


async def test_a_dead_standby_costs_a_fallback_not_an_error_and_is_used_again_when_back(cluster):
    from db.embedded_server import embedded_dsn, stop_embedded

    rt, client, standby, standby_dir = cluster
    await client.post("/v1/memories", json={"namespace": "repl2", "memories": DOCS})
    await _caught_up(rt, "repl2")
    await asyncio.to_thread(stop_embedded, standby_dir)
    t = time.perf_counter()
    r = await client.post("/v1/retrieve", json={"query": "京都旅行", "namespace": "repl2"})
    fallback_ms = (time.perf_counter() - t) * 1000
    assert (
        r.status_code == 200
        and r.json()["results"][0]["id"] == "m1"
        and not r.json()["metadata"]["degraded"]
    )
    assert (await client.get("/v1/memories/m1", params={"namespace": "repl2"})).status_code == 200
    assert not rt.router.replicas[0].healthy
    primary_legs = _legs("primary")
    r = await client.post("/v1/retrieve", json={"query": "議事録", "namespace": "repl2"})
    assert r.status_code == 200 and _legs("primary") > primary_legs
    ready = (await client.get("/readyz")).json()
    assert ready["ready"] and not ready["replicas"][0]["healthy"]
    # /readyz has no auth: the state, not the topology (no host, port or driver text).
    shown = str(ready["replicas"])
    assert "127.0.0.1" not in shown and "port" not in shown and "/" not in shown, shown
    print(f"first answer after the standby stopped: {fallback_ms:.0f} ms")

    await asyncio.to_thread(embedded_dsn, standby_dir)  # back
    await _caught_up(rt, "repl2", timeout_s=30)
    replica_legs = _legs("replica")
    r = await client.post("/v1/retrieve", json={"query": "カレー", "namespace": "repl2"})
    assert r.status_code == 200 and _legs("replica") > replica_legs
