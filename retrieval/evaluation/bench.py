"""`retrieval bench`: load N memories into a bench database, then measure latency per stage
(in-process) and end to end over HTTP.

Synthetic memories are pairs of Japanese/English fragments with timestamps over two years.
Each fragment is embedded once and each memory's vector is the normalised sum of its fragments'
vectors plus a little noise: vectors live where the text's embeddings live, at any N, without
embedding N texts. A second run at the same N reuses the loaded data.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import subprocess
import sys
import time
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlparse, urlunparse

import asyncpg
import numpy as np
import psutil

from db import bulk
from db.eval_indexes import GET_HARNESS_KEY, PUT_HARNESS_KEY
from db.memories import MemoryRow
from retrieval.analysis.facts import stored_fact
from retrieval.analysis.time.events import read_event
from retrieval.evaluation.harness import percentiles
from retrieval.ingest.rows import stored_event
from retrieval.models import RetrievalOptions
from retrieval.settings import Settings

logger = logging.getLogger(__name__)

BENCH_DB = "retrieval_bench"
NAMESPACE = "bench"
DATA_VERSION = "bench-v1"

SUBJECTS = [
    "ジムで筋トレをした",
    "ランニングで川沿いを走った",
    "カレーを作った",
    "映画館でSF映画を観た",
    "京都へ旅行した",
    "宏啓さんとResonant Engineの設計レビューをした",
    "Memory Storeのマイグレーションを実行した",
    "pgvectorのHNSWインデックスを再構築した",
    "Grafanaのダッシュボードを設定した",
    "Sprintの計画会議に出た",
    "Context Assemblerのプロンプトを調整した",
    "キーワード検索のBM25を検証した",
    "RTX-4090のサーバーを借りた",
    "Reviewed the GIN index with Sato",
    "Ran a load test against the retrieval service",
    "Cooked pasta for friends",
    "Went hiking near Hakone",
    "Read a book about information retrieval",
    "体調が悪くて一日休んだ",
    "本棚を整理した",
    "新しいキーボードを買った",
    "佳奈さんとランチに行った",
]
DETAILS = [
    "とても良い一日だった。",
    "次回は改善点を試したい。",
    "結果はメモに残した。",
    "p95は思ったより良かった。",
    "少し疲れた。",
    "It went better than expected.",
    "Notes are in the wiki.",
    "チームで共有した。",
    "課題が三つ見つかった。",
    "天気は雨だった。",
    "時間が足りなかった。",
    "次の締切は月末。",
]
# Query stems and tails: combined, nearly every benchmark query is new text (no cache help).
TAILS = [
    "",
    "について",
    "の件",
    "の詳細",
    "はどうだった？",
    "のメモ",
    "を教えて",
    " details",
    " notes",
    "の記録",
    "の結果",
    "の話",
    "で決まったこと",
    "の感想",
    " summary",
    "の振り返り",
]
QUERIES = [
    "先週のジムでの筋トレ",
    "昨日の映画",
    "今月のランニング",
    "2025年3月の設計レビュー",
    "最近の体調",
    "HNSWインデックスの再構築はいつ？",
    "宏啓さんとのレビューは何を話した？",
    "RTX-4090のサーバー",
    "マイグレーションはどうやって実行する？",
    "ダッシュボードの設定手順",
    "BM25とベクトル検索の違い",
    "Resonant Engineとは",
    "what did we learn from the load test",
    "hiking near Hakone last month",
    "カレーの作り方",
    "how to review the GIN index",
]


WARM_UP = 10
MAX_QUERIES = len(QUERIES) * len(TAILS) * 101 - WARM_UP


def bench_queries(n: int, seed: int = 1) -> tuple[list[str], list[str]]:
    """WARM_UP queries to warm a process with, and n others to measure: all distinct, so no
    measured query is answered from a cache the warm-up or an earlier query filled."""
    rng = random.Random(seed)
    if n > MAX_QUERIES:
        raise ValueError(f"at most {MAX_QUERIES} distinct benchmark queries")
    seen: dict[str, None] = {}
    while len(seen) < n + WARM_UP:
        num = "" if rng.random() < 0.5 else " " + str(rng.randrange(100))
        seen.setdefault(f"{rng.choice(QUERIES)}{rng.choice(TAILS)}{num}")
    qs = list(seen)
    return qs[:WARM_UP], qs[WARM_UP:]


def bench_dsn(dsn: str) -> str:
    """The same server, database `retrieval_bench`."""
    u = urlparse(dsn)
    return urlunparse(u._replace(path="/" + BENCH_DB))


async def ensure_database(dsn: str) -> str:
    conn = await asyncpg.connect(dsn)
    try:
        if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", BENCH_DB):
            await conn.execute(f'CREATE DATABASE "{BENCH_DB}"')  # a constant, not user input
    finally:
        await conn.close()
    return bench_dsn(dsn)


async def load(rt: Any, n: int, seed: int = 7) -> tuple[bool, float]:
    """Load n synthetic memories into the bench namespace (reused when already there), through
    the bulk import's staging and publish (db.bulk), indexes rebuilt once at the end."""
    t0 = time.perf_counter()
    key = f"{DATA_VERSION}-{n}-{seed}"
    async with rt.pool.acquire() as conn:
        if await conn.fetchval(GET_HARNESS_KEY, NAMESPACE) == key:
            return True, time.perf_counter() - t0
    frags = SUBJECTS + DETAILS
    frag_vecs = rt.embedder.embed_documents(frags)
    frag_terms = [rt.nlp.terms(f) for f in frags]
    rng = np.random.default_rng(seed)
    prng = random.Random(seed)
    now = datetime.now(rt.analyzer.tz)
    iid = f"bench-{key}"
    async with rt.pool.acquire() as conn:
        # Deletes and index builds at 1M take minutes; the pool's RESET on release undoes this.
        await conn.execute("SET statement_timeout = 0")
        await conn.execute("DELETE FROM memories WHERE namespace = $1", NAMESPACE, timeout=3600)
        await conn.execute("DELETE FROM harness_indexes WHERE namespace = $1", NAMESPACE)
        await bulk.discard(conn, iid)
        await bulk.begin(conn, iid, NAMESPACE)
        batch = 10_000
        for start in range(0, n, batch):
            rows = []
            for i in range(start, min(n, start + batch)):
                a = prng.randrange(len(SUBJECTS))
                b = len(SUBJECTS) + prng.randrange(len(DETAILS))
                v = (
                    frag_vecs[a] * 0.8
                    + frag_vecs[b] * 0.2
                    + rng.normal(0, 0.02, frag_vecs.shape[1])
                )
                terms = frag_terms[a] + frag_terms[b]
                created = now - timedelta(
                    days=min(prng.expovariate(1 / 120), 729), minutes=prng.randrange(1440)
                )
                rows.append(
                    (
                        i + 1,
                        MemoryRow(
                            external_id=f"b{i}",
                            content=(content := f"{frags[a]}。{frags[b]}"),
                            memory_type="episodic",
                            source_type="bench",
                            embedding=(v / np.linalg.norm(v)).astype(np.float32),
                            search_tokens=" ".join(terms),
                            token_count=len(terms),
                            created_at=created,
                            fact=stored_fact(content),
                            # what a write reads of it (the bench's are a diary's: episodic)
                            event=stored_event(read_event(content, created, personal=True)),
                        ),
                    )
                )
            await bulk.stage(conn, iid, rows)
            logger.info("staged %d/%d", min(n, start + batch), n)
        await bulk.publish(conn, iid, NAMESPACE, rebuild=bulk.Rebuild.ALWAYS, timeout_s=4 * 3600)
        await conn.execute(PUT_HARNESS_KEY, NAMESPACE, key)
    return False, time.perf_counter() - t0


