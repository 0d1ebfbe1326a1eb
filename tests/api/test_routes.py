"""The HTTP API over the real runtime: retrieve, memories, feedback, errors, auth, ops."""

import asyncio
import uuid

import pytest

from retrieval.settings import Settings
from tests.helpers import KEY_ALL, KEY_TEAM_A


async def test_memories_retrieve_get_archive_feedback(client, ns, rt):
    r = await client.post(
        "/v1/memories",
        json={
            "namespace": ns,
            "memories": [
                {
                    "id": "a",
                    "content": "宏啓さんがMemory Storeのスキーマをレビューした",
                    "created_at": "2026-11-18T10:00:00+09:00",
                },
                {
                    "id": "b",
                    "content": "カレーを作った。隠し味にチョコを入れた。",
                    "created_at": "2026-10-01T10:00:00+09:00",
                },
            ],
        },
    )
    assert r.status_code == 200, r.text
    assert r.json()["inserted"] == 2
    body = {
        "query": "宏啓さんがレビューしたのは何？",
        "namespace": ns,
        "options": {"now": "2026-11-22T12:00:00+09:00"},
    }
    r = await client.post("/v1/retrieve", json=body)
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["results"][0]["id"] == "a"
    assert data["results"][0]["reason"] and data["metadata"]["run_id"]
    assert data["metadata"]["degraded"] == []
    assert data["results"][0]["signals"]["fused"] > 0
    run_id = data["metadata"]["run_id"]
    terse = {**body, "options": {**body["options"], "include_metadata_details": False}}
    r = await client.post("/v1/retrieve", json=terse)
    assert r.status_code == 200 and r.json()["results"][0]["id"] == "a"
    assert all(x["signals"] == {} and x["reason"] for x in r.json()["results"])

    r = await client.get(f"/v1/memories/a?namespace={ns}")
    assert r.status_code == 200 and r.json()["content"].startswith("宏啓")
    assert (await client.get(f"/v1/memories/zzz?namespace={ns}")).status_code == 404

    await rt.orchestrator.flush()
    r = await client.get(f"/v1/runs/{run_id}")
    assert r.status_code == 200 and r.json()["selected_ids"][0] == "a"

    r = await client.post(
        "/v1/feedback", json={"namespace": ns, "memory_id": "a", "run_id": run_id, "negative": True}
    )
    assert r.status_code == 200 and r.json()["searchable"] is False
    r = await client.post("/v1/retrieve", json=body)
    assert "a" not in [x["id"] for x in r.json()["results"]]
    assert (await client.get(f"/v1/memories/a?namespace={ns}")).json()["searchable"] is False
    # A mark made by mistake is undone by positive feedback: the answer says what the store does.
    fb = {"namespace": ns, "memory_id": "a", "negative": False}
    r = await client.post("/v1/feedback", json=fb)
    assert r.status_code == 200 and r.json()["searchable"] is True
    assert (await client.get(f"/v1/memories/a?namespace={ns}")).json()["searchable"] is True
    r = await client.post("/v1/retrieve", json=body)
    assert r.json()["results"][0]["id"] == "a"
    # An archived memory stays out whatever the feedback, and the answer says so.
    assert (await client.post(f"/v1/memories/a/archive?namespace={ns}")).status_code == 200
    r = await client.post("/v1/feedback", json=fb)
    assert r.status_code == 200 and r.json()["searchable"] is False
    r = await client.post("/v1/retrieve", json=body)
    assert "a" not in [x["id"] for x in r.json()["results"]]

    r = await client.delete(f"/v1/memories/b?namespace={ns}")
    assert r.status_code == 200
    r = await client.post("/v1/retrieve", json={"query": "カレー", "namespace": ns})
    assert r.json()["results"] == []


@pytest.mark.parametrize(
    "body,field",
    [
        ({"query": "   "}, "query"),
        ({"query": ""}, "query"),
        ({"query": "x" * 3000}, "query"),
        ({"query": "ok", "options": {"limit": 0}}, "options.limit"),
        ({"query": "ok", "options": {"limit": 101}}, "options.limit"),
        ({"query": "ok", "options": {"force_strategy": "magic"}}, "options.force_strategy"),
        (
            {
                "query": "ok",
                "options": {
                    "time_range": {
                        "start": "2026-02-01T00:00:00+09:00",
                        "end": "2026-01-01T00:00:00+09:00",
                    }
                },
            },
            "options.time_range",
        ),
        ({"query": 5}, "query"),
        ({"query": "ok", "namespace": "a b"}, "namespace"),
        ({"query": "ok", "options": {"timezone": "Mars/Olympus"}}, "options.timezone"),
        ({"query": "ok", "options": {"timezone": "../../etc/passwd"}}, "options.timezone"),
        ({"query": "ok", "options": {"timezone": "Asia"}}, "options.timezone"),
        ({"query": "ok", "options": {"timezone": ""}}, "options.timezone"),
    ],
)
async def test_bad_retrieve_is_422_naming_field(client, body, field):
    r = await client.post("/v1/retrieve", json=body)
    assert r.status_code == 422
    assert any(d["field"].startswith(field) for d in r.json()["detail"]), r.json()
    assert "Traceback" not in r.text


