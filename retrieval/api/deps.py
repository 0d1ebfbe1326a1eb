"""What routes receive: the runtime and the caller's namespace scope (bearer keys)."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Header, Request

from retrieval.errors import Forbidden, StoreUnavailable, Unauthorized
from retrieval.runtime import Runtime


async def get_runtime(request: Request) -> Runtime:
    """The shared resources, or 503 while the service starts (or could not reach PostgreSQL)."""
    rt: Runtime | None = getattr(request.app.state, "runtime", None)
    if rt is None:
        raise StoreUnavailable("the service is starting or could not reach PostgreSQL")
    return rt


def find_key(
    keys: dict[str, frozenset[str] | None], token: str
) -> tuple[bool, frozenset[str] | None]:
    """Look a token up comparing in constant time (a timing side channel would leak keys)."""
    found, scope = False, None
    for key, namespaces in keys.items():
        if hmac.compare_digest(key.encode(), token.encode()):
            found, scope = True, namespaces
    return found, scope


def bearer_token(authorization: str | None) -> str | None:
    """The key of an `Authorization: Bearer <key>` header (None without one)."""
    if authorization and authorization[:7].lower() == "bearer ":
        return authorization[7:].strip() or None
    return None


async def get_scope(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> frozenset[str] | None:
    """None = any namespace; a set = only these. 401 when keys are configured and none fits."""
    keys: dict[str, frozenset[str] | None] = request.app.state.api_keys
    if not keys:
        return None
    token = bearer_token(authorization)
    found, scope = find_key(keys, token) if token else (False, None)
    if not found:
        raise Unauthorized("missing or unknown API key (Authorization: Bearer <key>)")
    return scope


def check_scope(scope: frozenset[str] | None, namespace: str) -> None:
    """403 unless the caller's key may use namespace."""
    if scope is not None and namespace not in scope:
        raise Forbidden(f"this API key may not use namespace {namespace!r}")


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
ScopeDep = Annotated[frozenset[str] | None, Depends(get_scope)]
