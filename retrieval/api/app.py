"""HTTP API for the context assembler (FastAPI; OpenAPI at /openapi.json, pages at /docs).

`create_app` builds the app: resources in the lifespan, the routers, middleware (body limit,
metrics) and one mapping from error type to HTTP status.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

import asyncpg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from db.runs import purge_old
from retrieval import metrics as m
from retrieval.api.middleware import BodyLimit, HttpMetrics
from retrieval.api.routes import memories, ops, retrieve
from retrieval.api.schemas import COMMON_RESPONSES, document_limits, retrieve_body_limit
from retrieval.errors import (
    EmbeddingError,
    EmbeddingModelMismatch,
    Forbidden,
    InvalidInput,
    NotFound,
    Overloaded,
    RetrievalError,
    StoreError,
    StoreUnavailable,
    Unauthorized,
    WriteConflict,
)
from retrieval.models import Source, Strategy
from retrieval.runtime import Runtime, open_runtime
from retrieval.settings import Settings

logger = logging.getLogger(__name__)

# Seconds a client should wait before retrying a 503.
RETRY_AFTER_S = 1

# SQLSTATE classes that mean "the database cannot do this now": connection exceptions (08),
# insufficient resources (53: too many connections, out of memory or disk), operator
# intervention (57: shutdown, cannot connect now, query cancelled by a deadline).
_UNAVAILABLE_SQLSTATE = ("08", "53", "57")

# Error type -> HTTP status; the most specific type listed wins.
STATUS: dict[type[BaseException], int] = {
    InvalidInput: 422,
    Unauthorized: 401,
    Forbidden: 403,
    NotFound: 404,
    Overloaded: 429,
    StoreUnavailable: 503,
    EmbeddingModelMismatch: 503,
    WriteConflict: 503,
    EmbeddingError: 503,
    TimeoutError: 503,
    OSError: 503,
    asyncpg.InterfaceError: 503,
    asyncpg.PostgresConnectionError: 503,
    RetrievalError: 400,
    StoreError: 503,
}


def _status_of(exc: BaseException) -> int:
    if isinstance(exc, asyncpg.PostgresError) and str(getattr(exc, "sqlstate", "")).startswith(
        _UNAVAILABLE_SQLSTATE
    ):
        return 503
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    # asyncpg's own complaint while it handled a lost connection (a pool's release that cannot
    # reset a connection the server dropped mid-query: "another operation is in progress") is
    # that loss, not a bug of ours. So is the same complaint from the next statement on such a
    # connection, with nothing behind it (seen in CI mid-restart: "cannot switch to state 12;
    # another operation (2) is in progress"): a new connection serves the retry.
    if isinstance(exc, asyncpg.InternalClientError):
        cause = exc.__cause__ or exc.__context__
        if cause is not None and cause is not exc and (status := _status_of(cause)) != 500:
            return status
        if "another operation" in str(exc):
            return 503
    return 500


def _invalid_detail(exc: InvalidInput) -> list[dict[str, Any]]:
    out = []
    for e in exc.errors:
        field = str(e.get("field", ""))
        if "index" in e:
            loc: list[Any] = ["body", "memories", e["index"], field]
            field = f"memories.{e['index']}.{field}"
        else:
            loc = ["body", *(int(p) if p.isdigit() else p for p in field.split(".") if p)]
        out.append(
            {
                "loc": loc,
                "field": field,
                "msg": str(e.get("reason", "invalid")),
                "type": "value_error",
            }
        )
    return out


def _count_rejected_ingest(request: Request) -> None:
    if request.method == "POST" and request.url.path == "/v1/memories":
        m.INGEST_ERRORS.inc()


async def _on_validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    _count_rejected_ingest(request)
    detail = [
        {
            "loc": list(e.get("loc", [])),
            "field": ".".join(str(p) for p in e.get("loc", [])[1:]) or "body",
            "msg": e.get("msg", "invalid"),
            "type": e.get("type", ""),
        }
        for e in exc.errors()
    ]
    return JSONResponse({"detail": detail}, status_code=422)


async def _on_error(request: Request, exc: Exception) -> JSONResponse:
    status = _status_of(exc)
    if isinstance(exc, InvalidInput):
        _count_rejected_ingest(request)
        return JSONResponse({"detail": _invalid_detail(exc)}, status_code=422)
    if status == 503:
        logger.warning("unavailable: %s: %s", type(exc).__name__, exc)
        if isinstance(exc, EmbeddingError):
            # A provider's own text (its error page, its host) is for the log, not the caller.
            msg = "the embedding provider failed"
        elif isinstance(exc, RetrievalError):
            msg = str(exc)
        else:
            msg = "the database is unavailable"
        return JSONResponse(
            {"detail": f"unavailable, retry later: {msg}"},
            status_code=503,
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )
    if status == 429:
        after = getattr(exc, "retry_after_s", None) or RETRY_AFTER_S * 5
        return JSONResponse(
            {"detail": str(exc)}, status_code=429, headers={"Retry-After": str(after)}
        )
    if status == 500:
        logger.exception("unhandled error", exc_info=exc)
        return JSONResponse({"detail": "internal error"}, status_code=500)
    return JSONResponse({"detail": str(exc)}, status_code=status)


async def _retention(rt: Runtime, every_s: float = 3600.0) -> None:
    """Delete run-log and feedback rows older than the retention, hourly, in batches."""
    days = rt.settings.run_retention_days
    while days > 0:
        try:
            for table, n in (await purge_old(rt.pool, days)).items():
                m.RETENTION_DELETED.labels(table).inc(n)
        except Exception as exc:  # the next round tries again
            logger.warning("retention: %s", exc)
        await asyncio.sleep(every_s)


async def _run_lifespan(app: Any, ready: asyncio.Event, stop: asyncio.Event) -> None:
    """Run an ASGI app's lifespan until `stop` (begun and ended in this task)."""
    async with app.router.lifespan_context(app):
        ready.set()
        await stop.wait()


