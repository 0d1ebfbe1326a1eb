"""Faults survived and visible, on a PostgreSQL of the test's own (loopback, bounded loops).

Before: with the database stopped, requests answered 200 with `degraded` and no results (the
caller could not tell "nothing found" from "database down"), some hung for the whole stop; a
slow embedding endpoint held a request for retries x timeout; 57P01/57P03/53300 and embedding
failures on write routes were 500s.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import asyncpg
import httpx
import numpy as np
import pytest

from retrieval.api.app import create_app
from retrieval.api.errors import status_of as _status_of
from retrieval.errors import EmbeddingError
from retrieval.models import RetrievalOptions
from retrieval.runtime import open_runtime
from retrieval.settings import Settings
from tests.helpers import app_client

LEG_MS = 400
QUERIES = ["ジムでの筋トレ", "京都旅行の計画", "先週の会議の議事録", "カレーの隠し味"]


def _postgres_tree(data_dir: Path) -> list[int]:
    """The postmaster of data_dir and its children (backends, checkpointer, walwriter ...)."""
    root = int((data_dir / "postmaster.pid").read_text().split()[0])
    pids = [root]
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == root:
                pids.append(int(d))
    return pids


@contextmanager
def _stopped(data_dir: Path):
    pids = _postgres_tree(data_dir)
    for p in pids:
        os.kill(p, signal.SIGSTOP)
    try:
        yield
    finally:
        for p in pids:
            os.kill(p, signal.SIGCONT)


@pytest.fixture(scope="module")
async def own_db(tmp_path_factory, nlp, embedder):
    """A server of this module's own, so stopping it disturbs no other test."""
    from db.embedded_server import embedded_dsn, stop_embedded

    data_dir = tmp_path_factory.mktemp("faultdb") / "db"
    dsn = await asyncio.to_thread(embedded_dsn, data_dir)
    s = Settings(
        database_url=dsn,
        source_timeout_ms=LEG_MS,
        pool_max=6,
        write_timeout_s=3,
        run_retention_days=0,
    )
    rt = await open_runtime(s, embedder=embedder, nlp=nlp)
    from retrieval.ingest.memory_in import parse_items

    await rt.writer.write(
        parse_items(
            [{"id": f"m{i}", "content": q + "についてのメモ"} for i, q in enumerate(QUERIES)]
        ),
        "default",
    )
    yield rt, data_dir
    await rt.close()
    stop_embedded(data_dir)


@pytest.fixture
async def own_client(own_db):
    rt, _ = own_db
    async with app_client(rt) as c:
        yield c


async def _load(
    client: httpx.AsyncClient, seconds: float, clients: int = 3
) -> list[tuple[int, float, httpx.Response]]:
    """`clients` loops of retrieves for `seconds`; (status, seconds taken, answer) of each."""
    out: list[tuple[int, float, httpx.Response]] = []
    end = time.monotonic() + seconds

    async def loop(i: int) -> None:
        n = 0
        while time.monotonic() < end and n < 500:
            t = time.monotonic()
            r = await client.post(
                "/v1/retrieve", json={"query": QUERIES[(i + n) % len(QUERIES)]}, timeout=30
            )
            out.append((r.status_code, time.monotonic() - t, r))
            n += 1
            await asyncio.sleep(0.05)

    await asyncio.gather(*(loop(i) for i in range(clients)))
    return out


async def _poll(
    client: httpx.AsyncClient, seconds: float, route: str
) -> list[tuple[int, float, str]]:
    """One caller of `route` (readyz, or a write) for `seconds`: (status, seconds, answer) of
    each."""
    out: list[tuple[int, float, str]] = []
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        t = time.monotonic()
        if route == "ready":
            r = await client.get("/readyz", timeout=30)
        else:
            body = {"memories": [{"id": f"stop-{n}", "content": QUERIES[n % 4] + "の追記"}]}
            r = await client.post("/v1/memories", json=body, timeout=60)
        out.append((r.status_code, time.monotonic() - t, r.text))
        n += 1
        await asyncio.sleep(0.1)
    return out


