"""What people ask, end to end over HTTP on the real database: a window open on one side, a
name written in another script, the latest fact of a question about now, and scores that say
what the list's order says; and the side of a chat a question asks for."""

import pytest

from tests.helpers import at_noon

MEMORIES = [
    (
        "sato-budget",
        "佐藤さんは会議で、来期の広告予算を2割削るべきだと主張していた。",
        "2026-10-01",
    ),
    ("ueno-budget", "上野さんは、予算は今のままでいいという意見だった。", "2026-10-02"),
    ("sato-leave", "佐藤さんは来月から育休に入る。", "2026-10-03"),
    ("michael-gift", "Michael brought back maple cookies from his trip to Montreal.", "2026-09-10"),
    ("michael-wedding", "マイケルは来年の春に結婚するらしい。", "2026-09-11"),
    ("aoki-gift", "青木さんから沖縄のお土産にちんすこうをもらった。", "2026-09-12"),
    ("kimura-gift", "木村さんから山梨のお土産に信玄餅をもらった。", "2026-09-13"),
    ("osaka", "Finally moved to Osaka — the new apartment is close to Tenma.", "2023-03-20"),
    (
        "kyoto",
        "Moved to Kyoto this weekend; the train to Osaka only takes half an hour.",
        "2024-06-09",
    ),
    ("parents", "My parents still live in Nagoya.", "2025-01-12"),
    ("trip-sep", "9月の連休に金沢へ旅行した。兼六園がきれいだった。", "2026-09-21"),
    ("trip-jul", "7月に沖縄へ旅行した。海がきれいだった。", "2026-07-18"),
]
NOW = "2026-11-22T12:00:00+09:00"


async def _ask(client, ns, query):
    r = await client.post(
        "/v1/retrieve",
        json={"query": query, "namespace": ns, "options": {"limit": 10, "now": NOW}},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    scores = [x["score"] for x in body["results"]]
    assert scores == sorted(scores, reverse=True), (query, scores)  # honest order, every time
    for x in body["results"]:
        assert x["score"] >= 0.05 or x["relevance"] == "low"
        assert x["relevance"] in ("high", "medium", "low")  # one scale; the window's own field
    if body["results"] and body["metadata"]["answered"] is not None:
        first = body["results"][0]["relevance"] in ("high", "medium")
        assert body["metadata"]["answered"]["answered"] == first, body["metadata"]["answered"]
    return body


async def test_what_people_ask(client, ns):
    r = await client.post(
        "/v1/memories",
        json={
            "namespace": ns,
            "memories": at_noon(MEMORIES),
        },
    )
    assert r.status_code == 200, r.text

    # a name in Latin letters finds 佐藤, above the budget of someone else
    got = await _ask(client, ns, "What did Sato say about the budget?")
    ids = [x["id"] for x in got["results"]]
    assert "sato-budget" in ids[:2] and ids.index("sato-budget") < ids.index("ueno-budget"), ids
    assert "names Sato" in got["results"][ids.index("sato-budget")]["reason"]
    assert "names none of the people" in got["results"][ids.index("ueno-budget")]["reason"]

    # katakana finds the Latin-script name, above other people's souvenirs
    got = await _ask(client, ns, "マイケルのお土産は何だった？")
    assert "michael-gift" in [x["id"] for x in got["results"][:3]]

    # a question about now: the newest move first, saying so; the parents' city is theirs
    got = await _ask(client, ns, "where do I live now?")
    ids = [x["id"] for x in got["results"]]
    assert ids.index("kyoto") < ids.index("osaka"), ids
    assert "newest of" in next(x for x in got["results"] if x["id"] == "kyoto")["reason"]

    # 9月以降: a window open at its end; the September trip inside, July's outside and below
    got = await _ask(client, ns, "9月以降の旅行")
    window = got["metadata"]["query_intent"]["time_range"]
    assert window["start"].startswith("2026-09-01") and window["end"] is None
    ids = [x["id"] for x in got["results"]]
    assert ids[0] == "trip-sep" and ids.index("trip-jul") > 0
    july = next(x for x in got["results"] if x["id"] == "trip-jul")
    assert july["window"] == "outside" and got["results"][0]["window"] == "inside"


CHAT = [
    ("c1", "user", "My cookies need something more, so I've been trying turbinado sugar in them."),
    (
        "c2",
        "assistant",
        "Turbinado sugar is a great choice! For chocolate chip cookies that need something "
        "extra, pair it with brown butter, flaky salt or a little espresso powder.",
    ),
    ("c3", "user", "Can you find me the phone number of the Speyer tourism board?"),
    (
        "c4",
        "assistant",
        "The Speyer tourism board's phone number is +49 6232 142392, as I found for you.",
    ),
]


async def test_the_side_of_the_chat_asked_for(client, ns):
    """A chat stored turn by turn, once with each turn's role in its metadata and once without:
    a question about the asker's own life halves the assistant's turns' scores (and says so),
    one about what the assistant said the user's; the other side's turns, and every turn where
    no role is known, keep theirs. The intent says which side it read."""
    for space, roles in ((ns, True), (ns + "-plain", False)):
        r = await client.post(
            "/v1/memories",
            json={
                "namespace": space,
                "memories": [
                    {
                        "id": i,
                        "content": c,
                        "metadata": {"role": role} if roles else {},
                        "created_at": f"2026-11-0{n + 1}T12:00:00+09:00",
                    }
                    for n, (i, role, c) in enumerate(CHAT)
                ],
            },
        )
        assert r.status_code == 200, r.text

    async def scores(space, query):
        body = await _ask(client, space, query)
        return body, {x["id"]: x for x in body["results"]}

    question = "My chocolate chip cookies need something extra, any advice?"
    body, got = await scores(ns, question)
    _, plain = await scores(ns + "-plain", question)
    assert body["metadata"]["query_intent"]["speaker"] == "user"
    assert got["c2"]["score"] == pytest.approx(plain["c2"]["score"] * 0.5, rel=1e-3)
    if "put first by its confidence" in got["c1"]["reason"]:  # the confidence reorders, and says so
        assert body["results"][0]["id"] == "c1"
        assert got["c1"]["score"] >= plain["c1"]["score"]
    else:
        assert got["c1"]["score"] == pytest.approx(plain["c1"]["score"], rel=1e-3)
    assert "said by the other side of the chat (x0.50)" in got["c2"]["reason"]
    assert "other side" not in plain["c2"]["reason"]
    question = "What was the phone number you found for the tourism board?"
    body, got = await scores(ns, question)
    _, plain = await scores(ns + "-plain", question)
    assert body["metadata"]["query_intent"]["speaker"] == "assistant"
    assert body["results"][0]["id"] == "c4"
    assert got["c4"]["score"] == pytest.approx(plain["c4"]["score"], rel=1e-3)
    assert got["c3"]["score"] == pytest.approx(plain["c3"]["score"] * 0.5, rel=1e-3)
