"""The confidence on the real database, over HTTP: a question beside its twin that nothing answers
(hamster beside cat, table tennis beside tennis, Caroline beside Melanie), in English and
Japanese. The answerable one is more confident than its twin, and the twin is never `high` nor
`answered`; every score and confidence stays in [0, 1]."""

import pytest

from tests.helpers import at_noon

MEMORIES = [
    ("cat", "user: My cat Luna loves sleeping on the windowsill all afternoon.", "2026-10-01"),
    ("tennis", "user: I play tennis every Saturday morning with my neighbour Ken.", "2026-10-02"),
    (
        "race",
        "Melanie: I ran a charity race for mental health last Saturday. It made me "
        "realize how important it is to take care of myself.",
        "2026-10-03",
    ),  # fmt: skip
    ("painting", "Caroline: I finished a painting of the lake at sunrise yesterday.", "2026-10-04"),
    ("neko", "うちの猫の名前はミケ。もう十歳になる。", "2026-10-05"),
    ("tenisu", "毎週土曜日の朝に近所の公園でテニスをしている。", "2026-10-06"),
    (
        "race-ja",
        "メラニー: チャリティーレースを走って、自分を大切にすることの大切さに気づいた。",
        "2026-10-07",
    ),
    ("work", "user: My new job at the bakery starts next Monday.", "2026-10-08"),
]
NOW = "2026-11-22T12:00:00+09:00"

CASES = [
    ("What is the name of my cat?", "What is the name of my hamster?", "cat"),
    ("How often do I play tennis?", "How often do I play table tennis?", "tennis"),
    (
        "What did Melanie realize after her charity race?",
        "What did Caroline realize after her charity race?",
        "race",
    ),
    ("うちの猫の名前は？", "うちのハムスターの名前は？", "neko"),
    ("テニスはどのくらいしている？", "卓球はどのくらいしている？", "tenisu"),
    (
        "メラニーはチャリティーレースの後で何に気づいた？",
        "キャロラインはチャリティーレースの後で何に気づいた？",
        "race-ja",
    ),
]


async def _first(client, ns, query):
    r = await client.post(
        "/v1/retrieve",
        json={"query": query, "namespace": ns, "options": {"limit": 5, "now": NOW}},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    for x in body["results"]:
        assert 0.0 <= x["score"] <= 1.0
        assert x["confidence"] is not None and 0.0 <= x["confidence"] <= 1.0
    return body["results"], body["metadata"]["answered"]


@pytest.fixture
async def store(client, ns):
    r = await client.post("/v1/memories", json={"namespace": ns, "memories": at_noon(MEMORIES)})
    assert r.status_code == 200, r.text
    return ns


@pytest.mark.parametrize(("answerable", "twin", "answer"), CASES)
async def test_a_twin_is_less_confident_than_its_question(client, store, answerable, twin, answer):
    got, answered = await _first(client, store, answerable)
    assert got[0]["id"] == answer
    twin_got, twin_answered = await _first(client, store, twin)
    assert twin_got, twin
    assert twin_got[0]["confidence"] < got[0]["confidence"], (twin, twin_got[0])
    assert twin_got[0]["relevance"] != "high", (twin, twin_got[0])
    assert not twin_answered["answered"], (twin, twin_answered)
    assert 0.0 < twin_answered["threshold"] < 1.0


CHAT = [
    ("c0", "user", "最近テニスを始めたんだ。", None),
    ("c1", "assistant", "いいですね！テニスはいつしているんですか？", "c0"),
    ("c2", "user", "毎週土曜日の朝に近所のコートでしている。", "c1"),
    ("c3", "assistant", "素敵な習慣ですね。ラケットは何を使っていますか？", "c2"),
    ("c4", "user", "What should I cook tonight?", None),
    ("c5", "assistant", "How about pasta? When do you usually play tennis, by the way?", "c4"),
    ("c6", "user", "I play tennis on Sunday afternoons with Ken.", "c5"),
]


@pytest.fixture
async def chat(client, ns):
    memories = [
        {
            "id": i, "content": f"{role}: {text}", "metadata": {"role": role},
            "created_at": f"2026-11-01T10:0{n}:00+09:00", "thread": "s1" if n < 4 else "s2",
            "links": [{"to": to, "label": "reply_to"}] if to else [],
        }
        for n, (i, role, text, to) in enumerate(CHAT)
    ]  # fmt: skip
    r = await client.post("/v1/memories", json={"namespace": ns, "memories": memories})
    assert r.status_code == 200, r.text
    return ns


@pytest.mark.parametrize(
    ("question", "answer", "echo"),
    [
        ("テニスはいつしている？", "c2", "c1"),
        ("When do I play tennis?", "c6", "c5"),
        ("How often do I play tennis?", "c6", "c5"),
    ],
)
async def test_the_answer_is_surer_than_the_assistant_asking_it(
    client, chat, question, answer, echo
):
    got, answered = await _first(client, chat, question)
    by_id = {x["id"]: x for x in got}
    assert got[0]["id"] == answer, got
    assert answered["answered"], answered
    assert echo in by_id and by_id[echo]["confidence"] < by_id[answer]["confidence"], by_id
    assert by_id[echo]["relevance"] != "high"
