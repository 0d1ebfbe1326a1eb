"""Writes that take longer to embed than a request should wait: queued as jobs, answered 202,
written in the background, kept across a restart; and a write deadline that bounds only the
database transaction (before: a batch of 500 conversation turns was a 503 on every retry)."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace
from typing import Any

import httpx
import numpy as np
import pytest

from retrieval.errors import EmbeddingError, Overloaded
from retrieval.ingest.jobs import WriteJobs
from retrieval.ingest.memory_in import parse_items
from retrieval.ingest.writer import Writer
from retrieval.runtime import Runtime
from tests.helpers import app_client

SCOPED = "key-scoped-jobs"


def _runtime(
    rt: Runtime, *, embedder: Any = None, owner: str | None = None, **update: Any
) -> Runtime:
    """The shared runtime with other settings and a queue (and worker) of its own."""
    s = rt.settings.model_copy(update=update)
    writer = Writer.of(s, rt.pool, rt.nlp, embedder or rt.embedder, rt.router)
    if owner is not None:
        writer.jobs.owner = owner
    return replace(rt, settings=s, writer=writer)


async def _until_finished(
    c: httpx.AsyncClient, location: str, *, limit_s: float = 300.0, **kw: Any
) -> dict:
    end = time.monotonic() + limit_s
    while True:
        r = await c.get(location, **kw)
        assert r.status_code == 200, r.text
        job = r.json()
        if job["state"] in ("done", "failed") or time.monotonic() > end:
            return job
        await asyncio.sleep(0.2)


async def _drain(jobs: WriteJobs, most: int = 10) -> None:
    """Claim and write due jobs (this test's and any other's) until none is left."""
    for _ in range(most):
        job = await jobs._claim()
        if job is None:
            return
        await jobs.process(job)


def _turns(n: int, prefix: str = "t") -> list[dict[str, Any]]:
    return [
        {"id": f"{prefix}{i}", "content": f"Day {i}: we walked the dog to the river and talked."}
        for i in range(n)
    ]


async def test_a_batch_over_the_inline_budget_is_a_job_written_in_the_background(rt, ns):
    runtime = _runtime(rt, inline_embed_s=0.0)
    async with app_client(runtime) as c:
        items = [
            {"id": "a", "content": "京都の紅葉を見に行く計画を立てた"},
            {"id": "b", "content": "週末はジムで筋トレをした"},
        ]
        r = await c.post("/v1/memories", json={"namespace": ns, "memories": items})
        assert r.status_code == 202, r.text
        queued = r.json()
        assert queued["state"] in ("queued", "running", "done")
        assert queued["ids"] == ["a", "b"] and queued["received"] == 2
        assert r.headers["location"] == f"/v1/jobs/{queued['id']}?namespace={ns}"
        job = await _until_finished(c, r.headers["location"])
        assert job["state"] == "done", job
        assert job["report"]["inserted"] == 2 and job["report"]["embedded"] == 2
        assert job["error"] is None
        got = await c.post("/v1/retrieve", json={"namespace": ns, "query": "紅葉の旅行"})
        assert got.json()["results"][0]["id"] == "a"
        # Another namespace does not see the job; an id that is no job is not found either.
        other = await c.get(f"/v1/jobs/{queued['id']}", params={"namespace": ns + "-x"})
        assert other.status_code == 404
        assert (await c.get("/v1/jobs/not-a-uuid", params={"namespace": ns})).status_code == 404
        metrics = (await c.get("/metrics")).text
        assert 'retrieval_ingest_jobs_total{event="queued"}' in metrics


async def test_a_scoped_key_reads_no_other_namespaces_job(rt, ns):
    runtime = _runtime(rt, inline_embed_s=0.0, api_keys=f"key-all-jobs,{SCOPED}:{ns}")
    async with app_client(runtime) as c:
        r = await c.post(
            "/v1/memories",
            json={"namespace": ns + "-other", "memories": [{"content": "よそのメモ"}]},
            headers={"Authorization": "Bearer key-all-jobs"},
        )
        assert r.status_code == 202
        job_id = r.json()["id"]
        theirs = await c.get(
            f"/v1/jobs/{job_id}",
            params={"namespace": ns + "-other"},
            headers={"Authorization": f"Bearer {SCOPED}"},
        )
        assert theirs.status_code == 403
        assert job_id not in theirs.text
        mine = await c.get(
            f"/v1/jobs/{job_id}",
            params={"namespace": ns},
            headers={"Authorization": f"Bearer {SCOPED}"},
        )
        assert mine.status_code == 404
        assert ns + "-other" not in mine.text


async def test_the_write_deadline_bounds_the_transaction_not_the_embedding(rt, ns):
    """Forty memories take seconds to embed here; the transaction takes milliseconds. Before, the
    deadline covered both and this write was a 503 every time it was sent."""
    runtime = _runtime(rt, write_timeout_s=0.5, inline_embed_s=600.0)
    text = (
        "東京の下町で育った祖父は、毎朝の散歩の途中で見かけた季節の花の名前を手帳に書き留めていた。"
        * 3
    )
    items = [{"id": f"p{i}", "content": f"{i}: {text}"} for i in range(40)]
    async with app_client(runtime) as c:
        t = time.monotonic()
        r = await c.post("/v1/memories", json={"namespace": ns, "memories": items})
        took = time.monotonic() - t
    assert r.status_code == 200, r.text
    assert r.json()["inserted"] == 40
    print(f"40 memories of {len(text)} characters: {took:.2f} s, deadline 0.5 s")
    assert took > 0.5  # the embedding alone took longer than the deadline


async def test_an_accepted_job_is_written_after_a_restart_and_a_dead_workers_lease(rt, ns):
    """A process that queued jobs and died (no worker ran) or claimed one and died: another
    process writes them; the dead owner cannot finish a job it lost."""
    quiet = _runtime(rt, job_worker=False)
    items = parse_items(_turns(3, "r"))
    first = await quiet.jobs.submit(ns, items, ["r0", "r1", "r2"], 9.0)
    second = await quiet.jobs.submit(ns, parse_items(_turns(1, "s")), ["s0"], 1.0)
    assert first["state"] == second["state"] == "queued"
    await quiet.jobs.run()  # returns at once: this process does not write jobs
    assert (await quiet.jobs.get(ns, first["id"]))["state"] == "queued"

    dead = _runtime(rt, owner="dead-worker")
    claimed = await dead.jobs._claim()
    while claimed is not None and str(claimed["id"]) != first["id"]:  # other tests' jobs
        await dead.jobs.process(claimed)
        claimed = await dead.jobs._claim()
    assert claimed is not None and claimed["attempts"] == 1
    async with rt.pool.acquire() as conn:  # its lease runs out
        await conn.execute(
            "UPDATE ingest_jobs SET lease_until = now() - interval '1 s' WHERE id = $1",
            claimed["id"],
        )
    alive = _runtime(rt, owner="alive-worker")
    await _drain(alive.jobs)
    done = await alive.jobs.get(ns, first["id"])
    assert done["state"] == "done" and done["attempts"] == 2, done
    assert done["report"]["ids"] == ["r0", "r1", "r2"]
    assert (await alive.jobs.get(ns, second["id"]))["state"] == "done"
    await dead.jobs.process(claimed)  # the dead owner's late finish changes nothing
    assert await alive.jobs.get(ns, first["id"]) == done
    async with rt.pool.acquire() as conn:
        stored = await conn.fetchval("SELECT count(*) FROM memories WHERE namespace = $1", ns)
        left = await conn.fetchval(
            "SELECT items FROM ingest_jobs WHERE id = $1", uuid.UUID(first["id"])
        )
    assert stored == 4 and left is None


class _Failing:
    """An embedding provider that is down."""

    name = "intfloat/multilingual-e5-small"
    dim = 384

    def embed_query(self, text: str, *, background: bool = False) -> np.ndarray:
        raise EmbeddingError("endpoint answered 502: <html>upstream secret-host:8080</html>")

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        raise EmbeddingError("endpoint answered 502: <html>upstream secret-host:8080</html>")

    def cost_units(self, text: str) -> int:
        return len(text)


async def test_a_job_failing_for_a_passing_reason_is_tried_again_later(rt, ns):
    down = _runtime(rt, embedder=_Failing(), owner="while-down", job_worker=False)
    job = await down.jobs.submit(ns, parse_items(_turns(2, "f")), ["f0", "f1"], 1.0)
    async with rt.pool.acquire() as conn:  # this test's job first
        await conn.execute(
            "UPDATE ingest_jobs SET created_at = created_at - interval '1 day' WHERE id = $1",
            uuid.UUID(job["id"]),
        )
    claimed = await down.jobs._claim()
    assert str(claimed["id"]) == job["id"]
    await down.jobs.process(claimed)
    waiting = await down.jobs.get(ns, job["id"])
    assert waiting["state"] == "queued" and waiting["attempts"] == 1
    assert waiting["error"] == "the embedding failed; trying again"  # not the provider's text
    async with rt.pool.acquire() as conn:
        due = await conn.fetchval(
            "SELECT not_before > now() FROM ingest_jobs WHERE id = $1", uuid.UUID(job["id"])
        )
        assert due
        await conn.execute(
            "UPDATE ingest_jobs SET not_before = now() WHERE id = $1", uuid.UUID(job["id"])
        )
    up = _runtime(rt, owner="back-up")
    await _drain(up.jobs)
    assert (await up.jobs.get(ns, job["id"]))["state"] == "done"


async def test_a_namespace_with_too_many_open_jobs_gets_429(rt, ns):
    runtime = _runtime(rt, inline_embed_s=0.0, max_open_jobs=1, job_worker=False)
    async with app_client(runtime) as c:
        body = {"namespace": ns, "memories": [{"content": "一件目"}]}
        assert (await c.post("/v1/memories", json=body)).status_code == 202
        r = await c.post("/v1/memories", json=body)
        assert r.status_code == 429, r.text
        assert r.headers["retry-after"]
        assert "write jobs not finished" in r.json()["detail"]
        # Another namespace is not held back by this one's queue.
        other = {"namespace": ns + "-b", "memories": [{"content": "別の名前空間"}]}
        assert (await c.post("/v1/memories", json=other)).status_code == 202
    with pytest.raises(Overloaded):
        await runtime.jobs.submit(ns, parse_items([{"content": "三件目"}]), ["x"], 1.0)


async def test_a_batch_of_1000_turns_with_default_settings_is_written(rt, ns):
    """The documented batch limit, the real embedder, the default deadlines: accepted and
    written (inline or as a job, as the measured embedding rate decides)."""
    items = _turns(1000, "k")
    async with app_client(_runtime(rt)) as c:
        t = time.monotonic()
        r = await c.post("/v1/memories", json={"namespace": ns, "memories": items}, timeout=600)
        assert r.status_code in (200, 202), r.text
        answered = time.monotonic() - t
        if r.status_code == 202:
            job = await _until_finished(c, r.headers["location"], limit_s=600)
            assert job["state"] == "done", job
            report = job["report"]
        else:
            report = r.json()
        took = time.monotonic() - t
    print(
        f"1000 short turns: answered {r.status_code} in {answered:.1f} s, written in "
        f"{took:.1f} s ({1000 / took:.0f} memories/s)"
    )
    assert report["inserted"] == 1000
    async with rt.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM memories WHERE namespace = $1", ns) == 1000


async def test_the_worker_outlives_a_job_it_could_not_finish(rt, ns):
    """A failure while marking a job (the database gone at that moment) must not end the
    worker: the next job is still written."""
    runtime = _runtime(rt, owner="sturdy")
    jobs = runtime.jobs
    real = jobs.process
    seen: list[str] = []

    async def flaky(job):
        seen.append(str(job["id"]))
        if len(seen) == 1:
            raise ConnectionResetError("the database went away")
        await real(job)
        if len(seen) >= 2:
            worker.cancel()

    jobs.process = flaky  # type: ignore[method-assign]
    await jobs.submit(ns, parse_items(_turns(1, "a")), ["a0"], 0.1)
    await jobs.submit(ns, parse_items(_turns(1, "b")), ["b0"], 0.1)
    worker = asyncio.ensure_future(jobs.run())
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(worker, 120)
    assert len(seen) >= 2


async def test_one_tenants_long_queue_does_not_hold_anothers_job(rt, ns):
    """Before: jobs were taken oldest first, so one tenant's queue of big batches held every
    other tenant's job behind all of it."""
    quiet = _runtime(rt, job_worker=False, max_open_jobs=10)
    busy, other = ns + "-busy", ns + "-one"
    mine = [
        (await quiet.jobs.submit(busy, parse_items(_turns(1, f"q{i}")), [f"q{i}"], 0.1))["id"]
        for i in range(3)
    ]
    theirs = (await quiet.jobs.submit(other, parse_items(_turns(1, "o")), ["o0"], 0.1))["id"]
    worker = _runtime(rt, owner="fair")
    order: list[str] = []
    for _ in range(40):
        job = await worker.jobs._claim()
        if job is None:
            break
        order.append(str(job["id"]))
        await worker.jobs.process(job)
    assert set(mine) | {theirs} <= set(order)
    # After at most one of the busy tenant's jobs, the other tenant's single job.
    assert order.index(theirs) < order.index(mine[1]), order


