"""Memories: store (POST), read and archive (GET/DELETE), and feedback."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from fastapi.responses import JSONResponse

from db import memories
from retrieval.api.deps import CallerDep, RuntimeDep
from retrieval.api.items import MAX_ID_CHARS
from retrieval.api.schemas import (
    LSN_PATTERN,
    NOT_FOUND,
    QUEUED,
    FeedbackIn,
    MemoriesIn,
)
from retrieval.errors import NotFound
from retrieval.validation import MAX_NAMESPACE_CHARS, NAMESPACE_PATTERN, check_id
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
    items = [m.item() for m in body.memories]
    done = await rt.writer.store(items, body.namespace, caller.tenant(body.namespace))
    if done.job is None:
        assert done.report is not None
        return done.report.to_json()
    job = JobOut.model_validate(done.job)
    return JSONResponse(
        job.model_dump(mode="json"),
        status_code=202,
        headers={"Location": f"/v1/jobs/{job.id}?namespace={body.namespace}"},
    )


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
    row = await rt.router.read(
        namespace,
        memories.get_memory,
        namespace,
        _path_id(memory_id),
        timeout=rt.settings.write_timeout_s,
        after_lsn=after_lsn,
    )
    if row is None:
        raise NotFound(f"no memory {memory_id!r} in namespace {namespace!r}")
    return row


@router.delete("/v1/memories/{memory_id}", response_model=ArchivedOut, responses=NOT_FOUND)
async def archive_memory(
    memory_id: MemoryIdPath,
    rt: RuntimeDep,
    caller: CallerDep,
    namespace: NamespaceQuery = "default",
) -> dict[str, Any]:
    """Archive a memory: it is kept but never returned by a search again."""
    caller.check(namespace)
    await rt.writer.archive(namespace, _path_id(memory_id))
    return {"id": memory_id, "namespace": namespace, "archived": True}


@router.post("/v1/feedback", response_model=FeedbackOut, responses=NOT_FOUND)
async def feedback(body: FeedbackIn, rt: RuntimeDep, caller: CallerDep) -> dict[str, Any]:
    """Negative feedback makes a memory unsearchable for every future retrieval."""
    caller.check(body.namespace)
    await rt.writer.feedback(
        body.namespace,
        body.memory_id,
        negative=body.negative,
        run_id=body.run_id,
        comment=body.comment,
    )
    return {"id": body.memory_id, "namespace": body.namespace, "searchable": not body.negative}