async def in_process(
    rt: Any,
    queries: list[str],
    concurrency: int,
    namespace: str = NAMESPACE,
    warm: list[str] | None = None,
) -> dict[str, Any]:
    """Run queries through the orchestrator (after the warm-up ones, unmeasured); latency per
    stage and per source."""
    stages: dict[str, list[float]] = defaultdict(list)
    sem = asyncio.Semaphore(concurrency)
    opts = RetrievalOptions(namespace=namespace, limit=10, log_run=False)
    for q in warm or []:
        await rt.orchestrator.retrieve(q, opts)

    async def one(q: str) -> None:
        async with sem:
            resp = await rt.orchestrator.retrieve(q, opts)
        md = resp.metadata
        for k in ("analyze", "embed", "rerank"):
            stages[k].append(md.stage_latency_ms.get(k, 0.0))
        # the second wave (from its seeds to its last source), the turns around the results
        for k in ("expand", "context"):
            if k in md.stage_latency_ms:
                stages[k].append(md.stage_latency_ms[k])
        for src, rep in md.search_breakdown.items():
            stages[src].append(rep.latency_ms)
        stages["total"].append(md.total_latency_ms)

    t = time.perf_counter()
    await asyncio.gather(*(one(q) for q in queries))
    wall = time.perf_counter() - t
    out = {k: percentiles(v) for k, v in stages.items()}
    return {"stages": out, "rps": round(len(queries) / wall, 2)}


def cpu_seconds(proc: psutil.Process, *, reaped: bool = False) -> float:
    """CPU seconds (user + system) of a process and its live children; with `reaped`, also of
    the children it has already waited for (PostgreSQL's backends that came and went)."""
    total = 0.0
    for p in (proc, *proc.children(recursive=True)):
        try:
            t = p.cpu_times()
        except psutil.Error:  # a child that exited meanwhile
            continue
        total += t.user + t.system
        if reaped and p is proc:
            total += t.children_user + t.children_system
    return total


def is_local(dsn: str) -> bool:
    """Whether the DSN names a server on this machine (a socket directory or loopback)."""
    url = urlparse(dsn)
    host = url.hostname or parse_qs(url.query).get("host", [""])[0]
    return host in ("", "localhost", "127.0.0.1", "::1") or host.startswith("/")


