"""ASGI middleware: the API key checked before anything else, a request-body limit enforced
before parsing and the JSON routes' content type (a request's metrics and log line:
retrieval.api.access)."""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from retrieval.api.deps import bearer_token, find_key
from retrieval.api.errors import UNAUTHORIZED_DETAIL, UNAUTHORIZED_HEADERS, refused


async def _send_json(
    send: Send, status: int, body: dict[str, Any], extra: dict[str, str] | None = None
) -> None:
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in (extra or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


# The paths behind the API keys (when set): the API and the MCP tools. Health, readiness, the
# metrics and the API's documentation stay open.
KEYED_PREFIXES = ("/v1/", "/mcp")


class RequireKey:
    """401 with `WWW-Authenticate: Bearer` for a request to a keyed path (KEYED_PREFIXES) without
    a known key, when keys are configured: before its body is read, sized or judged, so that a
    caller without a key learns nothing of the schema. What a known key may do (its
    namespaces) is decided by the routes (retrieval.api.deps.get_caller)."""

    def __init__(self, app: ASGIApp, keys: dict[str, frozenset[str] | None]) -> None:
        self.app, self.keys = app, keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.keys and scope["path"].startswith(KEYED_PREFIXES):
            auth = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
            token = bearer_token(auth)
            if not (token and find_key(self.keys, token)[0]):
                body = {"detail": UNAUTHORIZED_DETAIL}
                await _send_json(send, 401, body, UNAUTHORIZED_HEADERS)
                return
        await self.app(scope, receive, send)


# The routes whose body is a JSON object.
JSON_ROUTES = frozenset({"/v1/retrieve", "/v1/memories", "/v1/memories/erase", "/v1/feedback"})


class JsonBody:
    """415 for a POST to a JSON route whose Content-Type is not JSON (none at all, a form, text),
    saying what to send, before the body is read: a body that is not said to be JSON is not
    guessed at."""

    def __init__(self, app: ASGIApp, paths: frozenset[str] = JSON_ROUTES) -> None:
        self.app = app
        self.paths = paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in self.paths:
            ctype = dict(scope["headers"]).get(b"content-type", b"").decode("latin-1")
            media = ctype.split(";", 1)[0].strip().lower()
            if media != "application/json" and not media.endswith("+json"):
                sent = f"Content-Type {ctype!r}" if ctype else "no Content-Type"
                msg = (
                    f"send the body as JSON with Content-Type: application/json ({sent} was given)"
                )
                body = {"detail": [refused(["header", "content-type"], msg, "content_type")]}
                await _send_json(send, 415, body)
                return
        await self.app(scope, receive, send)


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
        detail = {
            "detail": [refused(["body"], f"request body larger than {limit} bytes", "too_large")]
        }
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
