"""Hostile input over HTTP: every case is a 4xx naming the field, never a 500, never a partial write."""

import json

import pytest
from pydantic import ValidationError

from retrieval.settings import Settings
from tests.helpers import KEY_ALL, KEY_TEAM_A, UNHOLDABLE_DATES


def _mem(**kw):
    return {"id": "m1", "content": "普通のメモ", **kw}


def _fields(r) -> list[str]:
    return [d["field"] for d in r.json()["detail"]]


@pytest.mark.parametrize(
    "memory,field",
    [
        (_mem(metadata={"x": float("nan")}), "memories.0.metadata"),
        (_mem(metadata={"x": [1, {"y": float("inf")}]}), "memories.0.metadata"),
        (_mem(id="a\u0000b"), "memories.0.id"),
        (_mem(title="t\u0000"), "memories.0.title"),
        (_mem(content="c\u0000"), "memories.0.content"),
        (_mem(metadata={"k": "v\u0000"}), "memories.0.metadata"),
        (_mem(metadata={"k\u0000": "v"}), "memories.0.metadata"),
        (_mem(metadata={"k": "\ud800"}), "memories.0.metadata"),
        (_mem(content="\udfff本文"), "memories.0.content"),
        (_mem(created_at="0001-01-01T00:00:00+09:00"), "memories.0.created_at"),
        (_mem(expires_at="9999-12-31T23:00:00-09:00"), "memories.0.expires_at"),
        (_mem(created_at="2026-01-01T00:00:00"), "memories.0.created_at"),
        (_mem(id="a/b"), "memories.0.id"),
        (_mem(id="tab\there"), "memories.0.id"),
        (
            _mem(metadata={"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": {"i": 1}}}}}}}}}),
            "memories.0.metadata",
        ),
        (_mem(metadata={"big": "x" * 70_000}), "memories.0.metadata"),
        (_mem(memory_type="\ud800"), "memories.0.memory_type"),
        # Stored, `.` and `..` could never be read or archived: URLs resolve them away.
        (_mem(id="."), "memories.0.id"),
        (_mem(id=".."), "memories.0.id"),
    ],
)
async def test_bad_memory_is_422_naming_field_and_writes_nothing(client, ns, memory, field):
    body = {"namespace": ns, "memories": [{"id": "ok", "content": "正しいメモ"}, memory]}
    body["memories"] = [body["memories"][1], body["memories"][0]]
    r = await client.post(
        "/v1/memories", content=json.dumps(body), headers={"content-type": "application/json"}
    )
    assert r.status_code == 422, r.text
    assert any(f.startswith(field) for f in _fields(r)), r.json()
    assert (await client.get(f"/v1/memories/ok?namespace={ns}")).status_code == 404


async def test_number_too_large_for_a_float_is_422(client, ns):
    """`1e400` parses to inf: it used to reach jsonb and fail there with a 500."""
    raw = '{"namespace": "NS", "memories": [{"content": "x", "metadata": {"v": 1e400}}]}'.replace(
        "NS", ns
    )
    r = await client.post("/v1/memories", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 422 and _fields(r) == ["memories.0.metadata"], r.text


async def test_duplicate_ids_in_a_batch_are_refused(client, ns, rt):
    """Same id twice answered 200 `inserted: 2` with one row, and BM25 statistics counted it
    twice for ever."""
    r = await client.post(
        "/v1/memories",
        json={
            "namespace": ns,
            "memories": [
                {"id": "d", "content": "一つ目"},
                {"id": "e", "content": "別"},
                {"id": "d", "content": "二つ目"},
            ],
        },
    )
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "memories", 2, "id"]
    async with rt.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM memories WHERE namespace = $1", ns) == 0
        assert await conn.fetchval(
            "SELECT doc_count FROM namespace_stats WHERE namespace = $1", ns
        ) in (None, 0)


