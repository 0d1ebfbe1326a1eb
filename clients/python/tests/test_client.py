"""The client alone, against a scripted service (httpx.MockTransport): no server, no database.
What it sends, how it reads answers and refusals, what it retries and what it never sends twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest

from retrieval_client import (
    ApiError,
    AsyncRetrievalClient,
    BadResponse,
    Forbidden,
    IngestOut,
    InvalidRequest,
    JobOut,
    NotFound,
    RateLimited,
    Relevance,
    RetrievalClient,
    RetrieveResponse,
    Unavailable,
    Unreachable,
)

ANSWER = {
    "results": [
        {
            "id": "trip",
            "content": "来週の金曜に京都へ出張",
            "title": None,
            "memory_type": "semantic",
            "source_type": "unknown",
            "metadata": {},
            "created_at": "2026-03-02T09:00:00+09:00",
            "score": 0.91,
            "signals": {"cos": 0.8},
            "sources": ["vector"],
            "relevance": "high",
            "reason": "found by vector (cos 0.800)",
        }
    ],
    "metadata": {
        "strategy_used": "hybrid",
        "query_intent": {"query_type": "factual"},
        "total_latency_ms": 12.5,
        "search_breakdown": {
            "vector": {"latency_ms": 3.0, "count": 1, "status": "ok", "error": None}
        },
        "stage_latency_ms": {"embed": 5.0},
        "num_results_before_rerank": 3,
        "num_results_after_rerank": 1,
        "degraded": [],
        "run_id": "5f0f6b1e-8a43-4d3c-9d55-2c7f1f3a9b10",
        "params": {},
    },
}

WRITTEN = {
    "namespace": "n1",
    "received": 1,
    "inserted": 1,
    "updated": 0,
    "embedded": 1,
    "ids": ["x"],
    "seconds": 0.1,
    "lsn": "0/3000148",
}

JOB = {
    "id": "9c4b3f5e-4f7d-4a39-b1d4-0e5b6e1f2a3c",
    "namespace": "n1",
    "state": "queued",
    "received": 1,
    "ids": ["x"],
    "estimate_s": 30.0,
    "attempts": 0,
    "created_at": "2026-03-02T09:00:00+00:00",
    "started_at": None,
    "finished_at": None,
    "report": None,
    "error": None,
}


def test_answers_are_typed():
    def service(request: httpx.Request) -> httpx.Response:
        assert request.headers["authorization"] == "Bearer k-0000001"
        body = json.loads(request.content)
        assert body == {"query": "出張", "namespace": "ns", "options": {"limit": 3}}
        return httpx.Response(200, json=ANSWER)

    with RetrievalClient(
        "http://t/", api_key="k-0000001", transport=httpx.MockTransport(service)
    ) as c:
        got = c.retrieve("出張", namespace="ns", limit=3)
    assert isinstance(got, RetrieveResponse)
    assert got.results[0].relevance is Relevance.HIGH and got.results[0].score == 0.91
    assert got.metadata is not None and got.metadata.search_breakdown["vector"].count == 1


def test_refusals_raise_by_status():
    answers = {
        "/v1/retrieve": httpx.Response(
            422, json={"detail": [{"field": "query", "msg": "must not be empty"}]}
        ),
        "/v1/memories/a%2Fb": httpx.Response(404, json={"detail": "no memory 'a/b'"}),
        "/v1/feedback": httpx.Response(403, json={"detail": "not your namespace"}),
    }

    def service(request: httpx.Request) -> httpx.Response:
        return answers[request.url.raw_path.decode().split("?")[0]]

    with RetrievalClient("http://t", transport=httpx.MockTransport(service), retries=0) as c:
        with pytest.raises(InvalidRequest) as bad:
            c.retrieve(" ")
        assert bad.value.fields == ["query"] and bad.value.status == 422
        with pytest.raises(NotFound):
            c.get("a/b")  # the id is one path segment, escaped
        with pytest.raises(Forbidden):
            c.feedback("a")


def test_busy_answers_are_retried_after_retry_after():
    sent: list[str] = []

    def service(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        if len(sent) < 3:
            return httpx.Response(503, json={"detail": "db down"}, headers={"Retry-After": "0"})
        return httpx.Response(200, json=ANSWER)

    with RetrievalClient("http://t", transport=httpx.MockTransport(service), retries=3) as c:
        assert c.retrieve("出張").results[0].id == "trip"
    assert sent == ["/v1/retrieve"] * 3

    def always_busy(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, json={"detail": "share"}, headers={"Retry-After": "7"})

    with (
        RetrievalClient(
            "http://t", transport=httpx.MockTransport(always_busy), retries=1, max_wait_s=0.01
        ) as c,
        pytest.raises(RateLimited) as limited,
    ):
        c.retrieve("出張")
    assert limited.value.retry_after_s == 7


def test_a_request_that_got_no_answer_is_retried_unless_it_could_land_twice():
    sent: list[str] = []

    def refused(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        raise httpx.ConnectError("refused", request=request)

    with RetrievalClient(
        "http://t", retries=2, max_wait_s=0.01, transport=httpx.MockTransport(refused)
    ) as c:
        with pytest.raises(Unreachable) as no_answer:
            c.retrieve("出張")
        assert sent == ["/v1/retrieve"] * 3
        # An ApiError like every failure of a call, with the transport's error as its cause.
        assert isinstance(no_answer.value, ApiError) and no_answer.value.status == 0
        assert isinstance(no_answer.value.__cause__, httpx.ConnectError)
        sent.clear()
        with pytest.raises(Unreachable):
            c.remember([{"content": "idのないメモ"}])  # could be written twice: sent once
        assert sent == ["/v1/memories"]
        sent.clear()
        with pytest.raises(Unreachable):
            c.remember([{"id": "m1", "content": "idのあるメモ"}])  # an upsert: retried
        assert sent == ["/v1/memories"] * 3


def test_reads_carry_the_last_writes_position():
    """With replicas a write answers with its WAL position; the next reads of that namespace
    send it (also a read served by another process of the service then waits for it)."""
    seen: list[httpx.Request] = []

    def service(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/v1/memories":
            return httpx.Response(200, json=WRITTEN)
        return httpx.Response(404, json={"detail": "no memory"})

    with RetrievalClient("http://t", transport=httpx.MockTransport(service), retries=0) as c:
        assert isinstance(c.remember([{"id": "x", "content": "メモ"}], namespace="n1"), IngestOut)
        with pytest.raises(NotFound):
            c.get("x", namespace="n1")
        with pytest.raises(NotFound):
            c.retrieve("メモ", namespace="n1")
        with pytest.raises(NotFound):
            c.retrieve("メモ", namespace="n2")
    assert seen[1].url.params["after_lsn"] == "0/3000148"
    assert json.loads(seen[2].content)["options"]["after_lsn"] == "0/3000148"
    assert "after_lsn" not in json.loads(seen[3].content)["options"]  # another namespace


async def test_async_client_follows_a_queued_write():
    polls: list[str] = []

    async def service(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            return httpx.Response(202, json=JOB)
        polls.append(request.url.params["namespace"])
        state = "running" if len(polls) < 2 else "done"
        return httpx.Response(200, json={**JOB, "state": state, "report": WRITTEN})

    async with AsyncRetrievalClient("http://t", transport=httpx.MockTransport(service)) as c:
        queued = await c.remember([{"id": "x", "content": "長いメモ"}], namespace="n1")
        assert isinstance(queued, JobOut) and queued.state == "queued"
        done = await c.wait_for_job(queued, poll_s=0.01, timeout_s=5)
    assert done.state == "done" and done.report is not None and polls == ["n1", "n1"]


async def test_async_unavailable_is_raised_after_its_retries():
    async def down(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, json={"detail": "unavailable, retry later"})

    async with AsyncRetrievalClient(
        "http://t", transport=httpx.MockTransport(down), retries=1, max_wait_s=0.01
    ) as c:
        with pytest.raises(Unavailable) as exc:
            await c.retrieve("出張")
    assert exc.value.status == 503


def test_importing_it_changes_nothing_in_the_process():
    """No environment variable set, no thread started, nothing of the server loaded."""
    code = (
        "import os, sys, threading; before = dict(os.environ); import retrieval_client; "
        "assert dict(os.environ) == before; assert threading.active_count() == 1; "
        "heavy = {'numpy', 'fastapi', 'asyncpg', 'spacy', 'retrieval'} & set(sys.modules); "
        "assert not heavy, heavy"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY",)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def _answer(strategy: str = "hybrid", relevance: str = "high", status: str = "ok") -> dict:
    return {
        "results": [
            {
                "id": "a", "content": "x", "title": None, "memory_type": "semantic",
                "source_type": "unknown", "metadata": {}, "created_at": "2026-01-01T00:00:00Z",
                "score": 0.5, "signals": {}, "sources": ["vector"], "relevance": relevance,
                "reason": "r",
            }
        ],
        "metadata": {
            "strategy_used": strategy, "query_intent": {}, "total_latency_ms": 1.0,
            "search_breakdown": {"vector": {"latency_ms": 1.0, "count": 1, "status": status,
                                            "error": None}},
            "stage_latency_ms": {}, "num_results_before_rerank": 1,
            "num_results_after_rerank": 1, "degraded": [], "run_id": "r", "params": {},
        },
    }  # fmt: skip


def test_a_label_added_by_a_newer_service_is_kept_as_a_string():
    """Closed enums broke an older client on the first value a newer service added."""
    from retrieval_client import Relevance, Strategy

    def newer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=_answer("graph_walk", "certain", "sampled"))

    with RetrievalClient("http://t", transport=httpx.MockTransport(newer)) as c:
        got = c.retrieve("x")
    assert got.results[0].relevance == "certain"
    assert got.metadata.strategy_used == "graph_walk"
    assert got.metadata.search_breakdown["vector"].status == "sampled"

    def known(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=_answer())

    with RetrievalClient("http://t", transport=httpx.MockTransport(known)) as c:
        got = c.retrieve("x")
    assert got.results[0].relevance is Relevance.HIGH
    assert got.metadata.strategy_used is Strategy.HYBRID


@pytest.mark.parametrize(
    "status,body", [(200, b"<html>proxy</html>"), (200, b"[1, 2]"), (503, b"[1]"), (502, b"")]
)
def test_an_answer_that_is_not_the_apis_is_an_api_error(status, body):
    def proxy(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body)

    with (
        RetrievalClient("http://t", retries=0, transport=httpx.MockTransport(proxy)) as c,
        pytest.raises(ApiError) as e,
    ):
        c.retrieve("x")
    assert e.value.status == status
    if status == 200:
        assert isinstance(e.value, BadResponse)


def test_retry_after_as_an_http_date_is_waited_for_with_a_little_jitter(monkeypatch):
    from datetime import UTC, datetime, timedelta
    from email.utils import format_datetime

    from retrieval_client import client as mod

    slept: list[float] = []
    monkeypatch.setattr(mod.time, "sleep", slept.append)
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=4), usegmt=True)
    answers = [httpx.Response(503, headers={"Retry-After": when}, json={"detail": "down"})]

    def service(request: httpx.Request) -> httpx.Response:
        return answers.pop(0) if answers else httpx.Response(200, json=_answer())

    with RetrievalClient("http://t", max_wait_s=30, transport=httpx.MockTransport(service)) as c:
        c.retrieve("x")
    (wait,) = slept
    assert 2.5 <= wait <= 4.5  # the date, seconds from now, and at most a tenth more
    assert mod._retry_after(httpx.Response(503, headers={"Retry-After": "garbage"})) is None


def test_backoff_without_retry_after_is_jittered():
    c = RetrievalClient("http://t", max_wait_s=60)
    waits = {round(c._wait_s(None, 3), 3) for _ in range(20)}
    assert len(waits) > 10 and all(0 <= w <= 4.0 for w in waits)
    c.close()
