"""Operations: liveness, readiness, Prometheus metrics (no auth: probes and scrapers)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel

from db import migrate as migrations
from db.session import session
from retrieval import metrics as m
from retrieval.runtime import Runtime

router = APIRouter(tags=["ops"])

# Readiness answers within this, whatever the database's state.
READY_TIMEOUT_S = 2.0


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is alive."""
    return {"status": "ok"}


class ReadyOut(BaseModel):
    ready: bool
    models: bool
    database: bool | None = None
    migrations_pending: list[int] | None = None
    error: str | None = None
    # Each read replica: healthy, lag, last error. A replica down never makes the service unready.
    replicas: list[dict[str, Any]] | None = None
    # What this server lacks (pg_trgm) and what that costs; the service runs without it.
    missing: dict[str, str] | None = None


_READY_RESPONSES: dict[int | str, dict[str, Any]] = {
    503: {"model": ReadyOut, "description": "not ready"}
}
_METRICS_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "content": {"text/plain": {"schema": {"type": "string"}}},
        "description": "Prometheus text format",
    }
}


@router.get("/readyz", response_model=ReadyOut, responses=_READY_RESPONSES)
async def readyz(request: Request) -> JSONResponse:
    """Database reachable, migrations applied, models loaded."""
    rt: Runtime | None = getattr(request.app.state, "runtime", None)
    checks: dict[str, Any] = {"models": rt is not None}
    if rt is not None:
        try:
            async with session(rt.pool, READY_TIMEOUT_S) as conn:
                # Reading what is pending is the round trip that says the database answers.
                pending = await migrations.pending(conn, timeout_s=READY_TIMEOUT_S)
            checks["database"] = True
            checks["migrations_pending"] = pending
        except Exception as exc:  # readiness must answer, not raise
            checks["database"] = False
            checks["error"] = type(exc).__name__
    if rt is not None and rt.router.replicas:
        checks["replicas"] = rt.router.status()
    if rt is not None and rt.missing:
        checks["missing"] = rt.missing
    ok = bool(
        checks.get("models") and checks.get("database") and not checks.get("migrations_pending")
    )
    m.READY.set(1 if ok else 0)
    return JSONResponse({"ready": ok, **checks}, status_code=200 if ok else 503)


@router.get("/metrics", response_class=Response, responses=_METRICS_RESPONSES)
async def metrics() -> Response:
    """Prometheus exposition."""
    # With several workers, the sum over all of them, whichever answers the scrape.
    return Response(generate_latest(m.exposition_registry()), media_type=CONTENT_TYPE_LATEST)
