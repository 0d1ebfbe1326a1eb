"""Listing a namespace page by page (GET /v1/memories, the client's iterator, the CLI): a stable
order, a cursor that survives writes, filters, and clear refusals."""

from __future__ import annotations

import asyncio
import uuid

import numpy as np
import pytest

from retrieval.ingest.memory_in import parse_items
from tests.helpers import app_client


def _vectors(n: int, seed: int = 5) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, 384)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


async def _write(rt, ns: str, ids: list[str], text: str = "リストのメモ") -> None:
    items = parse_items([{"id": x, "content": f"{text} {x}"} for x in ids])
    await rt.writer.write(items, ns, vectors=_vectors(len(ids), seed=len(ids)))


async def test_ten_thousand_memories_are_each_listed_once_while_writes_go_on(rt, ns):
    """10,000 memories paged 500 at a time while 400 new ones (ids before, among and after
    the stored ones) are written and 200 stored ones rewritten: every stored one is listed
    exactly once, none twice."""
    stored = [f"m{i:05d}" for i in range(10_000)]
    for start in range(0, len(stored), 2_000):
        await _write(rt, ns, stored[start : start + 2_000])
    seen: list[str] = []

    async def writes() -> None:
        rng = np.random.default_rng(3)
        for k in range(20):
            new = [f"{p}{k:02d}{j}" for p in ("a", "m05000x", "z") for j in range(7)][:20]
            await _write(rt, ns, new, "新しいメモ")
            again = [stored[int(i)] for i in rng.integers(0, len(stored), 10)]
            await _write(rt, ns, again, "書き直したメモ")
            await asyncio.sleep(0)

    async with app_client(rt) as c:
        writer = asyncio.create_task(writes())
        cursor = None
        while True:
            url = f"/v1/memories?namespace={ns}&limit=500" + (f"&cursor={cursor}" if cursor else "")
            r = await c.get(url)
            assert r.status_code == 200, r.text
            page = r.json()
            seen += [m["id"] for m in page["memories"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
            await asyncio.sleep(0)  # the writes go on between the pages
        await writer
    assert len(seen) == len(set(seen))
    assert set(stored) <= set(seen)
    assert seen == sorted(seen)


async def test_filters_and_what_a_page_shows(rt, ns):
    items = [
        {"id": "a", "content": "一つ目", "thread": "s1", "created_at": "2026-01-01T09:00:00+09:00"},
        {
            "id": "b",
            "content": "二つ目",
            "thread": "s1",
            "created_at": "2026-02-01T09:00:00+09:00",
            "links": [{"to": "a", "label": "reply_to"}],
            "metadata": {"role": "user"},
            "expires_at": "2030-01-01T00:00:00+00:00",
        },
        {"id": "c", "content": "三つ目", "created_at": "2026-03-01T09:00:00+09:00"},
    ]
    await rt.writer.write(parse_items(items), ns)
    await rt.writer.archive(ns, "c")
    async with app_client(rt) as c:

        async def ids(query: str) -> list[str]:
            r = await c.get(f"/v1/memories?namespace={ns}&{query}")
            assert r.status_code == 200, r.text
            return [m["id"] for m in r.json()["memories"]]

        assert await ids("") == ["a", "b"]
        assert await ids("include_archived=true") == ["a", "b", "c"]
        assert await ids("thread=s1") == ["a", "b"]
        assert await ids("since=2026-01-15T00:00:00%2B09:00&include_archived=true") == ["b", "c"]
        assert await ids("until=2026-02-01T09:00:00%2B09:00") == ["a"]
        b = (await c.get(f"/v1/memories?namespace={ns}&thread=s1")).json()["memories"][1]
        assert b["links"] == [{"to": "a", "label": "reply_to"}]
        assert b["thread"] == "s1" and b["metadata"] == {"role": "user"}
        assert b["expires_at"].startswith("2030-01-01")
        one = (await c.get(f"/v1/memories/b?namespace={ns}")).json()
        assert one["links"] == b["links"] and one["thread"] == "s1"
        # A namespace that holds nothing and one that never existed look the same.
        never = (await c.get(f"/v1/memories?namespace=n-{uuid.uuid4().hex}")).json()
        assert never == {"memories": [], "next_cursor": None}


@pytest.mark.parametrize(
    "query,field",
    [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=true", "limit"),
        ("cursor=not-a-cursor", "cursor"),
        ("cursor=eyJ2IjoxLCJhZnRlciI6IngiLCJvZiI6ImFiYyJ9", "cursor"),
        ("since=2026-01-01T00:00:00", "since"),
        ("namespace=a%20b", "namespace"),
    ],
)
async def test_bad_listing_requests_are_refused_by_name(client, query, field):
    r = await client.get(f"/v1/memories?{query}")
    assert r.status_code == 422, r.text
    assert field in r.text


async def test_a_cursor_belongs_to_its_listing(rt, ns):
    """A cursor given back with other filters (or another namespace) is refused, not read as
    a place in another listing."""
    await _write(rt, ns, ["x1", "x2", "x3"])
    async with app_client(rt) as c:
        first = (await c.get(f"/v1/memories?namespace={ns}&limit=1")).json()
        cursor = first["next_cursor"]
        assert cursor
        ok = await c.get(f"/v1/memories?namespace={ns}&limit=1&cursor={cursor}")
        assert [m["id"] for m in ok.json()["memories"]] == ["x2"]
        for other in (
            f"namespace={ns}&thread=t",
            f"namespace={ns}x",
            f"namespace={ns}&include_archived=true",
        ):
            r = await c.get(f"/v1/memories?{other}&cursor={cursor}")
            assert r.status_code == 422 and "cursor" in r.text, (other, r.text)


async def test_the_client_iterates_over_every_page(rt, ns):
    import httpx

    from retrieval.api import create_app
    from retrieval_client import AsyncRetrievalClient

    await _write(rt, ns, [f"p{i:03d}" for i in range(23)])
    app = create_app(rt.settings, runtime=rt)
    async with app.router.lifespan_context(app):
        client = AsyncRetrievalClient("http://t", transport=httpx.ASGITransport(app=app))
        async with client:
            got = [m.id async for m in client.memories(ns, limit=5)]
            page = await client.list_memories(ns, limit=10)
    assert got == [f"p{i:03d}" for i in range(23)]
    assert len(page.memories) == 10 and page.next_cursor