@contextmanager
def _collector_pauses():
    """The garbage collector's pauses (seconds) while the block runs, the heap made so far set
    aside first (gc.freeze): a full collection of a long test session's heap took ~1 s on the
    event loop in one CI run, and a request's timer fired that late."""
    pauses: list[float] = []
    started: list[float] = []

    def watch(phase: str, info: dict) -> None:
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            pauses.append(time.perf_counter() - started.pop())

    gc.collect()
    gc.freeze()
    gc.callbacks.append(watch)
    try:
        yield pauses
    finally:
        gc.callbacks.remove(watch)
        gc.unfreeze()


# Runs of the outage below: 5 in the suite; `RETRIEVAL_OUTAGE_RUNS=20` for the twenty in a row
# that docs/runbook.md names (an empty 200 came once in eight runs on a busy machine).
OUTAGE_RUNS = int(os.environ.get("RETRIEVAL_OUTAGE_RUNS", "5"))


@pytest.mark.parametrize("run", range(OUTAGE_RUNS))
async def test_database_stopped_answers_within_the_deadline_then_recovers(own_db, own_client, run):
    """PostgreSQL stopped (SIGSTOP, every process of it) for 6 s under load, then resumed.
    Before: a leg past its deadline was cancelled by asyncpg on a second connection and its
    transaction rolled back — both wait for a server that does not answer — so requests in
    flight answered when the server came back, 6 s later (2 runs of 4). Now every wait is
    bounded: a retrieve answers within its deadline (three legs' here) + 0.5 s, a write within
    the write deadline + 0.5 s, readiness within its 2 s + 0.5 s; only 200s and 503s (with
    Retry-After); every request after the pause is served."""
    rt, data_dir = own_db
    assert (await own_client.post("/v1/retrieve", json={"query": QUERIES[0]})).status_code == 200
    with _stopped(data_dir), _collector_pauses() as pauses:
        seen, ready, writes = await asyncio.gather(
            _load(own_client, 6.0), _poll(own_client, 6.0, "ready"), _poll(own_client, 6.0, "write")
        )
    statuses = Counter(s for s, _, _ in seen) + Counter(s for s, _, _ in ready + writes)
    slowest = max(t for _, t, _ in seen)
    slowest_ready = max(t for _, t, _ in ready)
    slowest_write = max(t for _, t, _ in writes)
    deadline = rt.orchestrator.request_timeout_s
    print(
        f"SIGSTOP 6 s (run {run}): {dict(statuses)}, slowest retrieve {slowest * 1000:.0f} ms "
        f"(deadline {deadline * 1000:.0f}), readyz {slowest_ready * 1000:.0f} ms, write "
        f"{slowest_write * 1000:.0f} ms, longest collector pause "
        f"{max(pauses, default=0) * 1000:.0f} ms"
    )
    assert set(statuses) <= {200, 503}, statuses
    assert statuses[503] > 0
    # Every query here matches stored memories: a 200 with none hides the outage from the caller
    # and the load balancer (it must be a 503 with Retry-After).
    hollow = [r.json() for s, _, r in seen if s == 200 and not r.json()["results"]]
    assert not hollow, [
        (h["metadata"]["degraded"], h["metadata"]["search_breakdown"]) for h in hollow
    ]
    assert all(r.headers.get("retry-after") for s, _, r in seen if s == 503)
    # The test process (hundreds of tests' objects by now) is not the service: its garbage
    # collector's longest pause in the window is said, should a bound be missed.
    paused = f"longest garbage-collector pause in the window: {max(pauses, default=0):.3f} s"
    assert slowest <= deadline + 0.5, paused
    # Which step of readiness was late is in its answer ("error": the type that ended it).
    assert slowest_ready <= 2.0 + 0.5, max(ready, key=lambda x: x[1])
    # A write's steps (lookup, the turn followed, the transaction) each have the deadline.
    assert slowest_write <= 3 * rt.settings.write_timeout_s + 0.5
    t0 = time.monotonic()
    while (await own_client.post("/v1/retrieve", json={"query": QUERIES[1]})).status_code != 200:
        assert time.monotonic() - t0 < 15, "no recovery after the database came back"
        await asyncio.sleep(0.2)
    print(f"recovered {time.monotonic() - t0:.2f} s after SIGCONT")
    after = await _load(own_client, 1.0, clients=2)
    assert {s for s, _, _ in after} == {200}, [(s, t, r.text) for s, t, r in after if s != 200]


