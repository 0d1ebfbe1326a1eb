"""Memories: store (POST), read and archive (GET/DELETE), and feedback."""

from __future__ import annotations

import asyncio
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query

from db import store as q
from retrieval import metrics as m
from retrieval.api.deps import RuntimeDep, ScopeDep, check_scope
from retrieval.api.schemas import (
    NOT_FOUND,
    ArchivedOut,
    FeedbackIn,
    FeedbackOut,
    IngestOut,
    MemoriesIn,
    MemoryOut,
    check_limits,
)
from retrieval.errors import NotFound, StoreUnavailable
from retrieval.ingest import MAX_ID_CHARS, ingest
from retrieval.validation import MAX_NAMESPACE_CHARS, NAMESPACE_PATTERN, check_id

router = APIRouter(tags=["memories"])

MemoryIdPath = Annotated[str, Path(min_length=1, max_length=MAX_ID_CHARS)]
NamespaceQuery = Annotated[
    str, Query(min_length=1, max_length=MAX_NAMESPACE_CHARS, pattern=NAMESPACE_PATTERN)
]


async def _within(seconds: float, coro: Any) -> Any:
    """A write that has not finished by its deadline answers 503 (and is rolled back)."""
    try:
        return await asyncio.wait_for(coro, seconds)
    except TimeoutError as exc:
        raise StoreUnavailable(
            f"the database did not finish the write within {seconds:g} s"
        ) from exc


def _path_id(memory_id: str) -> str:
    try:
        return check_id(memory_id)
    except ValueError as exc:
        raise NotFound(f"no memory {memory_id!r}: {exc}") from None


@router.post("/v1/memories", response_model=IngestOut)
async def add_memories(body: MemoriesIn, rt: RuntimeDep, scope: ScopeDep) -> dict[str, Any]:
    """Store memories (idempotent on `id`); a batch with any invalid item is rejected whole."""
    check_scope(scope, body.namespace)
    check_limits(rt.settings, body)
    timeout = rt.settings.write_timeout_s
    rep = await _within(
        timeout,
        ingest(
            rt.pool,
            rt.nlp,
            rt.embedder,
            body.memories,
            namespace=body.namespace,
            batch_size=rt.settings.embed_batch_size,
            timeout_s=timeout,
        ),
    )
    m.INGESTED.labels("insert").inc(rep.inserted)
    m.INGESTED.labels("update").inc(rep.updated)
    # With replicas: the primary's WAL position after the write; this namespace's reads wait
    # for a replica that has replayed it (read-your-writes).
    return {**rep.to_json(), "lsn": await rt.router.note_write(body.namespace)}


@router.get("/v1/memories/{memory_id}", response_model=MemoryOut, responses=NOT_FOUND)
async def get_memory(
    memory_id: MemoryIdPath, rt: RuntimeDep, scope: ScopeDep, namespace: NamespaceQuery = "default"
) -> dict[str, Any]:
    """One memory, archived or not."""
    check_scope(scope, namespace)
    row = await rt.router.fetchrow(namespace, q.GET_MEMORY, namespace, _path_id(memory_id))
    if row is None:
        raise NotFound(f"no memory {memory_id!r} in namespace {namespace!r}")
    out = dict(row)
    out["id"] = out.pop("external_id")
    return out


@router.delete("/v1/memories/{memory_id}", response_model=ArchivedOut, responses=NOT_FOUND)
async def archive_memory(
    memory_id: MemoryIdPath, rt: RuntimeDep, scope: ScopeDep, namespace: NamespaceQuery = "default"
) -> dict[str, Any]:
    """Archive a memory: it is kept but never returned by a search again."""
    check_scope(scope, namespace)
    async with rt.pool.acquire() as conn:
        got = await conn.fetchval(
            q.ARCHIVE_MEMORY, namespace, _path_id(memory_id), timeout=rt.settings.write_timeout_s
        )
    if got is None:
        raise NotFound(f"no memory {memory_id!r} in namespace {namespace!r}")
    await rt.router.note_write(namespace)
    return {"id": memory_id, "namespace": namespace, "archived": True}


@router.post("/v1/feedback", response_model=FeedbackOut, responses=NOT_FOUND)
async def feedback(body: FeedbackIn, rt: RuntimeDep, scope: ScopeDep) -> dict[str, Any]:
    """Negative feedback makes a memory unsearchable for every future retrieval."""
    check_scope(scope, body.namespace)
    timeout = rt.settings.write_timeout_s
    async with rt.pool.acquire(timeout=timeout) as conn, conn.transaction():
        sql = q.MARK_UNSEARCHABLE if body.negative else q.MEMORY_EXISTS
        got = await conn.fetchval(sql, body.namespace, body.memory_id, timeout=timeout)
        if got is None:
            raise NotFound(f"no memory {body.memory_id!r} in namespace {body.namespace!r}")
        await conn.execute(
            q.INSERT_FEEDBACK,
            uuid.UUID(body.run_id) if body.run_id else None,
            body.namespace,
            body.memory_id,
            body.negative,
            body.comment,
            timeout=timeout,
        )
    await rt.router.note_write(body.namespace)
    m.FEEDBACK.labels("negative" if body.negative else "positive").inc()
    return {"id": body.memory_id, "namespace": body.namespace, "searchable": not body.negative}
