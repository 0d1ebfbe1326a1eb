"""Errors as HTTP answers: one mapping from error type to status, one handler for all of them
(422 naming each field, 503 and 429 with Retry-After, 500 only for what is a bug)."""

from __future__ import annotations

import logging
from typing import Any

import asyncpg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from retrieval import metrics as m
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


def status_of(exc: BaseException) -> int:
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
        if cause is not None and cause is not exc and (status := status_of(cause)) != 500:
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
    detail = [_said(e) for e in exc.errors()]
    return JSONResponse({"detail": detail}, status_code=422)


def _said(e: Any) -> dict[str, Any]:
    """A validation error as the API says it: the field by name (never a character offset)
    and a message about what was sent."""
    loc = list(e.get("loc", []))
    kind, msg = e.get("type", ""), e.get("msg", "invalid")
    field = ".".join(str(p) for p in loc[1:]) or "body"
    ctx = e.get("ctx") or {}
    if kind == "json_invalid":
        at = loc[1] if len(loc) > 1 and isinstance(loc[1], int) else None
        where = f" at character {at}" if at is not None else ""
        field, msg = "body", f"malformed JSON{where}: {ctx.get('error', 'cannot be parsed')}"
    elif kind in ("too_long", "too_short") and isinstance(e.get("input"), str):
        bound = ctx.get("max_length" if kind == "too_long" else "min_length")
        most = "at most" if kind == "too_long" else "at least"
        msg = f"must have {most} {bound} characters, not {len(e['input'])}"
    elif kind == "extra_forbidden":
        msg = "not a field of this request (a misspelt name?)"
    elif kind == "model_attributes_type" and field == "body":
        msg = "the body must be a JSON object"
    return {"loc": loc, "field": field, "msg": msg, "type": kind}


async def _on_error(request: Request, exc: Exception) -> JSONResponse:
    status = status_of(exc)
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


def add_handlers(app: FastAPI) -> None:
    """The handlers for every error type the app answers."""
    app.add_exception_handler(RequestValidationError, _on_validation)
    # asyncpg's internal errors by their own class too: only the catch-all `Exception` goes to
    # Starlette's outermost middleware, which sends the handler's answer and then raises the
    # error again to the server (a 503 mid-restart logged as an application crash, and raised
    # to an in-process client).
    for exc_type in (*STATUS, asyncpg.PostgresError, asyncpg.InternalClientError, Exception):
        app.add_exception_handler(exc_type, _on_error)
