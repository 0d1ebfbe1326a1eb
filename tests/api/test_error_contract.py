"""One error contract, no exceptions: every refused request is JSON `{"detail": [...]}` whose
`loc` says where the value was (body, query, path, header), in one style of message, whether
the app or the HTTP server itself refuses it."""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit

import pytest

from retrieval.api.errors import styled

NESTED = b"[" * 100_000 + b"]" * 100_000
PAST, LATER, EARLIER = "2020-01-01T00:00:00Z", "2099-06-01T00:00:00Z", "2099-01-01T00:00:00Z"


def one(**memory: object) -> bytes:
    """A write of one memory (content "a" unless given), as bytes."""
    return json.dumps({"memories": [{"content": "a", **memory}]}).encode()


def at(field: str) -> list:
    return ["body", "memories", 0, field]


@pytest.mark.parametrize(
    "path,body,status,loc,says",
    [
        ("/v1/retrieve", b'{"query": "\xff\xfe abc"}', 422, ["body"], "not UTF-8: byte 0xff at character 12"),
        ("/v1/memories", b'{"memories": [{"content": "\xe3\x81\x82\xc3"}]}', 422, ["body"], "at character 29"),
        ("/v1/retrieve", NESTED, 422, ["body"], "nested deeper"),
        ("/v1/memories", b'{"memories": ' + NESTED + b"}", 422, ["body"], "nested deeper"),
        ("/v1/retrieve", b'{"query": ', 422, ["body", 10], "malformed JSON at character 10"),
        ("/v1/retrieve", b"", 422, ["body"], "required"),
        ("/v1/retrieve", b'{"query": "x", "options": {"limit": 0}}', 422,
         ["body", "options", "limit"], "must be between 1 and 100"),
        ("/v1/memories", one(metadata={"n": 1e400}).replace(b"Infinity", b"1e400"), 422,
         at("metadata"), "n: not a finite number"),
        ("/v1/memories", one(expires_at=PAST), 422, at("expires_at"), "must be in the future"),
        ("/v1/memories", one(created_at=LATER, expires_at=EARLIER), 422, at("expires_at"),
         "must be after created_at"),
        ("/v1/memories", one(id="m", links=[{"to": "m"}]), 422, at("links"), "link to itself"),
        ("/v1/memories", one() + b" " * 9_000_000, 413, ["body"], "larger than"),
    ],
)  # fmt: skip
async def test_a_body_the_app_refuses_is_json_naming_where(client, path, body, status, loc, says):
    headers = {"content-type": "application/json"}
    r = await client.post(path, content=body, headers=headers)
    assert r.status_code == status, r.text
    (err,) = [e for e in r.json()["detail"] if e["loc"] == loc]
    assert says in err["msg"], err
    assert not err["msg"].startswith(("Value error", "Input should", "Field required")), err


@pytest.mark.parametrize(
    "url,loc,says",
    [
        ("/v1/memories?namespace=default&cursor=zzz", ["query", "cursor"], "not a cursor"),
        ("/v1/memories?namespace=default&limit=0", ["query", "limit"], "must be greater"),
        ("/v1/memories?namespace=a%20b", ["query", "namespace"], ""),
        # A NUL in a thread was a 500 (PostgreSQL text holds none; found by the fuzzer).
        ("/v1/memories?namespace=default&thread=G%00x", ["query", "thread"], "NUL"),
        ("/v1/runs/not-a-uuid", ["path", "run_id"], ""),
    ],
)
async def test_a_query_or_path_the_app_refuses_names_it(client, url, loc, says):
    r = await client.get(url)
    assert r.status_code == 422, r.text
    (err,) = [e for e in r.json()["detail"] if e["loc"] == loc]
    assert says in err["msg"] and err["msg"][:1].islower(), err


def _raw(url: str, request: bytes) -> tuple[int, dict]:
    """One request's bytes as sent, the first answer's status and JSON body."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as s:
        s.sendall(request)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    head, _, body = got.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    ctype = [h for h in lines[1:] if h.lower().startswith(b"content-type:")]
    assert ctype and b"application/json" in ctype[0], head
    length = int([h for h in lines[1:] if h.lower().startswith(b"content-length:")][0].split()[1])
    return status, json.loads(body[:length])


_POST = b"POST /v1/retrieve HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"


SHORT = _POST + b"Content-Length: 12\r\n\r\n" + b'{"query": "a"}  and the rest'
NOT_A_NUMBER = _POST + b"Content-Length: twelve\r\n\r\n" + b'{"query": "a"}'
BROKEN_CHUNK = _POST + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"


@pytest.mark.parametrize(
    "request_bytes,loc,says",
    [
        # A Content-Length shorter than the body, kept alive: the rest is no request.
        (SHORT, ["header", "content-length"], "shorter than the body"),
        (NOT_A_NUMBER, ["request"], "Content-Length that is not a number"),
        (BROKEN_CHUNK, ["request"], "broken chunk"),
    ],
)
def test_a_request_the_server_cannot_read_is_json_naming_where(served, request_bytes, loc, says):
    status, body = _raw(served, request_bytes)
    assert status == 422
    (err,) = body["detail"]
    assert err["loc"] == loc and says in err["msg"], err


def test_a_content_length_shorter_than_a_closed_body_is_the_bodys_json_error(served):
    status, body = _raw(
        served,
        _POST + b"Connection: close\r\nContent-Length: 10\r\n\r\n" + b'{"query": "hi there"}',
    )
    assert status == 422 and body["detail"][0]["loc"][0] == "body", body


@pytest.mark.parametrize(
    "pydantic,ours",
    [
        ("Value error, must be in the future", "must be in the future"),
        ("Input should be a valid integer", "must be a valid integer"),
        ("Field required", "required"),
        ("List should have at most 3 items", "must have at most 3 items"),
        ("String is too long", "string is too long"),
        ("ISO 8601 text", "ISO 8601 text"),
        ("NaN is no number", "NaN is no number"),
    ],
)
def test_messages_have_one_style(pydantic, ours):
    assert styled(pydantic) == ours
