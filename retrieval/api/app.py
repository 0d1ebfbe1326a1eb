"""`create_app`: the HTTP API (FastAPI; OpenAPI at /openapi.json, pages at /docs) — resources in
the lifespan, the routers, the MCP tools at /mcp/, middleware (body limit, metrics) and the error
handlers (retrieval.api.errors)."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any
from zoneinfo import ZoneInfo

from fastapi import FastAPI

from db.run_log import purge_old
from retrieval import metrics as m
from retrieval.api.access import AccessLog
from retrieval.api.errors import add_handlers
from retrieval.api.mcp import mount as mcp_mount
from retrieval.api.middleware import BodyLimit, JsonBody, RequireKey
from retrieval.api.routes import ops, retrieve, store
from retrieval.api.schemas import COMMON_RESPONSES, document_limits, retrieve_body_limit
from retrieval.maintenance.read_events import in_the_background
from retrieval.models import Source, Strategy
from retrieval.runtime import Runtime, open_runtime
from retrieval.settings import Settings

logger = logging.getLogger(__name__)


async def _retention(rt: Runtime, every_s: float = 3600.0) -> None:
    """Hourly: erase the memories past their `expires_at` (as DELETE erases one: the Writer),
    and delete run-log, feedback, finished job and purge rows older than the retention, in
    batches."""
    days = rt.settings.run_retention_days
    while True:
        try:
            await rt.writer.erase_expired()
            if days > 0:
                for table, n in (await purge_old(rt.pool, days)).items():
                    m.RETENTION_DELETED.labels(table).inc(n)
        except Exception as exc:  # the next round tries again
            logger.warning("retention: %s", exc)
        await asyncio.sleep(every_s)


async def _read_events(rt: Runtime, retry_s: float = 600.0) -> None:
    """Once at start: the events of the memories written before they were read (migration
    0021; retrieval.maintenance.read_events), read in the background; a failure is tried
    again later."""
    zone = ZoneInfo(rt.settings.timezone)
    while True:
        try:
            await in_the_background(rt.pool, zone)
            return
        except Exception as exc:
            logger.warning("reading the stored memories' events: %s (tried again later)", exc)
        await asyncio.sleep(retry_s)


def _started(rt: Runtime, keepers: list[str]) -> dict[str, Any]:
    """What a start says it started (no secret: the database by host and name only)."""
    from urllib.parse import urlparse

    from retrieval.cpus import available_cpus

    db = urlparse(rt.dsn)
    return {
        "pid": os.getpid(),
        "database": f"{db.hostname or 'local socket'}:{db.port or 5432}{db.path}",
        "replicas": len(rt.router.replicas),
        "embedder": f"{rt.settings.embedder} ({rt.embedder.name}, {rt.embedder.dim}-d)",
        "cpus": available_cpus(),
        "api_keys": len(rt.settings.parsed_api_keys()),
        "tasks": keepers,
    }


async def _run_lifespan(app: Any, ready: asyncio.Event, stop: asyncio.Event) -> None:
    """Run an ASGI app's lifespan until `stop` (begun and ended in this task)."""
    async with app.router.lifespan_context(app):
        ready.set()
        await stop.wait()


# Set when the service could not start (its database never answered, a foreign model): the
# command that serves exits with an error (retrieval.cli.serve).
START_FAILED: list[str] = []


