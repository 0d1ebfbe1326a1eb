"""A request can be followed: its X-Request-ID (given, or made) comes back, is in its one JSON
log line (with route, status, ms, strategy, degraded sources and a digest of the tenant, never
a key) and in its run-log entry."""

from __future__ import annotations

import io
import json
import logging

from retrieval.api.access import JsonLines, TextLines, logging_config, tenant_digest
from tests.helpers import KEY_ALL


def _lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(x) for x in stream.getvalue().splitlines() if x.strip()]


async def test_a_request_id_is_returned_logged_and_in_the_run_log(rt, authed, ns):
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonLines())
    access = logging.getLogger("retrieval.access")
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    try:
        headers = {"Authorization": f"Bearer {KEY_ALL}", "X-Request-ID": "abc"}
        r = await authed.post(
            "/v1/retrieve", json={"query": "京都への出張", "namespace": ns}, headers=headers
        )
        assert r.status_code == 200 and r.headers["x-request-id"] == "abc"
        run_id = r.json()["metadata"]["run_id"]
        made = await authed.get("/healthz", headers={"X-Request-ID": "not ok / spaces"})
        assert made.headers["x-request-id"] != "not ok / spaces"
        assert len(made.headers["x-request-id"]) == 32
    finally:
        access.removeHandler(handler)
    (line,) = [x for x in _lines(out) if x.get("request_id") == "abc"]
    assert line["route"] == "/v1/retrieve" and line["status"] == 200 and line["ms"] > 0
    assert line["strategy"] and line["degraded"] == []
    assert line["tenant"] == tenant_digest(
        f"key:{__import__('retrieval.tenants').tenants.key_id(KEY_ALL)}"
    )
    assert KEY_ALL not in out.getvalue() and ns not in out.getvalue()
    await rt.orchestrator.flush()
    r = await authed.get(f"/v1/runs/{run_id}", headers={"Authorization": f"Bearer {KEY_ALL}"})
    assert r.json()["request_id"] == "abc"


def test_the_log_formats():
    rec = logging.makeLogRecord(
        {"name": "x", "levelname": "WARNING", "msg": "hello %s", "args": ("you",),
         "fields": {"a": 1}}
    )  # fmt: skip
    got = json.loads(JsonLines().format(rec))
    assert got["msg"] == "hello you" and got["a"] == 1 and got["level"] == "warning"
    assert "a=1" in TextLines().format(rec)
    config = logging_config("DEBUG", "json")
    assert config["root"]["level"] == "DEBUG"
    assert config["loggers"]["uvicorn.access"]["propagate"] is False
