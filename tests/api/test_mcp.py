"""The MCP server, driven by the SDK's own client: over HTTP (mounted in a real `retrieval
serve`, behind its API keys) and over stdio (`retrieval mcp`), against the test store. The
outage test is in test_faults.py (it stops a database of its own)."""

from __future__ import annotations

import os
import sys
import time
import uuid

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.helpers import KEY_ALL, KEY_TEAM_A, ROOT, running_server

TOOLS = {"search_memories", "remember", "forget", "feedback"}


@pytest.fixture(scope="module")
def server(rt):
    env = {"RETRIEVAL_API_KEYS": f"{KEY_ALL},{KEY_TEAM_A}:team-a"}
    with running_server(rt.dsn, env) as url:
        yield url


def _over_http(url: str, key: str) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30)
    return Client(streamable_http_client(f"{url}/mcp/", http_client=http))


def _text(result) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


async def test_every_tool_over_http(server):
    ns = f"m-{uuid.uuid4().hex[:10]}"
    async with _over_http(server, KEY_ALL) as c:
        assert {t.name for t in (await c.list_tools()).tools} == TOOLS
        wrote = await c.call_tool(
            "remember",
            {
                "namespace": ns,
                "memories": [
                    {"id": "trip", "content": "来週の金曜に京都へ出張する",
                     "created_at": "2026-03-02T09:00:00+09:00"},
                    {"id": "gym", "content": "ジムで筋トレを一時間した"},
                ],
            },
        )  # fmt: skip
        assert not wrote.is_error and "stored 2 memories" in _text(wrote)
        found = await c.call_tool(
            "search_memories", {"query": "京都への出張はいつ？", "namespace": ns, "limit": 5}
        )
        text = _text(found)
        assert not found.is_error
        assert text.startswith("1. [trip | 2026-03-02T00:00+00:00"), text  # content, time, reason
        assert "来週の金曜に京都へ出張する" in text and "why: found by" in text
        first = text.split("\n", 1)[0]
        assert any(f"| {w}, confidence " in first for w in ("high", "medium", "low")), first
        # when the trip happens, read from its words against when it was written
        assert "| happened Fri 2026-03-13 |" in first, first
        run_id = text.rsplit("run_id: ", 1)[1].split()[0]
        fb = await c.call_tool(
            "feedback", {"memory_id": "gym", "helpful": False, "namespace": ns, "run_id": run_id}
        )
        assert not fb.is_error and "no longer returned" in _text(fb)
        gone = await c.call_tool("forget", {"memory_id": "trip", "namespace": ns})
        assert not gone.is_error and "erased trip" in _text(gone)
        again = await c.call_tool("search_memories", {"query": "京都への出張", "namespace": ns})
        assert "No memory matches." in _text(again)
        fb = await c.call_tool("feedback", {"memory_id": "gym", "helpful": True, "namespace": ns})
        assert not fb.is_error and "returned by searches" in _text(fb)  # a mistake undone


