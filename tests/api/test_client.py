"""The light client (retrieval_client) against a real `retrieval serve` on the test store: every route, typed
answers, errors by status, retries after Retry-After, jobs, and what is never sent twice."""

from __future__ import annotations

import time
import uuid

import pytest

from retrieval_client import (
    ArchivedOut,
    AsyncRetrievalClient,
    ErasedOut,
    FeedbackOut,
    Forbidden,
    IngestOut,
    InvalidRequest,
    JobOut,
    MemoryOut,
    NotFound,
    RateLimited,
    RetrievalClient,
    RetrieveResponse,
    RunOut,
    Unauthorized,
)
from tests.helpers import KEY_ALL, KEY_TEAM_A, running_server


@pytest.fixture(scope="module")
def server(rt):
    """One service with API keys (every namespace / team-a only)."""
    env = {"RETRIEVAL_API_KEYS": f"{KEY_ALL},{KEY_TEAM_A}:team-a"}
    with running_server(rt.dsn, env) as url:
        yield url


@pytest.fixture(scope="module")
def queuing_server(rt):
    """Every write a job; a namespace's share of processing time almost nothing and no wait."""
    env = {
        "RETRIEVAL_INLINE_EMBED_S": "0",
        "RETRIEVAL_TENANT_CPU_SHARE": "0.0001",
        "RETRIEVAL_TENANT_MAX_WAIT_S": "0",
    }
    with running_server(rt.dsn, env) as url:
        yield url


def _ns() -> str:
    return f"c-{uuid.uuid4().hex[:10]}"


def test_every_route_typed(server):
    ns = _ns()
    with RetrievalClient(server, api_key=KEY_ALL) as c:
        wrote = c.remember(
            [
                {
                    "id": "trip",
                    "content": "来週の金曜に京都へ出張する",
                    "created_at": "2026-03-02T09:00:00+09:00",
                },
                {"id": "gym", "content": "ジムで筋トレを一時間した"},
            ],
            namespace=ns,
        )
        assert isinstance(wrote, IngestOut) and wrote.ids == ["trip", "gym"] and wrote.inserted == 2
        got = c.retrieve("京都への出張はいつ？", namespace=ns, limit=5)
        assert isinstance(got, RetrieveResponse) and got.results[0].id == "trip"
        assert got.results[0].reason and got.metadata is not None and not got.metadata.degraded
        memory = c.get("trip", namespace=ns)
        assert isinstance(memory, MemoryOut) and memory.content.startswith("来週")
        fb = c.feedback("gym", namespace=ns, run_id=got.metadata.run_id, comment="関係ない")
        assert isinstance(fb, FeedbackOut) and fb.id
        run = c.run(got.metadata.run_id)
        assert isinstance(run, RunOut) and run.query == "京都への出張はいつ？"
        kept = c.archive("gym", namespace=ns)
        assert isinstance(kept, ArchivedOut) and kept.archived
        assert c.get("gym", namespace=ns).is_archived
        gone = c.erase("gym", namespace=ns)
        assert isinstance(gone, ErasedOut) and gone.erased == ["gym"]
        with pytest.raises(NotFound):
            c.get("gym", namespace=ns)
        assert c.erase(["gym", "never"], namespace=ns).not_found == ["gym", "never"]
        context = c.retrieve(
            "出張", namespace=ns, options={"context_window": 0, "expand": False}
        ).results
        assert [r.id for r in context] == ["trip"]


def test_errors_by_status(server):
    ns = _ns()
    with RetrievalClient(server, api_key=KEY_ALL, retries=0) as c:
        with pytest.raises(NotFound) as missing:
            c.get("nothing-here", namespace=ns)
        assert missing.value.status == 404
        with pytest.raises(InvalidRequest) as bad:
            c.remember([{"content": "ok"}, {"content": "x", "created_at": "yesterday"}], ns)
        assert "memories.1.created_at" in bad.value.fields
        with pytest.raises(InvalidRequest) as blank:
            c.retrieve("   ", namespace=ns)
        assert blank.value.fields == ["query"]
        with pytest.raises(NotFound):
            c.run(str(uuid.uuid4()))
    with RetrievalClient(server, api_key="not-a-key-000") as c, pytest.raises(Unauthorized):
        c.retrieve("出張", namespace=ns)
    with RetrievalClient(server, api_key=KEY_TEAM_A) as c:
        with pytest.raises(Forbidden) as other:
            c.retrieve("出張", namespace=ns)
        assert other.value.status == 403
        assert c.retrieve("出張", namespace="team-a").results is not None


async def test_async_client_jobs_and_retry_after(queuing_server):
    ns, busy = _ns(), _ns()
    async with AsyncRetrievalClient(queuing_server, retries=2, max_wait_s=0.2) as c:
        queued = await c.remember([{"id": "a", "content": "朝に五キロ走った"}], namespace=ns)
        assert isinstance(queued, JobOut) and queued.ids == ["a"]  # 202: a job
        done = await c.wait_for_job(queued, poll_s=0.2, timeout_s=60)
        assert done.state == "done" and done.report is not None and done.report.inserted == 1
        assert (await c.get("a", namespace=ns)).content == "朝に五キロ走った"
        # Two namespaces served: the share holds. `busy` spends its bucket on a new question,
        # then is refused at once (no wait allowed), is asked again after Retry-After
        # (capped at 0.2 s) twice, and the client raises.
        await c.retrieve("走った距離", namespace=ns)
        await c.retrieve("最初の質問は何だったか", namespace=busy)
        t0 = time.monotonic()
        with pytest.raises(RateLimited) as limited:
            await c.retrieve("二つ目の質問は何だったか", namespace=busy)
        assert limited.value.retry_after_s and limited.value.retry_after_s >= 1
        assert time.monotonic() - t0 >= 0.4  # two waits of 0.2 s: it was tried three times
        assert "share" in str(limited.value.detail)