_CLIENTS = "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"


async def _sessions(conn: asyncpg.Connection) -> int:
    """Connections the server has started a session for, since its statistics began."""
    return int(await conn.fetchval("SELECT sum(sessions) FROM pg_stat_database"))


async def test_an_outage_leaves_the_server_few_connection_attempts(own_db):
    """Callers that give up on a pool while the server is stopped (40 acquires of 0.2 s over
    2 s) leave at most CONNECTING_AT_ONCE attempts in its listen queue, and the pool opens a
    connection once it is back. Before (any number at once, as asyncpg does): all 40 reached
    the resumed server, and a new connection waited behind them (87-127 ms after the fault
    test's 6 s stop, against 4-28 now); the connections opened for nobody are closed."""
    from db.pool import CONNECTING_AT_ONCE, create_pool

    rt, data_dir = own_db
    watch = await asyncpg.connect(rt.settings.database_url)

    async def attempts(limit: int) -> int:
        pool = await create_pool(
            rt.settings.database_url, min_size=0, max_size=10, connecting_at_once=limit
        )
        before = await _sessions(watch)
        clients = await watch.fetchval(_CLIENTS)

        async def give_up() -> None:
            with pytest.raises(TimeoutError):
                await pool.acquire(timeout=0.2)

        with _stopped(data_dir):
            for _ in range(10):
                await asyncio.gather(*(give_up() for _ in range(4)))
        async with pool.acquire(timeout=5) as conn:
            assert await conn.fetchval("SELECT 1") == 1
        reached = await _sessions(watch) - before - 1
        await pool.close()
        for _ in range(50):  # the backends of connections closed for nobody end
            if await watch.fetchval(_CLIENTS) <= clients:
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail("a connection opened for nobody is still open")
        return reached

    try:
        unlimited, limited = await attempts(100), await attempts(CONNECTING_AT_ONCE)
    finally:
        await watch.close()
    print(f"connection attempts that reached the resumed server: {unlimited} -> {limited}")
    assert unlimited >= 30
    assert limited <= CONNECTING_AT_ONCE


async def _mixed(client: httpx.AsyncClient, seconds: float) -> list[tuple[str, int, float]]:
    """A reader and a writer beside the retrieves: (route, status, seconds) of each request."""
    out: list[tuple[str, int, float]] = []
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        t = time.monotonic()
        if n % 2:
            body = {"memories": [{"id": f"restart-{n}", "content": QUERIES[n % 4] + "の追記"}]}
            r = await client.post("/v1/memories", json=body, timeout=60)
            route = "write"
        else:
            r = await client.get("/v1/memories/m1", timeout=60)
            route = "read"
        out.append((route, r.status_code, time.monotonic() - t))
        n += 1
        await asyncio.sleep(0.05)
    return out


