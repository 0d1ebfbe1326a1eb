"""The HTTP/1.1 server's own refusals in the API's error contract.

A request the HTTP parser cannot read (a Content-Length that is not a number, a broken chunk,
bytes left after the body a Content-Length announced) never reaches the app: uvicorn answers it
with a plain-text 400. These protocols answer it as the app answers every refusal, a JSON 422
whose `detail` names where the fault was, and close the connection as uvicorn does."""

from __future__ import annotations

import json
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from retrieval.api.errors import refused

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - httptools is a dependency of uvicorn[standard]
    HttpToolsProtocol = None  # type: ignore[assignment,misc]

_AFTER_BODY = (
    "bytes follow the body its Content-Length announced: a Content-Length shorter than the "
    "body, or a second request that is not HTTP"
)
_UNREADABLE = (
    "not an HTTP/1.1 request this server can read: a malformed request line or header, a "
    "Content-Length that is not a number, or a broken chunk"
)


def refusal(after_body: bool) -> bytes:
    """The JSON body of the server's refusal: the framing, named by where it broke."""
    said = (
        refused(["header", "content-length"], _AFTER_BODY, "http_invalid")
        if after_body
        else refused(["request"], _UNREADABLE, "http_invalid")
    )
    return json.dumps({"detail": [said]}).encode()


def _had_body(headers: list[tuple[bytes, bytes]]) -> bool:
    return any(k.lower() == b"content-length" and v.strip() not in (b"", b"0") for k, v in headers)


class _RefusingInJson:
    """What both protocols share: the refusal, JSON, after which the connection closes;
    `_after_body` says whether a request with a body was read just before (each protocol sets
    it from its own hook)."""

    _after_body = False
    transport: Any
    server_state: Any

    def send_400_response(self, msg: str) -> None:
        body = refusal(self._after_body)
        head = [b"HTTP/1.1 422 Unprocessable Entity\r\n"]
        head += [
            name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers
        ]
        head += [
            b"content-type: application/json\r\n",
            b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
        self.transport.close()


class JsonH11Protocol(_RefusingInJson, H11Protocol):
    """uvicorn's h11 protocol, refusing in JSON."""

    def on_response_complete(self) -> None:
        self._after_body = _had_body(getattr(self, "headers", []))
        super().on_response_complete()


if HttpToolsProtocol is not None:

    class JsonHttpToolsProtocol(_RefusingInJson, HttpToolsProtocol):
        """uvicorn's httptools protocol, refusing in JSON."""

        def on_headers_complete(self) -> None:
            self._after_body = False
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._after_body = _had_body(self.headers)
            super().on_message_complete()

    JsonHttpProtocol: type = JsonHttpToolsProtocol
else:  # pragma: no cover
    JsonHttpProtocol = JsonH11Protocol