@pytest.mark.parametrize(
    "body,field",
    [
        ({"query": "先週の会議", "options": {"now": "0001-01-01T00:00:00+09:00"}}, "options.now"),
        ({"query": "先週の会議", "options": {"now": "9999-12-31T23:00:00-09:00"}}, "options.now"),
        ({"query": "a\u0000"}, "query"),
        ({"query": "\ud800"}, "query"),
        (
            {"query": "x", "recent_conversation": [{"role": "user", "content": "\u0000"}]},
            "recent_conversation.0.content",
        ),
        (
            {"query": "x", "recent_conversation": [{"role": "user", "content": "a"}] * 51},
            "recent_conversation",
        ),
        (  # each message within its limit, together over the conversation's
            {"query": "x", "recent_conversation": [{"role": "user", "content": "会" * 9000}] * 2},
            "recent_conversation",
        ),
        ({"query": "x", "options": {"memory_types": ["\u0000"]}}, "options.memory_types.0"),
        (
            {"query": "x", "options": {"time_range": {"start": "0001-01-01T00:00:00+00:00"}}},
            "options.time_range.start",
        ),
        # A token budget too large for a float was a 500 (OverflowError) with chars_per_token.
        (
            {"query": "x", "options": {"max_tokens": 10**309, "chars_per_token": 2.5}},
            "options.max_tokens",
        ),
        ({"query": "x", "options": {"max_tokens": 10**13}}, "options.max_tokens"),
    ],
)
async def test_bad_retrieve_is_422(client, body, field):
    r = await client.post(
        "/v1/retrieve", content=json.dumps(body), headers={"content-type": "application/json"}
    )
    assert r.status_code == 422, r.text
    assert any(f.startswith(field) for f in _fields(r)), r.json()


@pytest.mark.parametrize("query", UNHOLDABLE_DATES)
async def test_unholdable_dates_are_answered(client, query):
    """Each was a 500 (`ValueError: year -974 is out of range`)."""
    r = await client.post("/v1/retrieve", json={"query": query})
    assert r.status_code == 200, r.text
    assert r.json()["metadata"]["query_intent"]["time_range"] is None


@pytest.mark.parametrize(
    "path,status",
    [
        ("/v1/runs/" + "0" * 36, 422),
        ("/v1/runs/zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz", 422),
        ("/v1/runs/00000000-0000-0000-0000-000000000000", 404),
        ("/v1/memories/a%00b", 404),
        ("/v1/memories/%ED%A0%80", 404),
        ("/v1/memories/x?namespace=a%00b", 422),
    ],
)
async def test_odd_paths_are_4xx(client, path, status):
    r = await client.get(path)
    assert r.status_code == status, r.text


async def test_body_over_the_limit_is_413_before_parsing(rt):
    import httpx

    from retrieval.api import create_app

    app = create_app(rt.settings.model_copy(update={"max_body_bytes": 2048}), runtime=rt)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c,
    ):
        big = json.dumps({"query": "x" * 4000})
        r = await c.post("/v1/retrieve", content=big, headers={"content-type": "application/json"})
        assert r.status_code == 413

        async def chunks():  # no Content-Length: cut as soon as the bytes read pass the limit
            for _ in range(8):
                yield b" " * 1024

        r = await c.post(
            "/v1/retrieve", content=chunks(), headers={"content-type": "application/json"}
        )
        assert r.status_code == 413
        assert (await c.post("/v1/retrieve", json={"query": "小さい"})).status_code == 200