@pytest.mark.parametrize("how", ["fast", "crash"])
async def test_database_restart_under_load_gives_only_503s_then_recovers(own_db, own_client, how):
    """Stopped (fast shutdown) or killed (immediate: crash recovery at start) and started
    again under load: only 200s and 503s, and no request outlives its deadline (a retrieve its
    legs', a read or write the write deadline for each of its database steps)."""
    from db.embedded_server import embedded_dsn, stop_embedded

    rt, data_dir = own_db

    async def restart() -> None:
        await asyncio.sleep(0.5)
        if how == "crash":
            os.kill(_postgres_tree(data_dir)[0], signal.SIGQUIT)
            while (data_dir / "postmaster.pid").exists():
                await asyncio.sleep(0.05)
        else:
            await asyncio.to_thread(stop_embedded, data_dir)
        await asyncio.sleep(0.5)
        await asyncio.to_thread(embedded_dsn, data_dir)

    seen, mixed, _ = await asyncio.gather(
        _load(own_client, 4.0), _mixed(own_client, 4.0), restart()
    )
    statuses = Counter(s for s, _, _ in seen) + Counter(s for _, s, _ in mixed)
    slowest = max(t for _, t, _ in seen)
    slowest_rw = max(t for _, _, t in mixed)
    print(
        f"restart ({how}) under load: {dict(statuses)}, slowest retrieve "
        f"{slowest * 1000:.0f} ms, slowest read/write {slowest_rw * 1000:.0f} ms"
    )
    assert set(statuses) <= {200, 503}, statuses
    assert slowest < 2.0
    # A write's steps (lookup, transaction) each have the write deadline; the test's is 3 s.
    assert slowest_rw < 3 * rt.settings.write_timeout_s
    t0 = time.monotonic()
    while (await own_client.post("/v1/retrieve", json={"query": QUERIES[2]})).status_code != 200:
        assert time.monotonic() - t0 < 15, "no recovery after the restart"
        await asyncio.sleep(0.2)
    print(f"recovered {time.monotonic() - t0:.2f} s after the load ended")


class _SlowEmbedder:
    """Queries take `delay` seconds (a hung or slow endpoint); passages fail."""

    def __init__(self, inner, delay: float) -> None:
        self.inner, self.delay = inner, delay
        self.name, self.dim = inner.name, inner.dim

    def embed_query(self, text: str, *, background: bool = False) -> np.ndarray:
        time.sleep(self.delay)
        return self.inner.embed_query(text)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        raise EmbeddingError("embedding endpoint refused: 502 <html>gateway emb-7.internal</html>")

    def cost_units(self, text: str) -> int:
        return self.inner.cost_units(text)


async def test_slow_embedder_cuts_the_vector_legs_at_their_deadline(own_db):
    from retrieval.orchestrator import Orchestrator

    rt, _ = own_db
    orch = Orchestrator(
        rt.pool,
        rt.analyzer,
        _SlowEmbedder(rt.embedder, 3.0),
        source_timeout_ms=LEG_MS,
        log_runs=False,
    )
    t = time.monotonic()
    resp = await orch.retrieve("京都旅行の計画はどうなった", RetrievalOptions(limit=5))
    took = time.monotonic() - t
    await orch.close()
    md = resp.metadata
    print(f"slow embedder: {took * 1000:.0f} ms, degraded {md.degraded}")
    assert took < 1.5
    assert "vector" in md.degraded and md.search_breakdown["vector"].status == "timeout"
    assert md.search_breakdown["keyword"].status == "ok" and resp.results


async def test_embedding_failure_on_write_is_503(own_db):
    rt, _ = own_db
    from dataclasses import replace

    broken = replace(rt, writer=rt.writer.using(_SlowEmbedder(rt.embedder, 0.0)))
    app = create_app(rt.settings, runtime=broken)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        app.state.runtime = broken
        r = await c.post("/v1/memories", json={"memories": [{"content": "新しいメモ"}]})
    assert r.status_code == 503 and r.headers["retry-after"], r.text
    # The provider's own text (its page, its host) stays in the log.
    assert "emb-7.internal" not in r.text and "embedding provider failed" in r.text


@pytest.mark.parametrize(
    "exc",
    [
        asyncpg.AdminShutdownError("57P01"),
        asyncpg.CannotConnectNowError("57P03"),
        asyncpg.TooManyConnectionsError("53300"),
        asyncpg.QueryCanceledError("57014"),
        asyncpg.ConnectionDoesNotExistError("gone"),
        TimeoutError(),
        EmbeddingError("down"),
    ],
)
def test_unavailability_errors_map_to_503(exc):
    assert _status_of(exc) == 503


