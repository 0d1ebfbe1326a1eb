"""ASGI middleware: a request-body limit enforced before parsing, and HTTP metrics."""

from __future__ import annotations

import json
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from retrieval import metrics as m

KNOWN_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})


async def _send_json(send: Send, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


class BodyLimit:
    """413 for a body over `max_bytes` (or the path's own limit in `per_path`): at once when
    Content-Length says so, else as soon as the bytes read pass the limit. Nothing is parsed
    (nor authenticated) before that."""

    def __init__(
        self, app: ASGIApp, max_bytes: int, per_path: dict[str, int] | None = None
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.per_path = per_path or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.per_path.get(scope.get("path", ""), self.max_bytes)
        detail = {"detail": f"request body larger than {limit} bytes"}
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    too_big = int(value) > limit
                except ValueError:
                    too_big = False
                if too_big:
                    await _send_json(send, 413, detail)
                    return
        seen = 0
        started = rejected = False

        async def counted_receive() -> Message:
            nonlocal seen, rejected
            if rejected:
                return {"type": "http.disconnect"}
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > limit:
                    # Answer now; the app sees the client leave and whatever it sends is dropped.
                    rejected = True
                    if not started:
                        await _send_json(send, 413, detail)
                    return {"type": "http.disconnect"}
            return msg

        async def tracked_send(msg: Message) -> None:
            nonlocal started
            if rejected:
                return
            if msg["type"] == "http.response.start":
                started = True
            await send(msg)

        try:
            await self.app(scope, counted_receive, tracked_send)
        except Exception:
            if not rejected:
                raise


class HttpMetrics:
    """Requests and latency by route template, method (unknown ones as `other`) and status."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = 500

        async def tracked_send(msg: Message) -> None:
            nonlocal status
            if msg["type"] == "http.response.start":
                status = msg["status"]
            await send(msg)

        try:
            await self.app(scope, receive, tracked_send)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", "unmatched")
            method = scope.get("method", "")
            method = method if method in KNOWN_METHODS else "other"
            m.HTTP_REQUESTS.labels(path, method, str(status)).inc()
            m.HTTP_LATENCY.labels(path, method).observe((time.perf_counter() - t0) * 1000.0)
