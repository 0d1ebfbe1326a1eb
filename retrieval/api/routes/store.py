"""Memories: store (POST), read, list, archive, erase (one, many, a whole namespace), feedback."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, AwareDatetime, BaseModel

from db import memories
from db.memories import Page
from retrieval.analysis.facts import one_at_a_time
from retrieval.api.deps import CallerDep, RuntimeDep
from retrieval.api.pages import make_cursor, read_cursor
from retrieval.api.schemas import (
    LSN_PATTERN,
    MAX_PAGE,
    NOT_FOUND,
    QUEUED,
    EraseIn,
    FeedbackIn,
    MemoriesIn,
)
from retrieval.errors import NotFound
from retrieval.ingest.memory_in import MAX_ID_CHARS
from retrieval.validation import (
    MAX_NAMESPACE_CHARS,
    NAMESPACE_PATTERN,
    RequestLimits,
    check_batch,
    check_id,
    check_text,
)
from retrieval_client.models import (
    ArchivedOut,
    ErasedOut,
    FeedbackOut,
    IngestOut,
    JobOut,
    MemoryOut,
    MemoryPage,
    PurgeOut,
)

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


def _accepted(work: BaseModel, location: str) -> JSONResponse:
    """202 for work that goes on after the answer: its state now, and where to follow it."""
    return JSONResponse(
        work.model_dump(mode="json"), status_code=202, headers={"Location": location}
    )


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
    return _accepted(job, f"/v1/jobs/{job.id}?namespace={body.namespace}")


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
    return _as_shown(row)


@router.delete("/v1/memories/{memory_id}", response_model=ErasedOut, responses=NOT_FOUND)
async def erase_memory(
    memory_id: MemoryIdPath,
    rt: RuntimeDep,
    caller: CallerDep,
    namespace: NamespaceQuery = "default",
) -> dict[str, Any]:
    """Erase a memory for real: its row and everything derived from it (vectors, passages,
    terms, names), the links to it, its feedback and the run-log entries that returned or quote
    it, and what every worker's caches hold of it (docs/api.md). To keep a memory but never
    find it again, archive it (POST /v1/memories/{id}/archive)."""
    caller.check(namespace)
    gone = await rt.writer.erase(namespace, [_path_id(memory_id)])
    if not gone.external_ids:
        raise NotFound(f"no memory {memory_id!r} in namespace {namespace!r}")
    return {"namespace": namespace, "erased": gone.external_ids, "not_found": []}


@router.post("/v1/memories/erase", response_model=ErasedOut)
async def erase_memories(body: EraseIn, rt: RuntimeDep, caller: CallerDep) -> dict[str, Any]:
    """Erase the memories named (at most RETRIEVAL_MAX_BATCH), all in one transaction, as
    DELETE /v1/memories/{id} erases one; ids the namespace does not hold are listed in
    `not_found` (erasing again is safe)."""
    caller.check(body.namespace)
    check_batch(body.ids, RequestLimits.of(rt.settings).max_batch)
    gone = await rt.writer.erase(body.namespace, body.ids)
    erased = set(gone.external_ids)
    missing = [x for x in body.ids if x not in erased]
    return {"namespace": body.namespace, "erased": gone.external_ids, "not_found": missing}


@router.post("/v1/memories/{memory_id}/archive", response_model=ArchivedOut, responses=NOT_FOUND)
async def archive_memory(
    memory_id: MemoryIdPath,
    rt: RuntimeDep,
    caller: CallerDep,
    namespace: NamespaceQuery = "default",
) -> dict[str, Any]:
    """Archive a memory: it is kept (GET and listings with include_archived show it) but never
    returned by a search again."""
    caller.check(namespace)
    await rt.writer.archive(namespace, _path_id(memory_id))
    return {"id": memory_id, "namespace": namespace, "archived": True}


@router.get("/v1/memories", response_model=MemoryPage)
async def list_memories(
    rt: RuntimeDep,
    caller: CallerDep,
    namespace: NamespaceQuery = "default",
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    cursor: Annotated[str | None, Query(min_length=1, max_length=4096)] = None,
    thread: Annotated[
        str | None, Query(min_length=1, max_length=256), AfterValidator(check_text)
    ] = None,
    since: Annotated[AwareDatetime | None, Query()] = None,
    until: Annotated[AwareDatetime | None, Query()] = None,
    include_archived: bool = False,
) -> dict[str, Any]:
    """A page of the namespace's memories in id order, each with its thread and links; give
    `next_cursor` back as `cursor` for the next. A memory written while a listing pages through
    is listed if its id comes after the page in hand; none is listed twice."""
    caller.check(namespace)
    page = Page(thread=thread, since=since, until=until, include_archived=include_archived)
    if cursor is not None:
        page = replace(page, after=read_cursor(cursor, namespace, page))
    rows = await rt.router.read(
        namespace,
        memories.list_memories,
        namespace,
        page,
        limit + 1,
        timeout=rt.settings.write_timeout_s,
    )
    more = len(rows) > limit
    rows = rows[:limit]
    nxt = make_cursor(namespace, page, rows[-1]["id"]) if more else None
    return {"memories": [_as_shown(r) for r in rows], "next_cursor": nxt}


def _as_shown(row: dict[str, Any]) -> dict[str, Any]:
    """A stored memory as shown: a newer statement of an attribute people hold several of at
    once (a medicine, an instrument) does not supersede it."""
    if row["fact"] is not None and not one_at_a_time(row["fact"]):
        return {**row, "superseded_by": None}
    return row


@router.post(
    "/v1/namespaces/{namespace}/purge",
    response_model=PurgeOut,
    status_code=202,
    responses=NOT_FOUND,
)
async def purge_namespace(
    namespace: Annotated[
        str, Path(min_length=1, max_length=MAX_NAMESPACE_CHARS, pattern=NAMESPACE_PATTERN)
    ],
    rt: RuntimeDep,
    caller: CallerDep,
) -> JSONResponse:
    """Erase everything the namespace holds, as erasing one memory does, then VACUUM: a job
    (202; follow Location). Asked again while it runs, it is the same job."""
    caller.check(namespace)
    assert rt.writer.purges is not None
    purge = PurgeOut.model_validate(
        await rt.writer.purges.start(namespace, caller.tenant(namespace))
    )
    return _accepted(purge, f"/v1/purges/{purge.id}?namespace={namespace}")


@router.get("/v1/purges/{purge_id}", response_model=PurgeOut, responses=NOT_FOUND)
async def get_purge(
    purge_id: Annotated[str, Path(min_length=1, max_length=64)],
    rt: RuntimeDep,
    caller: CallerDep,
    namespace: NamespaceQuery = "default",
) -> dict[str, Any]:
    """A purge of this namespace: running (with how many of `total` are erased), done or failed."""
    caller.check(namespace)
    assert rt.writer.purges is not None
    return await rt.writer.purges.get(namespace, purge_id)


@router.post("/v1/feedback", response_model=FeedbackOut, responses=NOT_FOUND)
async def feedback(body: FeedbackIn, rt: RuntimeDep, caller: CallerDep) -> dict[str, Any]:
    """Negative feedback takes a memory out of every future retrieval; positive feedback puts
    it back. The answer says what the store now does (`searchable`)."""
    caller.check(body.namespace)
    searchable = await rt.writer.feedback(
        body.namespace,
        body.memory_id,
        negative=body.negative,
        run_id=body.run_id,
        comment=body.comment,
    )
    return {"id": body.memory_id, "namespace": body.namespace, "searchable": searchable}