async def test_a_retrieval_body_is_bounded_by_what_the_service_reads(client, ns):
    """Before: a retrieval could send 8 MB (50 messages of 20,000 characters) that the event
    loop parsed for every other caller's time (~45 ms at 4 MB), to use 256 characters of it."""
    from retrieval.api.schemas import retrieve_body_limit
    from retrieval.settings import Settings

    limit = retrieve_body_limit(Settings())
    assert limit < 512 * 1024
    conv = [{"role": "user", "content": "会" * 8000}] * 2  # the most the defaults allow
    fits = json.dumps({"query": "会議" * 1000, "namespace": ns, "recent_conversation": conv})
    assert limit > len(fits.encode()) and limit < 4 * 1024 * 1024
    r = await client.post(
        "/v1/retrieve", content=fits, headers={"content-type": "application/json"}
    )
    assert r.status_code == 200, r.text
    big = json.dumps({"query": "x", "namespace": ns, "recent_conversation": conv * 10})
    r = await client.post("/v1/retrieve", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413
    # A write as large is not cut (its size is in metadata here: quick to embed).
    memories = [{"content": f"メモ{i}", "metadata": {"note": "会" * 9000}} for i in range(7)]
    body = json.dumps({"namespace": ns, "memories": memories})
    assert len(body) > limit
    r = await client.post(
        "/v1/memories", content=body, headers={"content-type": "application/json"}
    )
    assert r.status_code == 200, r.text


async def test_unknown_methods_share_one_metric_label(client):
    """Any token as a method created a new time series."""
    for method in ("FOO", "BAR", "X" * 40):
        r = await client.request(method, "/v1/retrieve")
        assert r.status_code in (404, 405)
    text = (await client.get("/metrics")).text
    assert 'method="FOO"' not in text and 'method="other"' in text


async def test_scoped_key_is_refused_on_every_route_of_another_namespace(authed, rt):
    all_ = {"Authorization": f"Bearer {KEY_ALL}"}
    team = {"Authorization": f"Bearer {KEY_TEAM_A}"}
    r = await authed.post(
        "/v1/memories",
        headers=all_,
        json={
            "namespace": "team-b",
            "memories": [{"id": "secret", "content": "チームBの秘密のメモ"}],
        },
    )
    assert r.status_code == 200
    r = await authed.post(
        "/v1/retrieve", headers=all_, json={"query": "秘密のメモ", "namespace": "team-b"}
    )
    run_id = r.json()["metadata"]["run_id"]
    await rt.orchestrator.flush()
    # A run names no namespace in its path: another namespace's run is not found (404, its
    # namespace unnamed); every route that names one refuses it (403).
    calls = [
        ("GET", "/v1/memories/secret?namespace=team-b", None, 403),
        ("DELETE", "/v1/memories/secret?namespace=team-b", None, 403),
        ("POST", "/v1/memories/secret/archive?namespace=team-b", None, 403),
        ("POST", "/v1/memories/erase", {"namespace": "team-b", "ids": ["secret"]}, 403),
        ("GET", "/v1/memories?namespace=team-b", None, 403),
        ("POST", "/v1/namespaces/team-b/purge", None, 403),
        ("GET", f"/v1/purges/{run_id}?namespace=team-b", None, 403),
        ("POST", "/v1/feedback", {"namespace": "team-b", "memory_id": "secret"}, 403),
        ("GET", f"/v1/runs/{run_id}", None, 404),
        ("GET", f"/v1/jobs/{run_id}?namespace=team-b", None, 403),
        ("POST", "/v1/retrieve", {"query": "秘密", "namespace": "team-b"}, 403),
        ("POST", "/v1/memories", {"namespace": "team-b", "memories": [{"content": "x"}]}, 403),
    ]
    for method, path, body, status in calls:
        r = await authed.request(method, path, headers=team, json=body)
        assert r.status_code == status, (method, path, r.text)
        assert "team-b" not in r.text or status == 403, (method, path, r.text)
        r = await authed.request(method, path, json=body)
        assert r.status_code == 401, (method, path, r.text)
    assert (await authed.get("/v1/memories/secret?namespace=team-b", headers=all_)).json()[
        "searchable"
    ] is True


@pytest.mark.parametrize(
    "spec",
    [
        "",
        ",",
        " , ",
        ":team",
        "key-long-enough:",
        "short",
        "key-long-enough:a||b",
        "key-long-enough,key-long-enough",
        "key with space",
    ],
)
def test_api_key_lists_that_meant_something_else_are_refused(spec):
    """Unset, empty or "," silently meant "no auth", "key:" meant "every namespace", ":ns"
    registered an empty key."""
    with pytest.raises(ValidationError):
        Settings(api_keys=spec)


async def test_a_namespace_past_its_share_gets_429_and_the_others_do_not(
    client, rt, ns, monkeypatch
):
    """Before: nothing bounded how much one tenant's retrievals took of the process; one
    sending the most expensive request the limits allow doubled the others' p95."""
    from retrieval.tenants import TenantShares

    monkeypatch.setattr(rt, "shares", TenantShares(0.001, max_wait_s=0.5))
    other = ns + "-other"

    async def ask(namespace: str, query: str):
        return await client.post("/v1/retrieve", json={"query": query, "namespace": namespace})

    def refused(text: str) -> float:
        line = next(x for x in text.splitlines() if x.startswith("retrieval_tenant_refused_total "))
        return float(line.split()[1])

    before = refused((await client.get("/metrics")).text)
    assert (await ask(other, "最初の質問")).status_code == 200  # the service is shared
    assert (await ask(ns, "会議の議事録はどこにある")).status_code == 200  # costs > its burst
    r = await ask(ns, "先週の設計レビューの結論")
    assert r.status_code == 429, r.text
    assert int(r.headers["Retry-After"]) >= 1 and "share" in r.json()["detail"]
    assert other not in r.text
    assert (await ask(other, "二つ目の質問")).status_code == 200
    assert refused((await client.get("/metrics")).text) == before + 1
