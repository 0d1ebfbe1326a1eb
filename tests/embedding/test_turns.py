"""A conversation turn's vector: the mean of its own and of its vector after the turn it follows
(what it replies to, else the turn before it in its thread); the vector legs score it by inner
product, the mean of the two cosines."""

from datetime import UTC, datetime

import numpy as np
from pgvector import Vector

from db.memories import StoredTurn
from retrieval.ingest.memory_in import parse_items
from retrieval.ingest.recipe import PREDECESSOR_CHARS, batch_predecessors, plan, turn_text
from retrieval.search.vector import EXACT_VECTOR_SQL, VECTOR_SQL
from tests.helpers import ingest_items as _ingest

ASK = "Where did you go last weekend?"
ANSWER = "To the lake, with my sister."


def _at(minute: int) -> str:
    return f"2026-01-10T10:{minute:02d}:00+00:00"


async def _vectors(rt, ns) -> dict[str, np.ndarray]:
    async with rt.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT external_id, embedding FROM memories WHERE namespace = $1", ns
        )
    return {r["external_id"]: np.asarray(r["embedding"].to_numpy()) for r in rows}


def _mean_of(rt, own: str, before: str) -> np.ndarray:
    a, b = rt.embedder.embed_documents([own, f"{before}\n{own}"])
    return (a + b) / 2


async def test_a_turn_is_stored_as_the_mean_of_itself_alone_and_after_the_turn_before_it(rt, ns):
    await _ingest(rt, ns, [{"id": "q", "content": ASK, "thread": "s1", "created_at": _at(0)}])
    await _ingest(
        rt,
        ns,
        [
            {"id": "a", "content": ANSWER, "thread": "s1", "created_at": _at(1)},
            {"id": "solo", "content": ANSWER},
            # Another thread's turn is not its context.
            {"id": "elsewhere", "content": ANSWER, "thread": "s2", "created_at": _at(2)},
        ],
    )
    got = await _vectors(rt, ns)
    own = rt.embedder.embed_documents([ANSWER])[0]
    assert np.allclose(got["a"], _mean_of(rt, ANSWER, ASK), atol=2e-3)
    assert not np.allclose(got["a"], own, atol=2e-2)
    for plain in ("solo", "elsewhere", "q"):  # nothing before them: their own vector
        assert np.isclose(np.linalg.norm(got[plain]), 1.0, atol=1e-3)
    assert np.allclose(got["solo"], own, atol=2e-3)
    assert np.allclose(got["elsewhere"], own, atol=2e-3)


async def test_a_reply_follows_what_it_replies_to_in_the_same_write_or_stored(rt, ns):
    await _ingest(rt, ns, [{"id": "stored-q", "content": "How was the concert?"}])
    await _ingest(
        rt,
        ns,
        [
            {"id": "q", "content": ASK, "thread": "t", "created_at": _at(0)},
            {
                "id": "noise",
                "content": "Hold on, my phone is ringing.",
                "thread": "t",
                "created_at": _at(1),
            },
            # Its thread's turn before it is `noise`; what it replies to wins.
            {
                "id": "a",
                "content": ANSWER,
                "thread": "t",
                "created_at": _at(2),
                "links": [{"to": "q", "label": "reply_to"}],
            },
            {
                "id": "b",
                "content": "Loud, and wonderful.",
                "links": [{"to": "stored-q", "label": "reply_to"}],
            },
            # A reply to a memory nobody stored falls back on its thread.
            {
                "id": "c",
                "content": "Sure.",
                "thread": "t",
                "created_at": _at(3),
                "links": [{"to": "never-stored", "label": "reply_to"}],
            },
        ],
    )
    got = await _vectors(rt, ns)
    assert np.allclose(got["a"], _mean_of(rt, ANSWER, ASK), atol=2e-3)
    assert np.allclose(
        got["b"], _mean_of(rt, "Loud, and wonderful.", "How was the concert?"), atol=2e-3
    )
    assert np.allclose(got["c"], _mean_of(rt, "Sure.", ANSWER), atol=2e-3)


async def test_the_vector_legs_score_a_turn_by_the_mean_of_its_two_cosines(rt, ns):
    await _ingest(
        rt,
        ns,
        [
            {"id": "q", "content": ASK, "thread": "s", "created_at": _at(0)},
            {"id": "a", "content": ANSWER, "thread": "s", "created_at": _at(1)},
        ],
    )
    query = rt.embedder.embed_query("a trip to the lake")
    own, after = rt.embedder.embed_documents([ANSWER, f"{ASK}\n{ANSWER}"])
    expect = {"a": (float(query @ own) + float(query @ after)) / 2, "q": None}
    async with rt.pool.acquire() as conn:
        for sql in (VECTOR_SQL, EXACT_VECTOR_SQL):
            rows = await conn.fetch(sql, ns, [], [], None, None, Vector(query), 10)
            scores = {r["external_id"]: r["score"] for r in rows}
            assert abs(scores["a"] - expect["a"]) < 2e-3
            # A memory with nothing before it scores its cosine.
            q_alone = float(query @ rt.embedder.embed_documents([ASK])[0])
            assert abs(scores["q"] - q_alone) < 2e-3


def test_turns_in_one_write_follow_by_time_then_position():
    items = parse_items(
        [
            {"id": "3", "content": "c", "thread": "t", "created_at": _at(3)},
            {"id": "1", "content": "a", "thread": "t", "created_at": _at(1)},
            {"id": "1b", "content": "a'", "thread": "t", "created_at": _at(1)},
            {"id": "x", "content": "x", "thread": "u", "created_at": _at(2)},
            {"id": "now", "content": "n", "thread": "t"},
        ]
    )
    before = batch_predecessors(items, range(len(items)))
    # 3 follows the later of the two at 10:01; those two, at one instant, follow nothing;
    # a turn without a time counts as now, after all of them.
    assert before == {0: 2, 4: 0}
    assert batch_predecessors(items, [4]) == {4: 0}


async def test_the_context_is_the_end_of_the_turn_before_and_the_cost_estimate_counts_it(rt, ns):
    long_before = StoredTurn("Title", "x" * 3000, datetime(2026, 1, 1, tzinfo=UTC))
    text = turn_text(long_before, "own words")
    assert text.endswith("x\nown words") and len(text) == PREDECESSOR_CHARS + len("\nown words")
    assert (
        turn_text(long_before, "y" * 5000).endswith("y")
        and len(turn_text(long_before, "y" * 5000)) == 2000
    )
    # The plan's texts (what is embedded, and what the cost estimate counts): a turn after the
    # stored turn it follows is embedded alone and after it; a note alone.
    await _ingest(rt, ns, [{"id": "t1", "content": "a turn", "thread": "t", "created_at": _at(0)}])
    items = parse_items(
        [{"content": "the next", "thread": "t", "created_at": _at(1)}, {"content": "a note"}]
    )
    planned = await plan(rt.pool, ns, items)
    assert planned.texts == ["the next", "a note", "a turn\nthe next"]
