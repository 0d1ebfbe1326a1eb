"""What routes receive: the runtime and the caller (its key's namespaces, its tenant)."""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Header, Request

from retrieval.api.errors import UNAUTHORIZED_DETAIL
from retrieval.errors import Forbidden, StoreUnavailable, Unauthorized
from retrieval.runtime import Runtime
from retrieval.tenants import key_id, tenant_of


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


@dataclass(frozen=True)
class Caller:
    """Who calls: the namespaces its key may use (None: any) and its key (None: no keys are
    configured). A tenant is the key — what one key asks is paid by that key, however many
    namespaces it names — or, without keys, the namespace."""

    scope: frozenset[str] | None
    key_id: str | None

    def check(self, namespace: str) -> None:
        """403 unless the caller's key may use namespace."""
        if self.scope is not None and namespace not in self.scope:
            raise Forbidden(f"this API key may not use namespace {namespace!r}")

    def tenant(self, namespace: str) -> str:
        """Whose share a request in `namespace` is charged to."""
        return tenant_of(self.key_id, namespace)


async def get_caller(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> Caller:
    """The caller; 401 when keys are configured and none fits."""
    keys: dict[str, frozenset[str] | None] = request.app.state.api_keys
    if not keys:
        return Caller(None, None)
    token = bearer_token(authorization)
    found, scope = find_key(keys, token) if token else (False, None)
    if not found or token is None:
        raise Unauthorized(UNAUTHORIZED_DETAIL)
    return Caller(scope, key_id(token))


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
CallerDep = Annotated[Caller, Depends(get_caller)]
