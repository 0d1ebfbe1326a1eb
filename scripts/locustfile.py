"""Locust load for POST /v1/retrieve: mixed Japanese/English, with a realistic share of temporal,
keyword (factual) and conceptual queries, and a few with recent conversation.

    locust -f scripts/locustfile.py --host http://127.0.0.1:8000 ContextAssembler
Set RETRIEVAL_LOAD_NAMESPACE to aim at another namespace (default: default), and
RETRIEVAL_LOAD_WAIT_S=LOW-HIGH for the ordinary users' pause between requests in seconds
(default 0-0.05: as fast as they are answered, which saturates this service on 2 cores with
four users; an agent's turn rate is far lower).

`HeavyTenant` (one user, namespace `heavy`, which must hold memories) sends the most expensive
retrieval the default limits allow, each one new (no cache helps): a 2,000-character query,
50 messages of 16,000 characters in all, each naming a stored memory of `heavy` as its
memory_id (50 seeds to expand), limit 100, every added source, expansion, context window 5.
Run the ordinary users with and without it to see what one tenant's cost does to the others:

    scripts/load_test.sh http://127.0.0.1:8000 4 60 ContextAssembler
    scripts/load_test.sh http://127.0.0.1:8000 5 60 ContextAssembler HeavyTenant
"""

from __future__ import annotations

import json
import os
import random
import string

from locust import HttpUser, between, task

NAMESPACE = os.environ.get("RETRIEVAL_LOAD_NAMESPACE", "default")
WAIT_LOW, WAIT_HIGH = (
    float(x) for x in os.environ.get("RETRIEVAL_LOAD_WAIT_S", "0-0.05").split("-")
)

TEMPORAL = [
    "先週のジムでの筋トレ",
    "昨日の映画",
    "今月のランニング",
    "2025年3月の設計レビュー",
    "最近の体調",
    "3日前のランチ",
    "what did I do last week",
    "notes from yesterday",
]
KEYWORD = [
    "HNSWインデックスの再構築はいつ？",
    "宏啓さんがレビューしたのは何？",
    "RTX-4090のサーバーはどこ？",
    "プロジェクトXの締切はいつ？",
    "Who reviewed the GIN index?",
    "When was the load test run?",
]
CONCEPTUAL = [
    "Resonant Engineとは",
    "想起の共鳴について教えて",
    "呼吸のリズムとは何か",
    "What is reciprocal rank fusion?",
]
OTHER = [
    "マイグレーションはどうやって実行する？",
    "ベクトル検索とキーワード検索の違い",
    "ダッシュボードの設定手順",
    "how to restore the database from a backup",
    "compare HNSW and exact search latency",
]


class ContextAssembler(HttpUser):
    wait_time = between(WAIT_LOW, WAIT_HIGH)

    def _retrieve(self, query: str, name: str, conversation: bool = False) -> None:
        body: dict = {"query": query, "namespace": NAMESPACE, "options": {"limit": 10}}
        if conversation:
            body["recent_conversation"] = [
                {"role": "user", "content": "Memory Storeの話の続き"},
                {"role": "assistant", "content": "はい、スキーマの件ですね"},
            ]
        with self.client.post("/v1/retrieve", json=body, name=name, catch_response=True) as r:
            if r.status_code != 200:
                r.failure(f"HTTP {r.status_code}")
            elif r.json()["metadata"]["degraded"]:
                r.failure("degraded: " + ",".join(r.json()["metadata"]["degraded"]))

    @task(3)
    def temporal(self) -> None:
        self._retrieve(random.choice(TEMPORAL), "retrieve temporal")

    @task(4)
    def keyword(self) -> None:
        self._retrieve(random.choice(KEYWORD), "retrieve keyword")

    @task(2)
    def conceptual(self) -> None:
        self._retrieve(random.choice(CONCEPTUAL), "retrieve conceptual")

    @task(1)
    def other(self) -> None:
        self._retrieve(random.choice(OTHER), "retrieve hybrid", conversation=random.random() < 0.3)


def _noise(n: int) -> str:
    """n characters of new text (Japanese and Latin), so that no cache holds it."""
    kana = "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよ"
    pool = kana + string.ascii_lowercase + " "
    return "".join(random.choices(pool, k=n))


# The conversation is made once per user: locust's users share one process and take turns
# (gevent), so text made per request would stall the ordinary users' clocks and be counted as
# the service's latency. Each query is new (its embedding and the conversation text's end,
# which holds it, are never cached).
MESSAGES, CONVERSATION_CHARS = 50, 16_000
_OPTIONS = json.dumps(
    {
        "limit": 100,
        "expand": True,
        "context_window": 5,
        "add_sources": ["recent", "states", "vector_global"],
    }
)


class HeavyTenant(HttpUser):
    """One tenant sending the most expensive request the default limits allow."""

    fixed_count = 1
    wait_time = between(0.0, 0.05)
    conversation = "[]"

    def on_start(self) -> None:
        got = self.client.post(
            "/v1/retrieve",
            json={"query": "会議", "namespace": "heavy", "options": {"limit": MESSAGES}},
            name="heavy setup",
        ).json()
        ids = [r["id"] for r in got.get("results", [])] or [None]
        self.conversation = json.dumps(
            [
                {
                    "role": "user" if i % 2 else "assistant",
                    "content": _noise(CONVERSATION_CHARS // MESSAGES),
                    "memory_id": ids[i % len(ids)],
                }
                for i in range(MESSAGES)
            ]
        )

    @task
    def heavy(self) -> None:
        body = (
            f'{{"query": {json.dumps(_noise(2000))}, "namespace": "heavy", '
            f'"recent_conversation": {self.conversation}, "options": {_OPTIONS}}}'
        )
        with self.client.post(
            "/v1/retrieve",
            data=body.encode(),
            headers={"content-type": "application/json"},
            name="heavy",
            catch_response=True,
        ) as r:
            if r.status_code != 200:  # 429: over its namespace's share (counted, expected)
                r.failure(f"HTTP {r.status_code}")