class _Serving:
    """What a serving app runs beside its routes: the runtime (opened in the background, so
    that /healthz answers at once while the database is waited for, migrated and the models
    load) and the keepers (retention and expiry, the write-job and purge workers)."""

    def __init__(self, app: FastAPI, settings: Settings, runtime: Runtime | None) -> None:
        self.app, self.settings, self.given = app, settings, runtime
        self.keepers: dict[str, asyncio.Task[None]] = {}
        self.opening: asyncio.Task[None] | None = None
        app.state.ready = asyncio.Event()

    async def start(self) -> None:
        if self.given is not None:
            self._serve(self.given)
        else:
            self.opening = asyncio.create_task(self._open())

    async def _open(self) -> None:
        try:
            rt = await open_runtime(self.settings)
        except Exception as exc:  # the database never answered, a foreign model ...
            logger.error("could not start: %s: %s", type(exc).__name__, exc)
            START_FAILED.append(str(exc))
            os.kill(os.getpid(), signal.SIGTERM)  # uvicorn stops serving; the command fails
            return
        # What serving started with (models, analysers, modules: ~190,000 objects) lives as
        # long as the process: the collector no longer walks it in each full pass. Measured
        # on LongMemEval (625 requests): the longest full collection, which stalls every
        # request in flight, 229 -> 99 ms; all of them 1.07 -> 0.82 s.
        gc.freeze()
        self._serve(rt)

    def _serve(self, rt: Runtime) -> None:
        self.app.state.runtime = rt
        self.keepers = {
            "run-log retention and expiry": asyncio.create_task(_retention(rt)),
            "write-job worker": asyncio.create_task(rt.jobs.run()),
            "purge worker": asyncio.create_task(rt.writer.purges.run()),  # type: ignore[union-attr]
            "event re-read": asyncio.create_task(_read_events(rt)),
        }
        self.app.state.ready.set()
        logger.info("started", extra={"fields": _started(rt, list(self.keepers))})

    async def stop(self) -> None:
        names = ", ".join(self.keepers) or "nothing (it had not started)"
        logger.info("stopping: %s", names)
        if self.opening is not None:
            self.opening.cancel()
            with suppress(asyncio.CancelledError):
                await self.opening
        for task in self.keepers.values():
            task.cancel()
        for task in self.keepers.values():
            with suppress(asyncio.CancelledError):
                await task
        rt = getattr(self.app.state, "runtime", None)
        if self.given is None and rt is not None:
            await rt.close()
        m.worker_exit(os.getpid())
        logger.info("stopped: %s%s", names, "; the database pools closed" if rt else "")


def _lifespan(settings: Settings, runtime: Runtime | None, mcp_http: Any, mcp_clients: Any) -> Any:
    """The app's lifespan: the MCP app's own beside it, the runtime (opened here, in the
    background, unless handed in), the job and purge workers and the retention while it
    serves."""

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
            serving = _Serving(app, settings, runtime)
            await serving.start()
            try:
                yield
            finally:
                await serving.stop()
        finally:
            mcp_stop.set()
            await mcp_task
            await mcp_clients.close()

    return lifespan


def _documented(app: FastAPI, settings: Settings) -> None:
    """The OpenAPI document, built once, with the configured limits written into it."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            schema = get_openapi(
                title=app.title, version=app.version, description=app.description, routes=app.routes
            )
            app.openapi_schema = document_limits(schema, settings)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def create_app(settings: Settings | None = None, runtime: Runtime | None = None) -> FastAPI:
    """The app; resources are built in the lifespan (or handed in, for tests)."""
    settings = settings or Settings()
    keys = settings.parsed_api_keys()
    app = FastAPI(
        title="Retrieval Orchestrator",
        version="0.1.0",
        description="Japanese-first memory retrieval: query analysis, strategy selection, "
        "concurrent vector / BM25 keyword / temporal / trigram search, fusion and reranking.",
        responses=COMMON_RESPONSES,
    )
    m.init_series([s.value for s in Strategy], [s.value for s in Source])
    app.state.api_keys = keys
    app.state.settings = settings
    # The MCP tools at /mcp/, calling this app's own routes (retrieval.api.mcp).
    mcp_http, mcp_clients = mcp_mount(app, keys)
    app.router.lifespan_context = _lifespan(settings, runtime, mcp_http, mcp_clients)
    app.mount("/mcp", mcp_http)
    app.add_middleware(JsonBody)
    app.add_middleware(
        BodyLimit,
        max_bytes=settings.max_body_bytes,
        per_path={"/v1/retrieve": retrieve_body_limit(settings)},
    )
    # The key before the body: a caller without one learns nothing of the schema (401 first).
    app.add_middleware(RequireKey, keys=keys)
    # Added last, so outermost: every answer (a refusal by the limits too) has its id, its line
    # and its metrics.
    app.add_middleware(AccessLog)
    add_handlers(app)
    for r in (retrieve.router, store.router, ops.router):
        app.include_router(r)
    _documented(app, settings)
    return app
