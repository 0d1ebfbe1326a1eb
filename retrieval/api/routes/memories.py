"""Memories: store (POST), read and archive (GET/DELETE), and feedback."""

from __future__ import annotations

import asyncio
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from fastapi.responses import JSONResponse

from db import store as q
from db.session import session
from retrieval import metrics as m
from retrieval.api.deps import CallerDep, RuntimeDep
from retrieval.api.schemas import (
    LSN_PATTERN,
    NOT_FOUND,
    QUEUED,
    FeedbackIn,
    MemoriesIn,
)
from retrieval.errors import NotFound
from retrieval.ingest.items import MAX_ID_CHARS
from retrieval.ingest.write import assign_ids, embedding_load, ingest, stored_texts, to_embed
from retrieval.validation import (
    MAX_NAMESPACE_CHARS,
    NAMESPACE_PATTERN,
    RequestLimits,
    check_batch,
    check_id,
)
from retrieval_client.models import ArchivedOut, FeedbackOut, IngestOut, JobOut, MemoryOut

router = APIRouter(tags=["memories"])

MemoryIdPath = Annotated[str, Path(min_length=1, max_length=MAX_ID_CHARS)]
NamespaceQuery = Annotated[
    str, Query(min_length=1, max_length=MAX_NAMESPACE_CHARS, pattern=NAMESPACE_PATTERN)
]


def _path_id(memory_id: str) -> str:
    try:
        return check_id(memory_id)
    except ValueError as exc:
        raise NotFound(f"no memory {memory_id!r}: {exc}") from None


@router.post("/v1/memories", response_model=IngestOut, responses=QUEUED)
async def add_memories(body: MemoriesIn, rt: RuntimeDep, caller: CallerDep) -> Any:
    """Store memories (idempotent on `id`); a batch with any invalid item is rejected whole.

    Written before the answer (200) when embedding it should take at most
    RETRIEVAL_INLINE_EMBED_S here; else stored as a job and answered 202 (see GET /v1/jobs).
    The write deadline bounds the database transaction, not the embedding."""
    caller.check(body.namespace)
    check_batch([it.id for it in body.memories], RequestLimits.of(rt.settings))
    items, namespace = body.memories, body.namespace
    tenant = caller.tenant(namespace)
    timeout = rt.settings.write_timeout_s
    ids = assign_ids(items)
    old = await stored_texts(rt.pool, namespace, ids, timeout_s=timeout)
    texts = embedding_load(items, to_embed(items, ids, old))
    estimate = await asyncio.to_thread(rt.meter.estimate_s, texts) if texts else 0.0
    if estimate > rt.settings.inline_embed_s:
        queued = await rt.jobs.submit(namespace, items, ids, estimate, tenant=tenant)
        job = JobOut.model_validate(queued)
        m.INGEST_JOBS.labels("queued").inc()
        return JSONResponse(
            job.model_dump(mode="json"),
            status_code=202,
            headers={"Location": f"/v1/jobs/{job.id}?namespace={namespace}"},
        )
    # A write's embedding is the tenant's processing time too: it waits for its share.
    advance = await rt.budget.admit(tenant)
    try:
        rep = await ingest(
            rt.pool,
            rt.nlp,
            rt.embedder,
            items,
            namespace=namespace,
            batch_size=rt.settings.embed_batch_size,
            timeout_s=timeout,
            ids=ids,
            old=old,
            meter=rt.meter,
        )
    finally:
        rt.budget.settle(tenant, advance, estimate)
    m.INGESTED.labels("insert").inc(rep.inserted)
    m.INGESTED.labels("update").inc(rep.updated)
    # With replicas: the primary's WAL position after the write; this namespace's reads wait
    # for a replica that has replayed it (read-your-writes).
    return {**rep.to_json(), "lsn": await rt.router.note_write(namespace)}


@router.get("/v1/jobs/{job_id}", response_model=JobOut, responses=NOT_FOUND)
async def get_job(
    job_id: Annotated[str, Path(min_length=1, max_length=64)],
    rt: RuntimeDep,
    caller: CallerDep,
    namespace: NamespaceQuery = "default",
) -> dict[str, Any]:
    """A write job of this namespace: queued, running, done (with what was written) or failed."""
    caller.check(namespace)
    job = await rt.jobs.get(namespace, job_id)
    if job is None:
        raise NotFound(f"no write job {job_id!r} in namespace {namespace!r}")
    return job


@router.get("/v1/memories/{memory_id}", response_model=MemoryOut, responses=NOT_FOUND)
async def get_memory(
    memory_id: MemoryIdPath,
    rt: RuntimeDep,
    caller: CallerDep,
    namespace: NamespaceQuery = "default",
    after_lsn: Annotated[str | None, Query(pattern=LSN_PATTERN)] = None,
) -> dict[str, Any]:
    """One memory, archived or not (`after_lsn`: read your writes, as in POST /v1/retrieve)."""
    caller.check(namespace)
    row = await rt.router.fetchrow(
        namespace,
        q.GET_MEMORY,
        namespace,
        _path_id(memory_id),
        timeout=rt.settings.write_timeout_s,
        after_lsn=after_lsn,
    )
    if row is None:
        raise NotFound(f"no memory {memory_id!r} in namespace {namespace!r}")
    out = dict(row)
    out["id"] = out.pop("external_id")
    return out


@router.delete("/v1/memories/{memory_id}", response_model=ArchivedOut, responses=NOT_FOUND)
async def archive_memory(
    memory_id: MemoryIdPath,
    rt: RuntimeDep,
    caller: CallerDep,
    namespace: NamespaceQuery = "default",
) -> dict[str, Any]:
    """Archive a memory: it is kept but never returned by a search again."""
    caller.check(namespace)
    async with session(rt.pool, rt.settings.write_timeout_s) as conn:
        got = await conn.fetchval(
            q.ARCHIVE_MEMORY, namespace, _path_id(memory_id), timeout=rt.settings.write_timeout_s
        )
    if got is None:
        raise NotFound(f"no memory {memory_id!r} in namespace {namespace!r}")
    await rt.router.note_write(namespace)
    return {"id": memory_id, "namespace": namespace, "archived": True}


@router.post("/v1/feedback", response_model=FeedbackOut, responses=NOT_FOUND)
async def feedback(body: FeedbackIn, rt: RuntimeDep, caller: CallerDep) -> dict[str, Any]:
    """Negative feedback makes a memory unsearchable for every future retrieval."""
    caller.check(body.namespace)
    timeout = rt.settings.write_timeout_s
    async with session(rt.pool, timeout, transaction="write") as conn:
        sql = q.MARK_UNSEARCHABLE if body.negative else q.MEMORY_EXISTS
        got = await conn.fetchval(sql, body.namespace, body.memory_id, timeout=timeout)
        if got is None:
            raise NotFound(f"no memory {body.memory_id!r} in namespace {body.namespace!r}")
        stored = await conn.fetchval(
            q.INSERT_FEEDBACK,
            uuid.UUID(body.run_id) if body.run_id else None,
            body.namespace,
            body.memory_id,
            body.negative,
            body.comment,
            timeout=timeout,
        )
        if stored is None:  # rolled back with the transaction: nothing marked
            raise NotFound(f"no run {body.run_id} in namespace {body.namespace!r}")
    await rt.router.note_write(body.namespace)
    m.FEEDBACK.labels("negative" if body.negative else "positive").inc()
    return {"id": body.memory_id, "namespace": body.namespace, "searchable": not body.negative}
