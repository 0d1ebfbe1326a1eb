"""POST /v1/retrieve and GET /v1/runs/{run_id}."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request

from db.run_log import get_run
from retrieval.api.access import REQUEST_ID, note
from retrieval.api.deps import CallerDep, RuntimeDep
from retrieval.api.schemas import (
    NOT_FOUND,
    OVER_SHARE,
    UUID_PATTERN,
    RetrieveRequest,
)
from retrieval.errors import NotFound
from retrieval.models import Clock, RetrievalOptions, Source, TimeRange
from retrieval_client.models import RetrieveResponse, RunOut

router = APIRouter(tags=["retrieval"])


@router.post("/v1/retrieve", response_model=RetrieveResponse, responses=OVER_SHARE)
async def retrieve(
    body: RetrieveRequest, request: Request, rt: RuntimeDep, caller: CallerDep
) -> RetrieveResponse:
    """Find the memories that answer `query`, best first, each with a reason."""
    caller.check(body.namespace)
    tenant = caller.tenant(body.namespace)
    note(request, tenant=tenant)
    o = body.options
    tr = o.time_range
    opts = RetrievalOptions(
        namespace=body.namespace,
        force_strategy=o.force_strategy,
        limit=o.limit,
        time_range=TimeRange(tr.start, tr.end, None, "request") if tr else None,
        time_clock=Clock(tr.clock) if tr else Clock.WRITTEN,
        memory_types=tuple(o.memory_types),
        source_types=tuple(o.source_types),
        now=o.now,
        timezone=o.timezone,
        recent_conversation=tuple((msg.role, msg.content) for msg in body.recent_conversation),
        include_metadata_details=o.include_metadata_details,
        expand=o.expand,
        seed_ids=tuple(msg.memory_id for msg in body.recent_conversation if msg.memory_id),
        diversify_by=o.diversify_by,
        per_bucket=o.per_bucket if o.diversify_by else 0,
        add_sources=tuple(Source(x) for x in o.add_sources),
        context_window=o.context_window,
        max_chars=o.budget_chars(),
        after_lsn=o.after_lsn,
        tenant=tenant,
        request_id=REQUEST_ID.get(),
    )
    rt.orchestrator.validate(body.query, opts)  # refused before it waits for its share
    advance = await rt.shares.admit(tenant)
    cost = advance
    try:
        got = await rt.orchestrator.retrieve(body.query, opts)
        cost = got.metadata.cost_s
        md = got.metadata
        note(request, strategy=md.strategy_used.value, degraded=md.degraded)
    finally:
        rt.shares.settle(tenant, advance, cost)
    return RetrieveResponse.model_validate(got)


@router.get("/v1/runs/{run_id}", response_model=RunOut, responses=NOT_FOUND)
async def run(
    run_id: Annotated[str, Path(pattern=UUID_PATTERN)], rt: RuntimeDep, caller: CallerDep
) -> dict[str, Any]:
    """A logged retrieval run: plan, candidates, selection, latencies (of the key's namespaces:
    another namespace's run is not found, and its name is never read)."""
    got = await get_run(
        rt.pool, run_id, namespaces=caller.scope, timeout_s=rt.settings.write_timeout_s
    )
    if got is None:
        raise NotFound(f"no run {run_id}")
    return got
