"""What an MCP search costs over the same REST retrieval: the same questions, asked both ways
against one running `retrieval serve`, alternating, after a warm-up pass (so that both find
the query embeddings cached and the difference is the MCP layer's). Prints p50 / p95 / p99 ms.

    python scripts/mcp_overhead.py http://127.0.0.1:8000 [ROUNDS] [--key KEY] [--namespace NS]
"""

from __future__ import annotations

import argparse
import asyncio
import time

import httpx2
import numpy as np
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from retrieval.client import AsyncRetrievalClient

QUESTIONS = [
    "先週のジムでの筋トレ",
    "HNSWインデックスの再構築はいつ？",
    "プロジェクトXの締切はいつ？",
    "Resonant Engineとは",
    "マイグレーションはどうやって実行する？",
    "ベクトル検索とキーワード検索の違い",
    "what did I do last week",
    "How to restore the database from a backup",
]


def _row(name: str, ms: list[float]) -> str:
    p = np.percentile(np.asarray(ms), [50, 95, 99])
    return f"{name:6s} n={len(ms):4d}  p50 {p[0]:7.2f}  p95 {p[1]:7.2f}  p99 {p[2]:7.2f} ms"


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url")
    ap.add_argument("rounds", type=int, nargs="?", default=20)
    ap.add_argument("--key")
    ap.add_argument("--namespace", default="default")
    args = ap.parse_args()
    headers = {"Authorization": f"Bearer {args.key}"} if args.key else {}
    rest: list[float] = []
    mcp: list[float] = []
    async with (
        AsyncRetrievalClient(args.url, api_key=args.key) as api,
        Client(
            streamable_http_client(
                f"{args.url}/mcp/", http_client=httpx2.AsyncClient(headers=headers, timeout=30)
            )
        ) as tools,
    ):
        for q in QUESTIONS:  # warm-up: embeddings cached, connections open
            await api.retrieve(q, args.namespace)
            await tools.call_tool("search_memories", {"query": q, "namespace": args.namespace})
        for _ in range(args.rounds):
            for q in QUESTIONS:
                t = time.perf_counter()
                await api.retrieve(q, args.namespace, limit=10)
                rest.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                out = await tools.call_tool(
                    "search_memories", {"query": q, "namespace": args.namespace, "limit": 10}
                )
                mcp.append((time.perf_counter() - t) * 1000)
                if out.is_error:
                    raise SystemExit(f"MCP search failed: {out.content}")
    print(_row("REST", rest))
    print(_row("MCP", mcp))
    d = np.asarray(mcp) - np.asarray(rest)
    print(f"MCP - REST, same question back to back: median {np.median(d):.2f} ms")


if __name__ == "__main__":
    asyncio.run(main())