def _raised_while(outer: BaseException, inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException:
            raise outer  # noqa: B904 - the implicit context is what asyncpg's pool leaves
    except BaseException as exc:
        return exc


def test_a_pool_release_failing_after_a_lost_connection_is_503_not_500():
    """What CI once saw mid-restart: the server dropped the connection during a write, and the
    pool's release then could not reset it ("another operation is in progress")."""
    busy = asyncpg.InternalClientError("cannot switch to state 15; another operation (2)")
    lost = _raised_while(busy, asyncpg.AdminShutdownError("57P01"))
    assert _status_of(lost) == 503
    reset = _raised_while(
        asyncpg.InternalClientError("cannot switch to state 15"), ConnectionResetError(104)
    )
    assert _status_of(reset) == 503
    # The next statement on a connection so left, with nothing behind it (CI, mid-restart).
    left = asyncpg.InternalClientError("cannot switch to state 12; another operation (2) is")
    assert _status_of(left) == 503
    # Any other internal error of asyncpg's without a lost connection behind it stays a 500
    # (a bug to see).
    assert _status_of(asyncpg.InternalClientError("bug")) == 500
    assert _status_of(_raised_while(asyncpg.InternalClientError("x"), KeyError("k"))) == 500


async def test_a_connection_left_mid_operation_answers_503_and_is_not_raised(rt, monkeypatch):
    """CI, mid-restart: the error mapped to 503 still went through Starlette's catch-all, which
    raises it again after answering (the in-process client saw the exception, a server logs
    a crash)."""
    from tests.helpers import app_client

    async def left(*_a, **_k):
        raise asyncpg.InternalClientError("cannot switch to state 12; another operation (2) is")

    monkeypatch.setattr(rt.orchestrator, "retrieve", left)
    async with app_client(rt) as client:
        r = await client.post("/v1/retrieve", json={"query": "会議はいつ"})
    assert r.status_code == 503 and r.headers["retry-after"]
    assert "unavailable" in r.json()["detail"]


async def test_search_legs_run_under_a_server_side_statement_timeout(own_db):
    """A leg's query is stopped by the server at the leg's deadline, not left running."""
    from retrieval.search.run import SearchRun, leg_connection

    rt, _ = own_db
    run = SearchRun(pool=rt.pool, intent=None, filters=None, k=1, timeout_s=0.25)  # type: ignore[arg-type]
    cancelled = False
    try:
        async with leg_connection(run) as conn:
            assert await conn.fetchval("SHOW statement_timeout") == "250ms"
            with pytest.raises(asyncpg.QueryCanceledError):
                await conn.fetchval("SELECT pg_sleep(2)")
            cancelled = True
    except TimeoutError:
        # The server cancels at the leg's deadline, so the transaction's end is left 1 ms: it
        # may be cut, and the connection is then terminated, not handed back mid-transaction.
        assert cancelled
    assert cancelled
    async with rt.pool.acquire() as conn:
        assert await conn.fetchval("SHOW statement_timeout") == "30s"
        assert await conn.fetchval("SHOW idle_in_transaction_session_timeout") == "10s"


async def test_an_mcp_search_during_an_outage_is_an_error_to_retry(own_db):
    """A database outage reaches the model's host as an error that says to retry, never as
    an empty result (the MCP server in process, the SDK's client, a real stopped database)."""
    from mcp import Client

    from retrieval.api import create_app
    from retrieval.api.mcp import ApiClients, build

    rt, data_dir = own_db
    app = create_app(rt.settings, runtime=rt)
    async with app.router.lifespan_context(app), Client(build(ApiClients(app))) as c:
        ok = await c.call_tool("search_memories", {"query": QUERIES[0]})
        assert not ok.is_error and "についてのメモ" in ok.content[0].text
        with _stopped(data_dir):
            out = await c.call_tool("search_memories", {"query": QUERIES[1] + "の続き"})
    text = out.content[0].text
    assert out.is_error and "temporarily unavailable, retry in 1 s" in text, text
    assert "No memory matches" not in text
