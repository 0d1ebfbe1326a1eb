"""What the app does when it serves (opens its own runtime), beside what a test's app does."""

from __future__ import annotations

import asyncio


async def test_a_served_app_freezes_what_it_started_with(settings, rt, monkeypatch):
    """Serving (the app opens its own runtime) moves what it started with out of the
    collector's full passes (gc.freeze); an app handed a runtime (a test's) leaves the process
    as it is."""
    import gc

    from retrieval.api.app import create_app

    frozen: list[bool] = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))
    app = create_app(settings, runtime=rt)
    async with app.router.lifespan_context(app):
        assert frozen == []
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        # It serves at once (/healthz) and opens its runtime in the background.
        await asyncio.wait_for(app.state.ready.wait(), 120)
        assert frozen == [True]
        assert app.state.runtime is not rt
