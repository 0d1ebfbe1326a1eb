"""Clients of the real app over the real runtime (ASGI transport: no port, no network)."""

import httpx
import pytest

from retrieval.api import create_app

KEY_ALL = "key-all-0001"
KEY_TEAM_A = "key-team-a-01"


@pytest.fixture
async def client(rt):
    app = create_app(rt.settings, runtime=rt)
    async with app.router.lifespan_context(app), httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://t"
    ) as c:
        yield c


@pytest.fixture
async def authed(rt):
    """An app with two keys: one for every namespace, one for `team-a` only."""
    s = rt.settings.model_copy(update={"api_keys": f"{KEY_ALL},{KEY_TEAM_A}:team-a"})
    app = create_app(s, runtime=rt)
    async with app.router.lifespan_context(app), httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://t"
    ) as c:
        yield c
