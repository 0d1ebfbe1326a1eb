"""Errors as HTTP answers: one mapping from error type to status, one handler for all of them
(422 naming each field, 503 and 429 with Retry-After, 500 only for what is a bug)."""

from __future__ import annotations

import logging
from typing import Any

import asyncpg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

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
# A missing or unknown key's answer (401): its detail and headers (RFC 6750: the scheme asked
# for).
UNAUTHORIZED_DETAIL = "missing or unknown API key (Authorization: Bearer <key>)"
UNAUTHORIZED_HEADERS = {"WWW-Authenticate": 'Bearer realm="retrieval"'}

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


def refused(loc: list[str], msg: str, kind: str) -> dict[str, Any]:
    """One refused value in the API's error contract: where it was (`loc`, its last part the
    field), what is wrong with it, and its type; `{"detail": [refused(...), ...]}` answers."""
    return {"loc": loc, "field": loc[-1], "msg": msg, "type": kind}


def _invalid_detail(exc: InvalidInput) -> list[dict[str, Any]]:
    out = []
    for e in exc.errors:
        field = str(e.get("field", ""))
        # Where the value was: the body unless the error says otherwise (a listing's cursor
        # is a query parameter).
        where = str(e.get("in", "body"))
        if "index" in e:
            loc: list[Any] = [where, "memories", e["index"], field]
            field = f"memories.{e['index']}.{field}"
        else:
            loc = [where, *(int(p) if p.isdigit() else p for p in field.split(".") if p)]
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


# pydantic's own wording -> the API's one style: a lower-case phrase about the value, what it
# must be or what is wrong with it (never "Value error, " or "Input should be").
_STYLE = (
    ("Value error, ", ""),
    ("Assertion failed, ", ""),
    ("Input should be ", "must be "),
    ("List should have ", "must have "),
    ("Dictionary should have ", "must have "),
    ("Tuple should have ", "must have "),
    ("Field required", "required"),
)


def styled(msg: str) -> str:
    """A message in the API's one style (pydantic's prefixes and capitals taken off)."""
    for before, after in _STYLE:
        if msg.startswith(before):
            msg = after + msg[len(before) :]
    first = msg.split(" ", 1)[0]
    # A capitalised word, not a name or an acronym (ISO, NaN, JSON) keeps its case otherwise.
    return msg[:1].lower() + msg[1:] if first.isalpha() and first[1:].islower() else msg


def _said(e: Any) -> dict[str, Any]:
    """A validation error as the API says it: the field by name (never a character offset)
    and a message about what was sent."""
    loc = list(e.get("loc", []))
    kind, msg = e.get("type", ""), styled(str(e.get("msg", "invalid")))
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


# Nesting deeper than Python's JSON parser goes (its recursion limit, about 1,000 levels).
_TOO_DEEP = "nested deeper than the JSON parser reads (about 1,000 levels of arrays or objects)"


def unparsed(exc: BaseException) -> dict[str, Any] | None:
    """What made a body unreadable as JSON beyond malformed syntax (which pydantic reports):
    bytes that are not UTF-8, named by the character before them, or nesting too deep; None
    for anything else."""
    if isinstance(exc, UnicodeDecodeError):
        raw = exc.object if isinstance(exc.object, bytes) else b""
        char = len(raw[: exc.start].decode("utf-8", errors="replace")) + 1
        msg = f"not UTF-8: byte 0x{raw[exc.start]:02x} at character {char} of the body"
        return refused(["body"], msg, "utf8_invalid")
    if isinstance(exc, RecursionError):
        return refused(["body"], _TOO_DEEP, "json_too_deep")
    return None


async def _on_http(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's and FastAPI's own refusals: a body FastAPI could not parse for a reason
    other than its syntax is a 422 saying which; the rest keep their status, as JSON."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 400 and (said := unparsed(exc.__cause__ or exc)) is not None:
        _count_rejected_ingest(request)
        return JSONResponse({"detail": [said]}, status_code=422)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)


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
    if status == 401:
        return JSONResponse({"detail": str(exc)}, status_code=401, headers=UNAUTHORIZED_HEADERS)
    if status == 500:
        logger.exception("unhandled error", exc_info=exc)
        return JSONResponse({"detail": "internal error"}, status_code=500)
    return JSONResponse({"detail": str(exc)}, status_code=status)


def add_handlers(app: FastAPI) -> None:
    """The handlers for every error type the app answers."""
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(HTTPException, _on_http)
    # asyncpg's internal errors by their own class too: only the catch-all `Exception` goes to
    # Starlette's outermost middleware, which sends the handler's answer and then raises the
    # error again to the server (a 503 mid-restart logged as an application crash, and raised
    # to an in-process client).
    for exc_type in (*STATUS, asyncpg.PostgresError, asyncpg.InternalClientError, Exception):
        app.add_exception_handler(exc_type, _on_error)
