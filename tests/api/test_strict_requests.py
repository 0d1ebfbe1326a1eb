"""What a new user sends by mistake gets a refusal that says what to fix: an unknown key, a
value of the wrong JSON type, a question of invisible characters, a body not said to be JSON,
malformed JSON, a string too long (in characters)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    "body,field,says",
    [
        ({"query": "x", "options": {"limt": 3}}, "options.limt", "not a field"),
        ({"query": "x", "top_k": 3}, "top_k", "not a field"),
        ({"query": "x", "options": {"limit": True}}, "options.limit", "integer"),
        ({"query": "x", "options": {"limit": "5"}}, "options.limit", "integer"),
        ({"query": "x", "options": {"expand": 1}}, "options.expand", "boolean"),
        ({"query": "x", "options": {"now": 1700000000}}, "options.now", "ISO 8601 text"),
        ({"query": "\u200b\u200b\u2060"}, "query", "visible character"),
        ({"query": "\u3000\t\u200e"}, "query", "visible character"),
        (
            {"query": "x", "options": {"time_range": {"start": 0}}},
            "options.time_range.start",
            "ISO",
        ),
    ],
)
async def test_a_retrieval_that_breaks_a_rule_is_refused_by_name(client, body, field, says):
    r = await client.post("/v1/retrieve", json=body)
    assert r.status_code == 422, r.text
    (err,) = [e for e in r.json()["detail"] if e["field"] == field]
    assert says in err["msg"], err


@pytest.mark.parametrize(
    "body,field,says",
    [
        (
            {"memories": [{"id": "x" * 600, "content": "a"}]},
            "memories.0.id",
            "at most 512 characters",
        ),
        (
            {"memories": [{"content": "a" * 100_001}]},
            "memories.0.content",
            "at most 100000 characters",
        ),
        (
            {"memories": [{"content": "a", "created_at": 1700000000}]},
            "memories.0.created_at",
            "ISO 8601",
        ),
        ({"memories": [{"content": "a"}], "extra": 1}, "extra", "not a field"),
        (
            {"memories": [{"content": "a", "expires_at": "2020-01-01T00:00:00Z"}]},
            "memories.0.expires_at",
            "in the future",
        ),
        (
            {
                "memories": [
                    {
                        "content": "a",
                        "created_at": "2099-06-01T00:00:00Z",
                        "expires_at": "2099-01-01T00:00:00Z",
                    }
                ]
            },
            "memories.0.expires_at",
            "after created_at",
        ),
        (
            {"memories": [{"id": "m1", "content": "a", "links": [{"to": "m1"}]}]},
            "memories.0.links",
            "itself",
        ),
        ({"memories": [{"content": "a"}], "namespace": "x" * 200}, "namespace", "characters"),
        # an event given by the caller: validated as created_at is, and start before end
        (
            {
                "memories": [
                    {
                        "content": "a",
                        "event_time": {
                            "start": "2026-02-14T00:00:00",
                            "end": "2026-02-15T00:00:00Z",
                        },
                    }
                ]
            },
            "memories.0.event_time.start",
            "UTC offset",
        ),
        (
            {
                "memories": [
                    {
                        "content": "a",
                        "event_time": {
                            "start": "2026-02-15T00:00:00Z",
                            "end": "2026-02-14T00:00:00Z",
                        },
                    }
                ]
            },
            "memories.0.event_time.end",
            "after start",
        ),
        (
            {
                "memories": [
                    {
                        "content": "a",
                        "event_time": {
                            "start": "1066-10-14T00:00:00Z",
                            "end": "1066-10-15T00:00:00Z",
                        },
                    }
                ]
            },
            "memories.0.event_time.start",
            "between 1900",
        ),
        (
            {"memories": [{"content": "a", "event_time": {"start": "2026-02-14T00:00:00Z"}}]},
            "memories.0.event_time.end",
            "required",
        ),
        (
            {"memories": [{"content": "a", "event_time": "2026-02-14"}]},
            "memories.0.event_time",
            "",
        ),
    ],
)
async def test_a_write_that_breaks_a_rule_is_refused_by_name(client, body, field, says):
    r = await client.post("/v1/memories", json=body)
    assert r.status_code == 422, r.text
    (err,) = [e for e in r.json()["detail"] if e["field"] == field]
    assert says in err["msg"], err


@pytest.mark.parametrize("ctype", [None, "text/plain", "application/x-www-form-urlencoded"])
@pytest.mark.parametrize("path", ["/v1/retrieve", "/v1/memories", "/v1/feedback"])
async def test_a_body_not_said_to_be_json_is_415_saying_what_to_send(client, ctype, path):
    headers = {"content-type": ctype} if ctype else {}
    r = await client.post(path, content=b'{"query": "x"}', headers=headers)
    assert r.status_code == 415, r.text
    (err,) = r.json()["detail"]
    assert err["loc"] == ["header", "content-type"]
    assert "Content-Type: application/json" in err["msg"]
    ok = await client.post(
        "/v1/retrieve",
        content=b'{"query": "x"}',
        headers={"content-type": "application/json; charset=utf-8"},
    )
    assert ok.status_code == 200


async def test_malformed_json_names_the_character_not_a_field(client):
    r = await client.post(
        "/v1/retrieve", content=b'{"query": "x",,}', headers={"content-type": "application/json"}
    )
    assert r.status_code == 422
    (err,) = r.json()["detail"]
    assert err["field"] == "body" and err["msg"].startswith("malformed JSON at character 14")
    r = await client.post("/v1/retrieve", json=["not", "an", "object"])
    assert r.status_code == 422 and "JSON object" in r.text
