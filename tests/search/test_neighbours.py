"""Each result carries the memories around it (its thread, else its reply chain): context for the
assembler, not competitors in the ranking."""

from datetime import UTC, datetime, timedelta

from db.memories import ARCHIVE_MEMORY
from retrieval.ingest.memory_in import parse_items
from retrieval.models import RetrievalOptions

T0 = datetime(2026, 5, 8, 13, 56, tzinfo=UTC)
NOW = T0 + timedelta(days=30)

SESSION = [
    "Melanie: Hey Caroline! Good to see you! How have you been?",
    "Caroline: Busy, but good. I went to a support group for new painters yesterday.",
    "Melanie: Wow, that's cool! What did you paint there?",
    "Caroline: A sunrise over the lake, my first oil painting.",
    "Melanie: I'd love to see it sometime!",
]


def _turns() -> list[dict]:
    items = [
        {
            "id": f"s1:{i}",
            "content": text,
            "created_at": (T0 + timedelta(seconds=i)).isoformat(),
            "thread": "session_1",
            **({"links": [{"to": f"s1:{i - 1}", "label": "reply_to"}]} if i else {}),
        }
        for i, text in enumerate(SESSION)
    ]
    # A reply chain in no thread: a question, its answer, a reply to the answer.
    chain = [
        "Is the quarterly report due on Friday?",
        "Yes, the quarterly report is due on Friday at noon.",
        "Thanks, I'll send it on Thursday then.",
    ]
    for i, text in enumerate(chain):
        items.append(
            {
                "id": f"c:{i}",
                "content": text,
                "created_at": (T0 + timedelta(days=2, seconds=i)).isoformat(),
                **({"links": [{"to": f"c:{i - 1}", "label": "reply_to"}]} if i else {}),
            }
        )
    return items


async def _ask(rt, ns, q, **kw):
    opts = RetrievalOptions(namespace=ns, now=NOW, limit=3, expand=False, **kw)
    return await rt.orchestrator.retrieve(q, opts)


async def test_a_result_comes_with_the_turns_around_it(rt, ns):
    await rt.writer.write(parse_items(_turns()), ns)
    resp = await _ask(rt, ns, "What did Caroline paint over the lake?")
    top = resp.results[0]
    assert top.id == "s1:3", [r.id for r in resp.results]
    assert [(c.id, c.position) for c in top.context] == [("s1:2", -1), ("s1:4", 1)]
    assert "context" in resp.metadata.stage_latency_ms and not resp.metadata.degraded

    wide = await _ask(rt, ns, "What did Caroline paint over the lake?", context_window=2)
    # two before, and the one turn the session has after it
    assert [(c.id, c.position) for c in wide.results[0].context] == [
        ("s1:1", -2),
        ("s1:2", -1),
        ("s1:4", 1),
    ]

    none = await _ask(rt, ns, "What did Caroline paint over the lake?", context_window=0)
    assert none.results[0].context == [] and "context" not in none.metadata.stage_latency_ms


async def test_an_archived_turn_is_no_context_and_a_reply_chain_stands_in_for_a_thread(rt, ns):
    await rt.writer.write(parse_items(_turns()), ns)
    async with rt.pool.acquire() as conn:
        await conn.execute(ARCHIVE_MEMORY, ns, "s1:2")
    resp = await _ask(rt, ns, "What did Caroline paint over the lake?")
    top = resp.results[0]
    assert top.id == "s1:3" and [(c.id, c.position) for c in top.context] == [
        ("s1:1", -1),
        ("s1:4", 1),
    ]
    # No thread: what it replies to, and the reply to it.
    resp = await _ask(rt, ns, "quarterly report due Friday at noon")
    top = resp.results[0]
    assert top.id == "c:1", [r.id for r in resp.results]
    assert [(c.id, c.position) for c in top.context] == [("c:0", -1), ("c:2", 1)]
    wide = await _ask(rt, ns, "Thanks, I'll send it on Thursday then", context_window=2)
    first = next(r for r in wide.results if r.id == "c:2")
    assert [(c.id, c.position) for c in first.context] == [("c:0", -2), ("c:1", -1)]


async def test_context_window_bounds_over_http(client, ns):
    for bad in (-1, 6, "x"):
        r = await client.post(
            "/v1/retrieve", json={"query": "q", "namespace": ns, "options": {"context_window": bad}}
        )
        assert r.status_code == 422 and "context_window" in r.text
    r = await client.post(
        "/v1/memories",
        json={
            "namespace": ns,
            "memories": [
                {"id": f"m{i}", "content": t, "thread": "t"} for i, t in enumerate(SESSION)
            ],
        },
    )
    assert r.status_code == 200, r.text
    r = await client.post(
        "/v1/retrieve",
        json={"query": "sunrise over the lake", "namespace": ns, "options": {"limit": 1}},
    )
    assert r.status_code == 200
    ctx = r.json()["results"][0]["context"]
    assert {c["position"] for c in ctx} <= {-1, 1} and ctx and set(ctx[0]) >= {"id", "content"}
