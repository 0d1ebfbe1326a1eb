"""HTTP API for the context assembler (FastAPI; OpenAPI at /docs)."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Annotated, Any, Literal

import asyncpg
from fastapi import Depends, FastAPI, Header, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, Field, field_validator, model_validator

from db import migrate as migrations
from db import queries as q
from db.runs import get_run
from retrieval import metrics as m
from retrieval.config import Settings
from retrieval.errors import (
    EmbeddingModelMismatch,
    InvalidInput,
    NotFound,
    RetrievalError,
    StoreUnavailable,
)
from retrieval.ingest import MemoryIn, ingest
from retrieval.models import RetrievalOptions, Source, Strategy, TimeRange
from retrieval.runtime import Runtime, open_runtime

logger = logging.getLogger(__name__)

NamespaceStr = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:\-]+$")]
MemoryIdPath = Annotated[str, Path(min_length=1, max_length=512)]
NamespaceQuery = Annotated[str, Query(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:\-]+$")]


class Message(BaseModel):
    role: Literal["user", "assistant", "system"]
    content: str = Field(max_length=20_000)


class TimeRangeIn(BaseModel):
    start: datetime | None = None
    end: datetime | None = None

    @model_validator(mode="after")
    def _ordered(self) -> TimeRangeIn:
        for name in ("start", "end"):
            v = getattr(self, name)
            if v is not None and v.tzinfo is None:
                raise ValueError(f"{name} must include a UTC offset")
        if self.start and self.end and self.start >= self.end:
            raise ValueError("start must be before end")
        if self.start is None and self.end is None:
            raise ValueError("give start, end or both")
        return self


class RetrieveOptionsIn(BaseModel):
    force_strategy: Strategy | None = None
    limit: int = Field(default=10, ge=1, le=100)
    time_range: TimeRangeIn | None = Field(default=None, description="Hard filter on created_at.")
    memory_types: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(default_factory=list, max_length=20)
    source_types: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(default_factory=list, max_length=20)
    include_metadata_details: bool = True
    now: datetime | None = Field(default=None, description="Resolve time words against this instant.")


class RetrieveRequest(BaseModel):
    query: str = Field(min_length=1, max_length=2000)
    namespace: NamespaceStr = "default"
    recent_conversation: list[Message] = Field(default_factory=list, max_length=50)
    options: RetrieveOptionsIn = Field(default_factory=RetrieveOptionsIn)

    @field_validator("query")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty or whitespace")
        return v


class ResultOut(BaseModel):
    id: str
    content: str
    title: str | None
    memory_type: str
    source_type: str
    metadata: dict[str, Any]
    created_at: datetime
    score: float
    signals: dict[str, float]
    sources: list[str]
    relevance: str = Field(description="high | medium | outside_window")
    reason: str


class SourceOut(BaseModel):
    latency_ms: float
    count: int
    status: str = Field(description="ok | timeout | error")
    error: str | None


class MetadataOut(BaseModel):
    strategy_used: Strategy
    query_intent: dict[str, Any]
    total_latency_ms: float
    search_breakdown: dict[str, SourceOut]
    stage_latency_ms: dict[str, float]
    num_results_before_rerank: int
    num_results_after_rerank: int
    degraded: list[str] = Field(description="Sources that timed out or failed: the answer is partial.")
    run_id: str
    params: dict[str, Any]


class RetrieveResponse(BaseModel):
    results: list[ResultOut]
    metadata: MetadataOut | None


class MemoriesIn(BaseModel):
    namespace: NamespaceStr = "default"
    memories: list[MemoryIn] = Field(min_length=1, max_length=1000)


class IngestOut(BaseModel):
    namespace: str
    received: int
    inserted: int
    updated: int
    embedded: int
    ids: list[str]
    seconds: float


class FeedbackIn(BaseModel):
    namespace: NamespaceStr = "default"
    memory_id: str = Field(min_length=1, max_length=512)
    run_id: str | None = Field(default=None, pattern=r"^[0-9a-fA-F-]{36}$")
    negative: bool = True
    comment: str | None = Field(default=None, max_length=2000)


def _runtime(request: Request) -> Runtime:
    rt: Runtime | None = getattr(request.app.state, "runtime", None)
    if rt is None:
        raise StoreUnavailable("the service is starting or could not reach PostgreSQL")
    return rt


RuntimeDep = Annotated[Runtime, Depends(_runtime)]


def _auth(request: Request, authorization: Annotated[str | None, Header()] = None) -> frozenset[str] | None:
    """None = any namespace; a set = only these. Raises 401 when keys are configured and missing."""
    keys: dict[str, frozenset[str] | None] = request.app.state.api_keys
    if not keys:
        return None
    token = authorization[7:].strip() if authorization and authorization.lower().startswith("bearer ") else None
    if token is None or token not in keys:
        raise _HTTPError(401, "missing or unknown API key (Authorization: Bearer <key>)")
    return keys[token]


ScopeDep = Annotated[frozenset[str] | None, Depends(_auth)]


class _HTTPError(Exception):
    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message


def _count_rejected_ingest(request: Request) -> None:
    if request.method == "POST" and request.url.path == "/v1/memories":
        m.INGEST_ERRORS.inc()


def _check_scope(scope: frozenset[str] | None, namespace: str) -> None:
    if scope is not None and namespace not in scope:
        raise _HTTPError(403, f"this API key may not use namespace {namespace!r}")


def create_app(settings: Settings | None = None, runtime: Runtime | None = None) -> FastAPI:
    """The app; resources are built in the lifespan (or handed in, for tests)."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.runtime = runtime or await open_runtime(settings)
        try:
            yield
        finally:
            if runtime is None:
                await app.state.runtime.close()

    app = FastAPI(
        title="Retrieval Orchestrator",
        version="0.1.0",
        description="Japanese-first memory retrieval: query analysis, strategy selection, "
        "concurrent vector / BM25 keyword / temporal / trigram search, fusion and reranking.",
        lifespan=lifespan,
    )
    m.init_series([s.value for s in Strategy], [s.value for s in Source])
    app.state.api_keys = settings.parsed_api_keys()
    app.state.settings = settings

    @app.middleware("http")
    async def http_metrics(request: Request, call_next: Any) -> Response:
        t0 = time.perf_counter()
        status = 500
        try:
            response: Response = await call_next(request)
            status = response.status_code
            return response
        finally:
            route = request.scope.get("route")
            path = getattr(route, "path", "unmatched")
            m.HTTP_REQUESTS.labels(path, request.method, str(status)).inc()
            m.HTTP_LATENCY.labels(path, request.method).observe((time.perf_counter() - t0) * 1000.0)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        _count_rejected_ingest(request)
        detail = [
            {"loc": list(e.get("loc", [])), "field": ".".join(str(p) for p in e.get("loc", [])[1:]) or "body",
             "msg": e.get("msg", "invalid"), "type": e.get("type", "")}
            for e in exc.errors()
        ]
        return JSONResponse({"detail": detail}, status_code=422)

    @app.exception_handler(InvalidInput)
    async def _invalid(request: Request, exc: InvalidInput) -> JSONResponse:
        _count_rejected_ingest(request)
        detail = [{"loc": ["body", *([e["index"]] if "index" in e else []), e.get("field", "")],
                   "field": str(e.get("field", "")), "msg": str(e.get("reason", "invalid"))} for e in exc.errors]
        return JSONResponse({"detail": detail}, status_code=422)

    @app.exception_handler(_HTTPError)
    async def _http(_: Request, exc: _HTTPError) -> JSONResponse:
        return JSONResponse({"detail": exc.message}, status_code=exc.status)

    @app.exception_handler(NotFound)
    async def _not_found(_: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)

    @app.exception_handler(EmbeddingModelMismatch)
    async def _mismatch(_: Request, exc: EmbeddingModelMismatch) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=503)

    @app.exception_handler(StoreUnavailable)
    async def _unavailable(_: Request, exc: StoreUnavailable) -> JSONResponse:
        return JSONResponse({"detail": f"database unavailable: {exc}"}, status_code=503)

    @app.exception_handler(asyncpg.PostgresConnectionError)
    async def _pg_conn(_: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": "database unavailable, retry later"}, status_code=503)

    @app.exception_handler(OSError)
    async def _os(_: Request, exc: OSError) -> JSONResponse:
        logger.warning("I/O error: %s", exc)
        return JSONResponse({"detail": "database unavailable, retry later"}, status_code=503)

    @app.exception_handler(asyncpg.InterfaceError)
    async def _pg_iface(_: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": "database unavailable, retry later"}, status_code=503)

    @app.exception_handler(RetrievalError)
    async def _retrieval(_: Request, exc: RetrievalError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=400)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error")
        return JSONResponse({"detail": "internal error"}, status_code=500)

    @app.post("/v1/retrieve", response_model=RetrieveResponse, tags=["retrieval"])
    async def retrieve(body: RetrieveRequest, rt: RuntimeDep, scope: ScopeDep) -> dict[str, Any]:
        """Find the memories that answer `query`, best first, each with a reason."""
        _check_scope(scope, body.namespace)
        o = body.options
        opts = RetrievalOptions(
            namespace=body.namespace,
            force_strategy=o.force_strategy,
            limit=o.limit,
            time_range=TimeRange(o.time_range.start, o.time_range.end, None, "request") if o.time_range else None,
            memory_types=tuple(o.memory_types),
            source_types=tuple(o.source_types),
            now=o.now,
            recent_conversation=tuple((msg.role, msg.content) for msg in body.recent_conversation),
            include_metadata_details=o.include_metadata_details,
        )
        resp = await rt.orchestrator.retrieve(body.query, opts)
        out = resp.to_json()
        if not o.include_metadata_details:
            for r in out["results"]:
                r["signals"] = {}
        return out

    @app.post("/v1/memories", response_model=IngestOut, tags=["memories"])
    async def add_memories(body: MemoriesIn, rt: RuntimeDep, scope: ScopeDep) -> dict[str, Any]:
        """Store memories (idempotent on `id`); a batch with any invalid item is rejected whole."""
        _check_scope(scope, body.namespace)
        rep = await ingest(rt.pool, rt.nlp, rt.embedder, body.memories, namespace=body.namespace,
                           batch_size=rt.settings.embed_batch_size)
        m.INGESTED.labels("insert").inc(rep.inserted)
        m.INGESTED.labels("update").inc(rep.updated)
        return rep.to_json()

    @app.get("/v1/memories/{memory_id}", tags=["memories"])
    async def get_memory(
        memory_id: MemoryIdPath, rt: RuntimeDep, scope: ScopeDep, namespace: NamespaceQuery = "default"
    ) -> dict[str, Any]:
        """One memory, archived or not."""
        _check_scope(scope, namespace)
        async with rt.pool.acquire() as conn:
            row = await conn.fetchrow(q.GET_MEMORY, namespace, memory_id)
        if row is None:
            raise NotFound(f"no memory {memory_id!r} in namespace {namespace!r}")
        out = dict(row)
        out["id"] = out.pop("external_id")
        return out

    @app.delete("/v1/memories/{memory_id}", tags=["memories"])
    async def archive_memory(
        memory_id: MemoryIdPath, rt: RuntimeDep, scope: ScopeDep, namespace: NamespaceQuery = "default"
    ) -> dict[str, Any]:
        """Archive a memory: it is kept but never returned by a search again."""
        _check_scope(scope, namespace)
        async with rt.pool.acquire() as conn:
            got = await conn.fetchval(q.ARCHIVE_MEMORY, namespace, memory_id)
        if got is None:
            raise NotFound(f"no memory {memory_id!r} in namespace {namespace!r}")
        return {"id": memory_id, "namespace": namespace, "archived": True}

    @app.post("/v1/feedback", tags=["memories"])
    async def feedback(body: FeedbackIn, rt: RuntimeDep, scope: ScopeDep) -> dict[str, Any]:
        """Negative feedback makes a memory unsearchable for every future retrieval."""
        _check_scope(scope, body.namespace)
        import uuid

        async with rt.pool.acquire() as conn, conn.transaction():
            got = await conn.fetchval(q.MARK_UNSEARCHABLE, body.namespace, body.memory_id) if body.negative else (
                await conn.fetchval("SELECT external_id FROM memories WHERE namespace = $1 AND external_id = $2",
                                    body.namespace, body.memory_id))
            if got is None:
                raise NotFound(f"no memory {body.memory_id!r} in namespace {body.namespace!r}")
            await conn.execute(q.INSERT_FEEDBACK, uuid.UUID(body.run_id) if body.run_id else None,
                               body.namespace, body.memory_id, body.negative, body.comment)
        m.FEEDBACK.labels("negative" if body.negative else "positive").inc()
        return {"id": body.memory_id, "namespace": body.namespace, "searchable": not body.negative}

    @app.get("/v1/runs/{run_id}", tags=["retrieval"])
    async def run(run_id: Annotated[str, Path(pattern=r"^[0-9a-fA-F-]{36}$")], rt: RuntimeDep, scope: ScopeDep) -> dict[str, Any]:
        """A logged retrieval run: plan, candidates, selection, latencies."""
        got = await get_run(rt.pool, run_id)
        if got is None:
            raise NotFound(f"no run {run_id}")
        _check_scope(scope, got["namespace"])
        return got

    @app.get("/healthz", tags=["ops"])
    async def healthz() -> dict[str, str]:
        """The process is alive."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["ops"])
    async def readyz(request: Request) -> JSONResponse:
        """Database reachable, migrations applied, models loaded."""
        rt: Runtime | None = getattr(request.app.state, "runtime", None)
        checks: dict[str, Any] = {"models": rt is not None}
        if rt is not None:
            try:
                async with rt.pool.acquire(timeout=2) as conn:
                    await conn.fetchval("SELECT 1", timeout=2)
                    checks["database"] = True
                    checks["migrations_pending"] = await migrations.pending(conn)
            except Exception as exc:  # readiness must answer, not raise
                checks["database"] = False
                checks["error"] = type(exc).__name__
        ok = bool(checks.get("models") and checks.get("database") and not checks.get("migrations_pending"))
        return JSONResponse({"ready": ok, **checks}, status_code=200 if ok else 503)

    @app.get("/metrics", tags=["ops"])
    async def metrics() -> Response:
        """Prometheus exposition."""
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return app