async def test_an_undated_memory_is_dated_when_its_job_was_accepted(rt, ns):
    """Before: a memory sent without created_at in a job was dated when the job ran (18-33 s
    later, 112-149 s after a crash): the column's default fired at write time."""
    from datetime import UTC, datetime

    quiet = _runtime(rt, job_worker=False)
    job = await quiet.jobs.submit(
        ns, parse_items([{"id": "u", "content": "日付のないメモ"}]), ["u"], 1.0
    )
    acknowledged = datetime.now(UTC)
    await asyncio.sleep(1.5)  # the worker gets round to it later
    worker = _runtime(rt, owner="later")
    await _drain(worker.jobs, most=40)
    assert (await worker.jobs.get(ns, job["id"]))["state"] == "done"
    async with rt.pool.acquire() as conn:
        stored = await conn.fetchval(
            "SELECT created_at FROM memories WHERE namespace = $1 AND external_id = 'u'", ns
        )
    assert stored <= acknowledged and stored == datetime.fromisoformat(str(job["created_at"]))


async def test_a_restarted_service_takes_up_its_dead_runs_jobs_at_once(rt, ns):
    """Before: after a crash the job said `running` for its whole lease (~60 s) before another
    claim. A worker names itself by host, pid and the process's start time; a service that
    starts again on the host sees that run is gone and hands its jobs back at once."""
    import subprocess
    import sys

    from retrieval.ingest.jobs import alive, owner_name

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    host, _, started, tag = owner_name().rsplit(":", 3)
    dead = f"{host}:{gone.pid}:{started}:{tag}"
    assert alive(owner_name()) and not alive(dead)
    quiet = _runtime(rt, job_worker=False)
    job = await quiet.jobs.submit(ns, parse_items(_turns(1, "d")), ["d0"], 1.0)
    async with rt.pool.acquire() as conn:  # claimed by the dead run, its lease far from out
        await conn.execute(
            "UPDATE ingest_jobs SET state = 'running', owner = $2, attempts = 1, "
            "lease_until = now() + interval '1 hour' WHERE id = $1",
            uuid.UUID(job["id"]),
            dead,
        )
    restarted = _runtime(rt)
    assert await restarted.jobs.take_up_dead() >= 1
    now = await restarted.jobs.get(ns, job["id"])
    assert now["state"] == "queued" and "taken up again" in now["error"]
    await _drain(restarted.jobs, most=40)
    assert (await restarted.jobs.get(ns, job["id"]))["state"] == "done"
