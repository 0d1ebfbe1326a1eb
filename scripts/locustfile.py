"""Locust load for POST /v1/retrieve: mixed Japanese/English, with a realistic share of temporal,
keyword (factual) and conceptual queries, and a few with recent conversation.

    locust -f scripts/locustfile.py --host http://127.0.0.1:8000
Set RETRIEVAL_LOAD_NAMESPACE to aim at another namespace (default: default).
"""

from __future__ import annotations

import os
import random

from locust import HttpUser, between, task

NAMESPACE = os.environ.get("RETRIEVAL_LOAD_NAMESPACE", "default")

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
    wait_time = between(0.0, 0.05)

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