def create_app(settings: Settings | None = None, runtime: Runtime | None = None) -> FastAPI:
    """The app; resources are built in the lifespan (or handed in, for tests)."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # The mounted MCP app's own lifespan (its session manager) is not run by the mount; it
        # runs in a task of its own (its task group must end in the task it began in, and a
        # test's fixture may end this lifespan from another task).
        mcp_stop, mcp_ready = asyncio.Event(), asyncio.Event()
        mcp_task = asyncio.create_task(_run_lifespan(mcp_http, mcp_ready, mcp_stop))
        ready = asyncio.create_task(mcp_ready.wait())
        await asyncio.wait({ready, mcp_task}, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        try:
            if mcp_task.done():
                mcp_task.result()  # it failed to start: say why
            app.state.runtime = runtime or await open_runtime(settings)
            keepers = [
                asyncio.create_task(_retention(app.state.runtime)),
                asyncio.create_task(app.state.runtime.jobs.run()),
            ]
            try:
                yield
            finally:
                for task in keepers:
                    task.cancel()
                for task in keepers:
                    with suppress(asyncio.CancelledError):
                        await task
                if runtime is None:
                    await app.state.runtime.close()
                m.worker_exit(os.getpid())
        finally:
            mcp_stop.set()
            await mcp_task
            await mcp_clients.close()

    app = FastAPI(
        title="Retrieval Orchestrator",
        version="0.1.0",
        description="Japanese-first memory retrieval: query analysis, strategy selection, "
        "concurrent vector / BM25 keyword / temporal / trigram search, fusion and reranking.",
        lifespan=lifespan,
        responses=COMMON_RESPONSES,
    )
    m.init_series([s.value for s in Strategy], [s.value for s in Source])
    app.state.api_keys = settings.parsed_api_keys()
    app.state.settings = settings
    # The MCP tools at /mcp/, calling this app's own routes (retrieval.api.mcp; imported
    # here: it uses retrieval.client, which reads this package's schemas).
    from retrieval.api.mcp import RequireKey
    from retrieval.api.mcp import mount as mcp_mount

    mcp_http, mcp_clients = mcp_mount(app, app.state.api_keys)
    app.mount("/mcp", RequireKey(mcp_http, app.state.api_keys))
    app.add_middleware(HttpMetrics)
    app.add_middleware(
        BodyLimit,
        max_bytes=settings.max_body_bytes,
        per_path={"/v1/retrieve": retrieve_body_limit(settings)},
    )
    app.add_exception_handler(RequestValidationError, _on_validation)
    # asyncpg's internal errors by their own class too: only the catch-all `Exception` goes to
    # Starlette's outermost middleware, which sends the handler's answer and then raises the
    # error again to the server (a 503 mid-restart logged as an application crash, and raised
    # to an in-process client).
    for exc_type in (*STATUS, asyncpg.PostgresError, asyncpg.InternalClientError, Exception):
        app.add_exception_handler(exc_type, _on_error)
    for r in (retrieve.router, memories.router, ops.router):
        app.include_router(r)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            schema = get_openapi(
                title=app.title, version=app.version, description=app.description, routes=app.routes
            )
            app.openapi_schema = document_limits(schema, settings)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
