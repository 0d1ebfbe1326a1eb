"""Following a request: its id and its one log line.

Every request has an id: the caller's `X-Request-ID` (1-128 characters of letters, digits and
`._:-`), else one made here. It is sent back in the answer's `X-Request-ID`, written into the run
log (`retrieval_runs.request_id`), and carried by the request's log line: one JSON object a
request (`JsonLines`), with the route, the status, the milliseconds, the strategy and the degraded
sources of a retrieval, and the tenant as a digest (never an API key, never a namespace in the
clear), so that one question can be followed from the context assembler to the database.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
import uuid
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from retrieval import metrics as m

logger = logging.getLogger("retrieval.access")

# The request being served (its id), for the code below the routes (the run log).
REQUEST_ID: ContextVar[str | None] = ContextVar("request_id", default=None)

_GIVEN_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
# What a request's line adds beside its route and status (set by the route: request.state).
NOTED = ("strategy", "degraded", "tenant")
# Methods counted by name in the metrics; any other is `other` (a label per made-up method
# would grow the series without bound).
KNOWN_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})


def tenant_digest(tenant: str) -> str:
    """A tenant as the logs name it: a digest of its name."""
    return hashlib.sha256(tenant.encode()).hexdigest()[:12]


def note(request: Any, **fields: Any) -> None:
    """What a route adds to its request's log line (strategy, degraded, tenant: a digest)."""
    noted = getattr(request.state, "access", None)
    if noted is None:
        noted = {}
        request.state.access = noted
    if "tenant" in fields and fields["tenant"] is not None:
        fields["tenant"] = tenant_digest(fields["tenant"])
    noted.update(fields)


class AccessLog:
    """The outermost middleware: the request's id (given or made, sent back), its log line, and
    its count and latency in the metrics (by route template, method and status; a refusal
    before any route, 413 say, as `unmatched`)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        request_id = given if _GIVEN_ID.match(given) else uuid.uuid4().hex
        token = REQUEST_ID.set(request_id)
        scope.setdefault("state", {})
        status = 500
        t = time.perf_counter()

        async def tracked_send(msg: Message) -> None:
            nonlocal status
            if msg["type"] == "http.response.start":
                status = msg["status"]
                msg["headers"] = [*msg.get("headers", []), (b"x-request-id", request_id.encode())]
            await send(msg)

        try:
            await self.app(scope, receive, tracked_send)
        finally:
            REQUEST_ID.reset(token)
            ms = (time.perf_counter() - t) * 1000.0
            template = getattr(scope.get("route"), "path", None)
            method = scope["method"] if scope["method"] in KNOWN_METHODS else "other"
            m.HTTP_REQUESTS.labels(template or "unmatched", method, str(status)).inc()
            m.HTTP_LATENCY.labels(template or "unmatched", method).observe(ms)
            line: dict[str, Any] = {
                "request_id": request_id,
                "method": scope["method"],
                "route": template or scope["path"],
                "status": status,
                "ms": round(ms, 1),
            }
            noted = scope["state"].get("access") or {}
            line.update({k: v for k, v in noted.items() if k in NOTED})
            logger.info("request", extra={"fields": line})


# The attributes every LogRecord has: what is not one of them was given in `extra` (uvicorn's
# terminal colours left out).
_RECORD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "color_message"}


class JsonLines(logging.Formatter):
    """One JSON object a line: time (UTC, ISO 8601), level, logger, message, the fields a line
    was given (`extra={"fields": {...}}` or plain `extra`), and the exception, if any."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update(fields)
        out.update({k: v for k, v in record.__dict__.items() if k not in _RECORD and k != "fields"})
        request_id = REQUEST_ID.get()
        if request_id is not None:
            out.setdefault("request_id", request_id)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


class TextLines(logging.Formatter):
    """A line of text for a person at a terminal: time, level, logger, message, then the
    line's fields as key=value."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            text += " " + " ".join(f"{k}={v}" for k, v in fields.items())
        return text


def logging_config(level: str, fmt: str) -> dict[str, Any]:
    """The service's logging (dictConfig): everything on stdout at `level`, as JSON lines or
    plain text; uvicorn's own access log off (AccessLog writes one line a request)."""
    formatter = {"()": f"{__name__}.{'JsonLines' if fmt == 'json' else 'TextLines'}"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"main": formatter},
        "handlers": {
            "stdout": {
                "class": "logging.StreamHandler",
                "formatter": "main",
                "stream": "ext://sys.stdout",
            }
        },
        "root": {"handlers": ["stdout"], "level": level},
        "loggers": {
            "uvicorn": {"handlers": [], "level": level, "propagate": True},
            "uvicorn.error": {"handlers": [], "level": level, "propagate": True},
            "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
        },
    }
