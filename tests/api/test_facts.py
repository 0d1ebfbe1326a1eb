"""A memory says, when read back, which attribute it states and which newer memory states it
again (GET /v1/memories/{id}, GET /v1/memories), on the real database."""

from tests.helpers import at_noon

MEMORIES = [
    ("sapporo", "札幌に引っ越した。冬は雪かきが大変そう。", "2022-04-02"),
    ("fukuoka", "Moved to Fukuoka last month. The ramen near the new flat is great.", "2025-05-10"),
    ("friend", "友達の美咲が大阪に引っ越した。", "2026-04-01"),
    ("allegra", "花粉症の薬はアレグラを飲んでいる。", "2024-02-20"),
    ("coldmed", "風邪薬を飲み始めた。", "2026-01-10"),
    ("ramen", "金曜日に駅前でラーメンを食べた。", "2026-11-20"),
]


async def _get(client, ns, i):
    r = await client.get(f"/v1/memories/{i}", params={"namespace": ns})
    assert r.status_code == 200, r.text
    return r.json()


async def test_the_newer_statement_of_an_attribute_supersedes_the_older(client, ns):
    r = await client.post(
        "/v1/memories",
        json={
            "namespace": ns,
            "memories": at_noon(MEMORIES),
        },
    )
    assert r.status_code == 200, r.text
    # a move written in Japanese, then one in English: one fact, the newer supersedes
    old, new = await _get(client, ns, "sapporo"), await _get(client, ns, "fukuoka")
    assert old["fact"] == new["fact"] == "residence"
    assert old["superseded_by"] == "fukuoka" and new["superseded_by"] is None
    # a friend's move is the friend's; a meal states nothing
    friend, ramen = await _get(client, ns, "friend"), await _get(client, ns, "ramen")
    assert friend["fact"] == "residence:friend" and friend["superseded_by"] is None
    assert ramen["fact"] is None and ramen["superseded_by"] is None
    # a second medicine does not replace the first
    allegra = await _get(client, ns, "allegra")
    assert allegra["fact"] == "medicine" and allegra["superseded_by"] is None
    # the listing says the same
    page = await client.get("/v1/memories", params={"namespace": ns})
    shown = {m["id"]: m["superseded_by"] for m in page.json()["memories"]}
    assert shown == {i: ("fukuoka" if i == "sapporo" else None) for i, _, _ in MEMORIES}
    # archived, the newer statement no longer supersedes
    r = await client.post("/v1/memories/fukuoka/archive", params={"namespace": ns})
    assert r.status_code == 200, r.text
    assert (await _get(client, ns, "sapporo"))["superseded_by"] is None