async def server_process(dsn: str) -> psutil.Process | None:
    """The PostgreSQL server's postmaster when it runs on this machine (embedded or local),
    found through a backend's pid; None for a server elsewhere (nothing to measure)."""
    if not is_local(dsn):
        return None
    conn = await asyncpg.connect(dsn)
    try:  # while connected: the backend ends with the connection
        parent = psutil.Process(await conn.fetchval("SELECT pg_backend_pid()")).parent()
    except psutil.Error:
        return None
    finally:
        await conn.close()
    return parent if parent is not None and "postgres" in parent.name().lower() else None


async def over_http(
    dsn: str,
    queries: list[str],
    concurrency: int,
    namespace: str = NAMESPACE,
    port: int = 8799,
    warm: list[str] | None = None,
) -> dict[str, Any]:
    """Start `retrieval serve` on the bench database and measure client-side latency, and the
    CPU the service and (when it runs here) PostgreSQL spend per request: what a capacity model
    needs (cores of service and of database per request/s)."""
    import httpx

    postmaster = await server_process(dsn)
    env = {**os.environ, "DATABASE_URL": dsn, "RETRIEVAL_LOG_RUNS": "false"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "retrieval.cli", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
            deadline = time.time() + 120
            while time.time() < deadline:
                try:
                    if (await c.get("/readyz")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.5)
            for q in warm or []:
                await c.post("/v1/retrieve", json={"query": q, "namespace": namespace})
            lat: list[float] = []
            errors = 0
            sem = asyncio.Semaphore(concurrency)

            async def one(q: str) -> None:
                nonlocal errors
                async with sem:
                    t = time.perf_counter()
                    r = await c.post("/v1/retrieve", json={"query": q, "namespace": namespace})
                    lat.append((time.perf_counter() - t) * 1000.0)
                    errors += r.status_code != 200

            service = psutil.Process(proc.pid)
            cpu0 = (
                cpu_seconds(service),
                cpu_seconds(postmaster, reaped=True) if postmaster else 0.0,
            )
            t = time.perf_counter()
            await asyncio.gather(*(one(q) for q in queries))
            wall = time.perf_counter() - t
            cpu1 = (
                cpu_seconds(service),
                cpu_seconds(postmaster, reaped=True) if postmaster else 0.0,
            )
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    n = max(len(queries), 1)
    return {
        **percentiles(lat),
        "rps": round(len(queries) / wall, 2),
        "errors": errors,
        "service_cpu_ms_per_request": round((cpu1[0] - cpu0[0]) * 1000.0 / n, 2),
        "db_cpu_ms_per_request": (
            round((cpu1[1] - cpu0[1]) * 1000.0 / n, 2) if postmaster is not None else None
        ),
    }


async def run_bench_cli(settings: Settings, args: argparse.Namespace) -> int:
    """The `retrieval bench` command."""
    from retrieval.runtime import open_runtime

    dsn = await asyncio.to_thread(settings.dsn)
    bdsn = await ensure_database(dsn)
    rt = await open_runtime(settings.model_copy(update={"database_url": bdsn, "log_runs": False}))
    try:
        ns = NAMESPACE
        if args.corpus:
            from retrieval.evaluation import ensure_index

            ns = "bench-corpus"
            reused, secs = await ensure_index(rt, args.corpus, ns, args.embeddings)
        else:
            reused, secs = await load(rt, args.memories)
        async with rt.pool.acquire() as conn:
            count = await conn.fetchval("SELECT count(*) FROM memories WHERE namespace = $1", ns)
        print(
            f"{count} memories {'reused' if reused else 'loaded'} in {secs:.1f} s", file=sys.stderr
        )
        warm, queries = bench_queries(args.queries)
        inproc = await in_process(rt, queries, args.concurrency, ns, warm)
    finally:
        await rt.close()
    out: dict[str, Any] = {
        "memories": count,
        "concurrency": args.concurrency,
        "in_process_rps": inproc["rps"],
        "stages": inproc["stages"],
    }
    if not args.no_http:
        out["http"] = await over_http(bdsn, queries, args.concurrency, ns, warm=warm)
    if args.json:
        print(json.dumps(out, ensure_ascii=False))
    else:
        print(
            f"memories: {count}   in-process throughput: {inproc['rps']} q/s (concurrency {args.concurrency})"
        )
        for k, v in out["stages"].items():
            print(
                f"  {k:10s} p50 {v['p50_ms']:7.2f}  p95 {v['p95_ms']:7.2f}  p99 {v['p99_ms']:7.2f} ms"
            )
        if "http" in out:
            h = out["http"]
            print(
                f"  {'http':10s} p50 {h['p50_ms']:7.2f}  p95 {h['p95_ms']:7.2f}  p99 {h['p99_ms']:7.2f} ms"
                f"   {h['rps']} req/s, {h['errors']} errors"
            )
            db = h["db_cpu_ms_per_request"]
            print(
                f"  CPU per request: service {h['service_cpu_ms_per_request']} ms, "
                f"PostgreSQL {'not on this machine' if db is None else f'{db} ms'}"
            )
    return 0