async def test_a_key_can_do_nothing_in_another_namespace(server):
    ns = f"m-{uuid.uuid4().hex[:10]}"
    async with _over_http(server, KEY_TEAM_A) as c:
        for tool, args in (
            ("search_memories", {"query": "出張", "namespace": ns}),
            ("remember", {"memories": [{"content": "メモ"}], "namespace": ns}),
            ("forget", {"memory_id": "x", "namespace": ns}),
            ("feedback", {"memory_id": "x", "helpful": False, "namespace": ns}),
        ):
            out = await c.call_tool(tool, args)
            assert out.is_error and "may not use namespace" in _text(out), (tool, _text(out))
        ok = await c.call_tool("search_memories", {"query": "出張", "namespace": "team-a"})
        assert not ok.is_error
    r = httpx.post(f"{server}/mcp/", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert r.status_code == 401  # no key: refused before the protocol
    r = httpx.post(
        f"{server}/mcp/",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Authorization": "Bearer not-a-key-0000"},
    )
    assert r.status_code == 401


@pytest.mark.parametrize(
    "tool,args,field",
    [
        ("search_memories", {"query": "   "}, "query"),
        ("search_memories", {"query": "出張", "limit": 0}, "options.limit"),
        ("search_memories", {"query": "出張", "start": "yesterday"}, "options.time_range.start"),
        ("search_memories", {"query": "出張", "context_window": 9}, "options.context_window"),
        ("search_memories", {"query": "出張", "max_chars": 0}, "options.max_chars"),
        ("search_memories", {"query": "昨日の出張", "timezone": "Mars/Olympus"}, "options.timezone"),
        ("remember", {"memories": [{"content": "ok"}, {"content": "x", "created_at": "昨日"}]},
         "memories.1.created_at"),
        ("remember", {"memories": []}, "memories"),
        ("forget", {"memory_id": "nothing-here"}, "no memory"),
        ("feedback", {"memory_id": "x", "helpful": False, "run_id": "not-a-uuid"}, "run_id"),
        ("search_memories", {"limit": 3}, "query"),  # missing: the SDK's own check
        ("remember", {"memories": [{"id": "x"}]}, "content"),
    ],
)  # fmt: skip
async def test_bad_input_is_a_tool_error_naming_the_field(server, tool, args, field):
    ns = f"m-{uuid.uuid4().hex[:10]}"
    async with _over_http(server, KEY_ALL) as c:
        out = await c.call_tool(tool, {"namespace": ns, **args})
    text = _text(out)
    assert out.is_error and field in text, text
    assert "Traceback" not in text


def test_a_number_json_cannot_carry_is_refused_by_name(server):
    """1e400 (Infinity once parsed) in metadata: the SDK's client will not send it, a raw
    JSON-RPC call can. It used to fail the tool call with no reason ("Error executing tool
    remember") when the tool passed it on to the routes."""
    body = (
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "remember", '
        '"arguments": {"memories": [{"content": "x", "metadata": {"n": 1e400}}]}}}'
    )
    r = httpx.post(
        f"{server}/mcp/",
        content=body,
        headers={
            "Authorization": f"Bearer {KEY_ALL}",
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
        },
        timeout=30,
    )
    result = r.json()["result"]
    text = result["content"][0]["text"]
    assert result["isError"] and "metadata" in text and "Traceback" not in text, text


async def test_stdio_server_for_a_local_host_acts_with_its_key(rt):
    """`retrieval mcp` as a host starts it; with API keys set it acts with
    RETRIEVAL_MCP_API_KEY, whose namespaces are the only ones its tools reach."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "retrieval.cli", "mcp"],
        env={
            **os.environ,
            "DATABASE_URL": rt.dsn,
            "RETRIEVAL_API_KEYS": f"{KEY_ALL},{KEY_TEAM_A}:team-a",
            "RETRIEVAL_MCP_API_KEY": KEY_TEAM_A,
        },
        cwd=str(ROOT),
    )
    marker = uuid.uuid4().hex[:8]
    t0 = time.monotonic()
    async with Client(params) as c:
        assert {t.name for t in (await c.list_tools()).tools} == TOOLS
        wrote = await c.call_tool(
            "remember",
            {"namespace": "team-a", "memories": [{"content": f"朝に五キロ走った {marker}"}]},
        )
        assert not wrote.is_error, _text(wrote)
        found = await c.call_tool("search_memories", {"query": marker, "namespace": "team-a"})
        assert f"朝に五キロ走った {marker}" in _text(found)
        other = await c.call_tool("search_memories", {"query": marker, "namespace": "team-b"})
        assert other.is_error and "may not use namespace" in _text(other)
    print(f"stdio session: {time.monotonic() - t0:.1f} s with start-up")


def test_a_malformed_stdio_line_gets_no_answer_and_the_next_is_served(rt):
    """The SDK's stdio transport answers nothing to a line that is not JSON (docs/mcp.md says
    so); the session goes on: the request after it is answered."""
    import json
    import queue
    import subprocess
    import threading

    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        "{not json",
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]  # fmt: skip
    sent = "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)
    proc = subprocess.Popen(
        [sys.executable, "-m", "retrieval.cli", "mcp"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        cwd=ROOT, env={**os.environ, "DATABASE_URL": rt.dsn},
    )  # fmt: skip
    # Input stays open until both answers are read (at end of input the transport may stop
    # before it has answered the last request: a race, not the behaviour under test).
    got: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [got.put(x) for x in proc.stdout], daemon=True).start()
    proc.stdin.write(sent)
    proc.stdin.flush()
    answers: list[dict] = []
    try:
        while len(answers) < 2:
            line = got.get(timeout=120)
            if line.strip():
                answers.append(json.loads(line))
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    assert [a.get("id") for a in answers] == [1, 2], answers
    assert {t["name"] for t in answers[1]["result"]["tools"]} == TOOLS
