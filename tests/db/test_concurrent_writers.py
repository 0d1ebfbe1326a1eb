"""Two writers at once: statistics never drift, nothing deadlocks into a 500.

Before: the existing-row snapshot was read outside the write transaction, so two writers of
the same ids both counted the change; `[a, b]` and `[b, a]` written at once could deadlock
(`DeadlockDetectedError` -> 500, no retry).
"""

import asyncio
import random

import pytest

# Checks the BM25 bookkeeping of a namespace against a recount from its rows; returns the
# number of mismatching terms, and both document counts and token sums.
RECOUNT = """
WITH live AS (SELECT count(*) AS docs, coalesce(sum(token_count), 0) AS tokens FROM memories WHERE namespace = $1),
     want AS (SELECT term, count(*) AS df FROM postings WHERE namespace = $1 GROUP BY term),
     have AS (SELECT term, df FROM term_df WHERE namespace = $1 AND df <> 0)
SELECT (SELECT count(*) FROM want FULL JOIN have USING (term) WHERE want.df IS DISTINCT FROM have.df) AS bad_terms,
       (SELECT docs FROM live) AS docs, (SELECT tokens FROM live) AS tokens,
       (SELECT doc_count FROM namespace_stats WHERE namespace = $1) AS doc_count,
       (SELECT total_tokens FROM namespace_stats WHERE namespace = $1) AS total_tokens,
       (SELECT count(*) FROM (SELECT m.id, k FROM memories m, jsonb_object_keys(m.term_tf) k
                              WHERE m.namespace = $1) x) AS tf_keys,
       (SELECT count(*) FROM postings WHERE namespace = $1) AS postings"""

WORDS = [
    "ジム",
    "筋トレ",
    "会議",
    "設計",
    "レビュー",
    "カレー",
    "旅行",
    "京都",
    "読書",
    "映画",
    "散歩",
    "猫",
    "コーヒー",
    "プロジェクト",
    "締切",
    "予算",
    "東京",
    "大阪",
    "雨",
    "温泉",
]


def _batch(rng: random.Random, writer: int) -> list[dict]:
    ids = rng.sample([f"m{i}" for i in range(12)], k=rng.randint(3, 8))
    return [
        {
            "id": i,
            "content": "と".join(rng.sample(WORDS, k=rng.randint(1, 6))) + f"。writer {writer}",
        }
        for i in ids
    ]


@pytest.mark.parametrize("seed", [1, 2])
async def test_twenty_concurrent_writers_over_overlapping_ids(client, rt, ns, seed):
    rng = random.Random(seed)
    bodies = [{"namespace": ns, "memories": _batch(rng, w)} for w in range(20)]
    # Rounds of writers started together, with archive and feedback racing them.
    for _ in range(3):
        rs = await asyncio.gather(*(client.post("/v1/memories", json=b) for b in bodies))
        assert [r.status_code for r in rs] == [200] * 20, [
            r.text for r in rs if r.status_code != 200
        ]
        rng.shuffle(bodies)
        for b in bodies:
            b["memories"] = _batch(rng, rng.randint(0, 99))
    async with rt.pool.acquire() as conn:
        got = await conn.fetchrow(RECOUNT, ns)
    print(dict(got))
    assert got["bad_terms"] == 0
    assert got["doc_count"] == got["docs"] and got["total_tokens"] == got["tokens"]
    assert got["tf_keys"] == got["postings"]
    assert 3 <= got["docs"] <= 12


async def test_statistics_follow_updates_archives_and_deletes(rt, ns):
    """Triggers count inserts, changed texts and deletes; archiving changes nothing."""
    from retrieval.ingest.memory_in import parse_items

    async def put(items):
        await rt.writer.write(parse_items(items), ns)

    await put([{"id": "a", "content": "ジムで筋トレ"}, {"id": "b", "content": "ジムで会議"}])
    await put([{"id": "a", "content": "京都で読書"}])
    async with rt.pool.acquire() as conn:
        await conn.execute(
            "UPDATE memories SET is_archived = true WHERE namespace = $1 AND external_id = 'b'", ns
        )
        assert (await conn.fetchrow(RECOUNT, ns))["bad_terms"] == 0
        await conn.execute("DELETE FROM memories WHERE namespace = $1 AND external_id = 'b'", ns)
        got = await conn.fetchrow(RECOUNT, ns)
        df = dict(
            await conn.fetch("SELECT term, df FROM term_df WHERE namespace = $1 AND df <> 0", ns)
        )
    assert got["bad_terms"] == 0 and got["doc_count"] == got["docs"] == 1
    assert "ジム" not in df and df.get("京都") == 1
