"""Helpers the tests import (fixtures live in conftest.py)."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"

# Time expressions naming dates no datetime holds (each was a 500 or a crash of the analyzer).
UNHOLDABLE_DATES = (
    "3000年前の遺跡",
    "5000 years ago",
    "9999-12-31の予定",
    "0000年5月",
    "1000000日前",
    "99999999週間前",
)

KEY_ALL = "key-all-0001"
KEY_TEAM_A = "key-team-a-01"


@asynccontextmanager
async def app_client(runtime: Any) -> AsyncIterator[httpx.AsyncClient]:
    """An in-process client of the app over `runtime`, its lifespan (job worker ...) running."""
    from retrieval.api import create_app

    app = create_app(runtime.settings, runtime=runtime)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c,
    ):
        yield c


def script_module(name: str) -> Any:
    """A script of scripts/verifier (not a package) imported by its path, for its functions."""
    spec = importlib.util.spec_from_file_location(
        name, ROOT / "scripts" / "verifier" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shared_file(*parts: str) -> Path:
    """A file of the evaluation data beside the repository (tests skip when it is absent)."""
    return SHARED.joinpath(*parts)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running_server(
    dsn: str,
    env: dict[str, str] | None = None,
    ready_s: float = 60.0,
    args: tuple[str, ...] = (),
    cwd: Path = ROOT,
) -> Iterator[str]:
    """`retrieval serve` (with args) on a free loopback port over dsn, run from cwd (where the
    `retrieval` package is first looked for); yields its base URL, stops it after."""
    port = free_port()
    log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"retrieval-serve-{port}.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "retrieval.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *args,
        ],
        cwd=cwd,
        env={**os.environ, "DATABASE_URL": dsn, **(env or {})},
        stdout=log,
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}; see {log.name}")
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"server not ready after {ready_s} s; see {log.name}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def at_noon(rows) -> list[dict[str, Any]]:
    """Memories to write from (id, content, ISO day) rows, each made at noon (+09:00) that day."""
    return [{"id": i, "content": c, "created_at": f"{d}T12:00:00+09:00"} for i, c, d in rows]


def covers(tr, day: str) -> bool:
    """Whether a time range holds noon (+09:00) of an ISO day."""
    from datetime import datetime

    d = datetime.fromisoformat(day + "T12:00:00+09:00")
    return tr is not None and tr.start <= d < tr.end


def dev_case_ok(analyzer, case: dict, now) -> bool:
    """One labelled analyzer case (shared/eval/analyzer*_dev.jsonl): strategy (or strategy_not),
    query type, and the window's covered and excluded days and relative name."""
    from retrieval.analysis.strategy import plan

    intent = analyzer.analyze(case["q"], now)
    strategy = plan(intent).strategy.value
    good = strategy == case["strategy"] if "strategy" in case else strategy != case["strategy_not"]
    if case.get("type"):
        good &= intent.query_type.value == case["type"]
    t = case.get("time")
    tr = intent.time_range
    if t is None:
        return good and tr is None
    good &= all(covers(tr, d) for d in t.get("covers", []))
    good &= not any(covers(tr, d) for d in t.get("excludes", []))
    if t.get("relative"):
        good &= tr is not None and tr.relative == t["relative"]
    return good


NOW_UTC = datetime.now(UTC)


async def ingest_items(rt, ns, items):
    """Store raw item dicts through the write path the API uses."""
    from retrieval.ingest.memory_in import parse_items

    return await rt.writer.write(parse_items(items), ns)


def leg_context(
    rt, ns, query, *, now=None, k=10, vectors=(), seeds=(), long_seeds=frozenset(), **kw
):
    """What a search leg reads for `query` in namespace `ns` (analysed at `now`, if given), and
    what it is given (vectors, seeds): call a leg as `await leg(*ctx)`."""
    from retrieval.models import Filters
    from retrieval.search.run import Given, SearchRun

    run = SearchRun(
        pool=rt.pool,
        intent=rt.analyzer.analyze(query, now),
        filters=Filters(namespace=ns),
        k=k,
        now=now,
        **kw,
    )
    return run, Given(vectors=tuple(vectors), seeds=tuple(seeds), long_seeds=long_seeds)


async def ids_of(rt, query, ns, **kw):
    """The ids a retrieve returns (up to 20), and the response."""
    from retrieval.models import RetrievalOptions

    resp = await rt.orchestrator.retrieve(query, RetrievalOptions(namespace=ns, limit=20, **kw))
    return [r.id for r in resp.results], resp


def write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def asked(query: str = "", *, limit: int = 10, **intent: Any) -> tuple[Any, Any]:
    """What the reranker is asked: a question (its text and any QueryIntent field) and a
    request's options (its limit)."""
    from retrieval.models import QueryIntent, QueryType, RetrievalOptions

    return (
        QueryIntent(query=query, query_type=QueryType.FACTUAL, keywords=(), **intent),
        RetrievalOptions(limit=limit),
    )