async def test_malformed_json_is_422(client):
    r = await client.post(
        "/v1/retrieve", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert r.status_code == 422


async def test_bad_batch_is_rejected_whole(client, ns):
    from retrieval import metrics

    rejected = metrics.INGEST_ERRORS._value.get()
    r = await client.post(
        "/v1/memories",
        json={
            "namespace": ns,
            "memories": [{"id": "ok", "content": "fine"}, {"id": "bad", "content": ""}],
        },
    )
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"][:4] == ["body", "memories", 1, "content"]
    assert metrics.INGEST_ERRORS._value.get() == rejected + 1
    assert (await client.get(f"/v1/memories/ok?namespace={ns}")).status_code == 404


async def test_ops_endpoints(client):
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    r = await client.get("/readyz")
    assert r.status_code == 200 and r.json()["ready"] is True
    await client.post("/v1/retrieve", json={"query": "メトリクスの確認"})
    text = (await client.get("/metrics")).text
    for name in (
        "retrieval_latency_ms_bucket",
        "retrieval_strategy_usage_total",
        "retrieval_search_latency_ms_bucket",
        "retrieval_http_requests_total",
    ):
        assert name in text
    assert (await client.get("/openapi.json")).json()["paths"]["/v1/retrieve"]


async def test_auth_keys_and_namespace_scopes(authed):
    assert (await authed.get("/healthz")).status_code == 200
    assert (await authed.post("/v1/retrieve", json={"query": "x"})).status_code == 401
    h = {"Authorization": "Bearer key-team-a-01"}
    assert (
        await authed.post("/v1/retrieve", json={"query": "x", "namespace": "team-b"}, headers=h)
    ).status_code == 403
    assert (
        await authed.post("/v1/retrieve", json={"query": "x", "namespace": "team-a"}, headers=h)
    ).status_code == 200
    h = {"Authorization": "Bearer key-all-0001"}
    assert (
        await authed.post("/v1/retrieve", json={"query": "x", "namespace": "team-b"}, headers=h)
    ).status_code == 200


async def test_no_key_is_401_before_the_body_is_judged(authed):
    """A caller without a key learns nothing of the schema: 401 (with the scheme asked for)
    whatever the body, its type or its size, on the API and on the MCP tools; the open paths
    stay open."""
    bad = [
        ("POST", "/v1/retrieve", {"json": {"query": 7, "limit": "many"}}),
        ("POST", "/v1/retrieve", {"content": b"{not json", "headers": {"content-type": "application/json"}}),
        ("POST", "/v1/retrieve", {"content": b"query=x", "headers": {"content-type": "text/plain"}}),
        ("POST", "/v1/memories", {"json": {"memories": [{"created_at": "yesterday"}]}}),
        ("POST", "/v1/memories", {"content": b"x" * 3_000_000, "headers": {"content-type": "application/json"}}),
        ("GET", "/v1/memories?limit=-1", {}),
        ("GET", "/v1/runs/not-a-uuid", {}),
        ("POST", "/mcp/", {"json": {"jsonrpc": "2.0"}}),
    ]  # fmt: skip
    for method, path, kw in bad:
        for auth in ({}, {"Authorization": "Bearer wrong-key-000"}, {"Authorization": "Basic x"}):
            headers = {**kw.get("headers", {}), **auth}
            r = await authed.request(method, path, **{**kw, "headers": headers})
            assert r.status_code == 401, (method, path, auth, r.status_code, r.text)
            assert r.headers["www-authenticate"].startswith("Bearer"), (method, path)
            assert "query" not in r.text and "limit" not in r.text, r.text
    # A known key gets the body judged; the open paths need none.
    h = {"Authorization": "Bearer key-team-a-01"}
    r = await authed.post("/v1/retrieve", json={"query": 7, "namespace": "team-a"}, headers=h)
    assert r.status_code == 422
    for path in ("/healthz", "/metrics", "/openapi.json"):
        assert (await authed.get(path)).status_code == 200, path


def test_settings_fail_fast():
    with pytest.raises(ValueError):
        Settings(database_url="mysql://x")
    with pytest.raises(ValueError):
        Settings(pool_min=5, pool_max=2)
    assert Settings().parsed_api_keys() == {}  # unset: no auth
    for spec in ("", " , "):  # set, yet naming no key: most likely keys that went missing
        with pytest.raises(ValueError, match="names no key"):
            Settings(api_keys=spec)
    assert Settings(api_keys="aaaaaaaa,bbbbbbbb:x|y,cccccccc:*").parsed_api_keys() == {
        "aaaaaaaa": None,
        "bbbbbbbb": frozenset({"x", "y"}),
        "cccccccc": None,
    }


async def test_a_scoped_key_learns_nothing_of_another_namespaces_run(authed):
    """Before: the run was loaded first, and the 403 named the other namespace."""
    other = f"other-{uuid.uuid4().hex[:8]}"
    all_ns = {"Authorization": f"Bearer {KEY_ALL}"}
    await authed.post(
        "/v1/memories",
        json={"namespace": other, "memories": [{"content": "社外秘の計画"}]},
        headers=all_ns,
    )
    r = await authed.post(
        "/v1/retrieve", json={"namespace": other, "query": "計画"}, headers=all_ns
    )
    run_id = r.json()["metadata"]["run_id"]
    for _ in range(100):  # the run is logged in the background
        mine = await authed.get(f"/v1/runs/{run_id}", headers=all_ns)
        if mine.status_code == 200:
            break
        await asyncio.sleep(0.05)
    assert mine.status_code == 200 and mine.json()["namespace"] == other
    theirs = await authed.get(
        f"/v1/runs/{run_id}", headers={"Authorization": f"Bearer {KEY_TEAM_A}"}
    )
    assert theirs.status_code == 404
    assert other not in theirs.text


async def test_feedback_refuses_another_namespaces_run(client, ns, rt):
    """Before: feedback in one namespace could name a run of another."""
    other = ns + "-o"
    for n in (ns, other):
        body = {"namespace": n, "memories": [{"id": "a", "content": "議事録の共有"}]}
        assert (await client.post("/v1/memories", json=body)).status_code == 200
    r = await client.post("/v1/retrieve", json={"namespace": other, "query": "議事録"})
    run_id = r.json()["metadata"]["run_id"]
    await rt.orchestrator.flush()
    body = {"namespace": ns, "memory_id": "a", "run_id": run_id, "negative": True}
    refused = await client.post("/v1/feedback", json=body)
    assert refused.status_code == 404 and other not in refused.text
    mine = await client.get("/v1/memories/a", params={"namespace": ns})
    assert mine.json()["searchable"] is True  # nothing marked
    ok = await client.post("/v1/feedback", json={**body, "namespace": other})
    assert ok.status_code == 200


async def test_time_words_are_read_in_the_requests_time_zone(client):
    """At 20:00 UTC on 9 November it is already the 10th in Tokyo: "yesterday" is the 8th for a
    caller in UTC and the 9th by the service's default zone."""
    body = {"query": "what did we do yesterday?", "namespace": "tz-words"}
    now = "2022-11-09T20:00:00+00:00"
    r = await client.post("/v1/retrieve", json={**body, "options": {"now": now}})
    default = r.json()["metadata"]["query_intent"]["time_range"]
    r = await client.post("/v1/retrieve", json={**body, "options": {"now": now, "timezone": "UTC"}})
    assert r.status_code == 200
    utc = r.json()["metadata"]["query_intent"]["time_range"]
    assert default["start"].startswith("2022-11-09T00:00:00+09:00")
    assert utc["start"] == "2022-11-08T00:00:00+00:00"
    assert utc["end"] == "2022-11-09T00:00:00+00:00"


async def test_a_fixed_now_bounds_what_is_returned(client, ns):
    """`options.now` in the past: nothing written after it comes back, as a result or as a
    result's context, so the same request answers the same whatever was written since."""
    mems = [
        ("before", "2026-11-18T09:00:00+09:00", "ジムでベンチプレスを60kg上げた"),
        ("at", "2026-11-20T09:00:00+09:00", "ジムでベンチプレスを62kg上げた"),
        ("after", "2026-11-25T09:00:00+09:00", "ジムでベンチプレスを65kg上げた"),
    ]
    body = {
        "namespace": ns,
        "memories": [{"id": i, "content": c, "created_at": t, "thread": "gym"} for i, t, c in mems],
    }
    assert (await client.post("/v1/memories", json=body)).status_code == 200
    ask = {"query": "ジムのベンチプレス", "namespace": ns}
    r = await client.post("/v1/retrieve", json=ask)
    assert {x["id"] for x in r.json()["results"]} == {"before", "at", "after"}
    fixed = {**ask, "options": {"now": "2026-11-20T09:00:00+09:00", "context_window": 2}}
    r = await client.post("/v1/retrieve", json=fixed)
    got = r.json()["results"]
    assert {x["id"] for x in got} == {"before", "at"}  # written at now: before it
    assert all(n["id"] != "after" for x in got for n in x["context"]), got
    assert any(n["id"] == "before" for x in got for n in x["context"])
    # A hard window reaching past now is bounded by it too.
    ranged = {
        **fixed,
        "options": {**fixed["options"], "time_range": {"start": "2026-11-01T00:00:00+09:00"}},
    }
    r = await client.post("/v1/retrieve", json=ranged)
    assert {x["id"] for x in r.json()["results"]} == {"before", "at"}
