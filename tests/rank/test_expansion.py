"""Multi-hop recall: links, threads and entities stored at ingest, expanded after the first wave."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from retrieval.analysis.strategy import HYBRID
from retrieval.ingest.memory_in import parse_items
from retrieval.models import Candidate, Fused, Hop, RetrievalOptions, ScoredResult, Source
from retrieval.rank.expansion import expand
from retrieval.rank.rerank import admit, diversify
from retrieval.search.newest import recent, states
from retrieval.search.run import Skip
from retrieval.search.vector import vector_global
from retrieval.text.nlp import memory_entities
from tests.fakes import cand
from tests.helpers import leg_context

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)

PROJECT = [
    {
        "id": "intro",
        "content": "山田真由さんと新しいプロジェクト「ヒスイ」の打ち合わせをした。場所は京都。",
    },
    {"id": "deadline", "content": "「ヒスイ」の締め切りは2月13日に決まった。"},
    {"id": "budget", "content": "「ヒスイ」の予算は1120万円で承認された。"},
    {"id": "ask", "content": "ヒスイの次の集まりの場所、決まった？", "thread": "hisui"},
    {
        "id": "reply",
        "content": "オンラインに決まったよ。",
        "links": [{"to": "ask", "label": "reply_to"}],
        "thread": "hisui",
    },
    {"id": "other", "content": "「スバル」の締め切りは1月14日に決まった。"},
]


async def _put(rt, ns, items):
    """Written an hour before NOW where an item names no time: a request at NOW returns
    nothing written after it."""
    dated = [{"created_at": (NOW - timedelta(hours=1)).isoformat(), **i} for i in items]
    return await rt.writer.write(parse_items(dated), ns)


async def _ask(rt, ns, q, **kw):
    resp = await rt.orchestrator.retrieve(q, RetrievalOptions(namespace=ns, limit=5, now=NOW, **kw))
    return resp


def test_entities_are_extracted_with_weights(nlp):
    text = (
        "山田真由さんと新しいプロジェクト「ヒスイ」の打ち合わせをした。場所は京都。RTX-4090も使う。"
    )
    got = dict(memory_entities(text, nlp.tokens(text)))
    assert (
        got["ヒスイ"] == 1.0 and got["山田真由"] == 0.8 and got["京都"] == 0.4 and "rtx-4090" in got
    )


async def test_a_reply_is_reached_through_its_link_and_answers_the_question(rt, ns):
    await _put(rt, ns, PROJECT)
    resp = await _ask(rt, ns, "ヒスイの集まりはどこでやるの")
    ids = [r.id for r in resp.results]
    assert ids[0] == "reply", ids
    reply = resp.results[0]
    assert "links" in reply.sources and "replies to the question ask" in reply.reason
    off = await _ask(rt, ns, "ヒスイの集まりはどこでやるの", expand=False)
    assert "reply" not in [r.id for r in off.results][:1]
    assert "links" not in off.metadata.search_breakdown


async def test_an_entity_hop_finds_what_the_question_asks_of_a_named_person(rt, ns):
    await _put(rt, ns, PROJECT)
    resp = await _ask(rt, ns, "山田真由さんと打ち合わせしたプロジェクトの締め切りはいつ？")
    ids = [r.id for r in resp.results]
    # Through the project the meeting named, above the other project's deadline, which shares
    # the question's words but not the name.
    assert "deadline" in ids[:3] and ids.index("deadline") < ids.index("other"), ids
    hop = resp.results[ids.index("deadline")]
    assert (
        "shares 「ヒスイ」 with intro, holds the asked 「締め切り」" in hop.reason
        and "entity" in hop.sources
    )
    assert resp.metadata.query_intent.focus == "締め切り"
    assert resp.metadata.search_breakdown["entity"].status == "ok"
    assert "expand" in resp.metadata.stage_latency_ms


def _diary() -> list[dict]:
    """A work diary: people, the projects they run (two ways of telling it), each project's
    deadline and budget (two ways of wording each): プロジェクト is a word of the diary here, as
    in real stores, not a name."""
    people = "林沙織 井上健太 山口沙織 伊藤悠斗 木村誠 佐藤陽菜 高橋直樹 田中誠 中村千尋 小林翔太"
    projects = "ツムギ シオン アカネ ヒカリ ホタル サクヤ ツバキ ミソラ ハルカ カナデ"
    items = []
    for i, (person, p) in enumerate(zip(people.split(), projects.split(), strict=True)):
        intro = (
            f"{person}さんと新しいプロジェクト「{p}」の打ち合わせをした。場所は神戸。"
            if i % 2
            else f"品川で{person}さんに会って、「{p}」という案件を一緒に進めることになった。"
        )
        deadline = (
            f"「{p}」の締め切りは2月{i + 1}日に決まった。"
            if i % 2
            else f"{p}の提出期限は1月{i + 10}日。遅れないように。"
        )
        budget = (
            f"「{p}」の予算は{i + 1}00万円で承認された。"
            if i % 2
            else f"{p}に使える予算は{i + 3}00万円。"
        )
        items += [
            {"id": f"{p}-intro", "content": intro},
            {"id": f"{p}-deadline", "content": deadline},
            {"id": f"{p}-budget", "content": budget},
            {"id": f"{p}-ask", "content": f"{p}の次の集まりの場所、決まった？"},
        ]
    return items


async def test_an_answer_worded_otherwise_is_reached_through_the_right_persons_project(rt, ns):
    """The deadline says 提出期限 (no word of the question) and another 沙織 ran a project told
    the same way: the full name picks the meeting, the stated date picks the memory. (Where the
    other 沙織's meeting is told in the question's own words, 打ち合わせしたプロジェクト, those
    words can still outweigh the name in a store this small: docs/benchmarks-log.md.)"""
    await _put(rt, ns, _diary())
    q = "林沙織さんと打ち合わせしたプロジェクトの締め切りはいつ？"
    resp = await _ask(rt, ns, q)
    ids = [r.id for r in resp.results]
    assert ids[0] == "ツムギ-deadline", ids
    assert resp.metadata.query_intent.asks == "date"
    assert "shares 「ツムギ」 with ツムギ-intro, gives the asked date" in resp.results[0].reason
    resp = await _ask(rt, ns, "林沙織さんと進めている案件の予算を教えて")
    assert [r.id for r in resp.results][0] == "ツムギ-budget"
    off = await _ask(rt, ns, q, expand=False)
    assert [r.id for r in off.results][0] != "ツムギ-deadline"


async def test_a_seed_that_states_a_date_itself_does_not_make_a_hop_the_answer(rt, ns):
    await _put(
        rt,
        ns,
        [
            {"id": "intro", "content": "林沙織さんと「ツムギ」の打ち合わせをした。初回は3月1日。"},
            {"id": "deadline", "content": "ツムギの提出期限は1月25日。"},
        ],
    )
    resp = await _ask(rt, ns, "林沙織さんと打ち合わせしたプロジェクトの締め切りはいつ？")
    assert not any("gives the asked" in (r.reason or "") for r in resp.results)


async def test_links_wait_for_their_target_never_cross_namespaces_and_go_with_their_memory(rt, ns):
    await _put(
        rt,
        ns,
        [
            {
                "id": "r",
                "content": "オンラインに決まったよ。",
                "links": [{"to": "q", "label": "reply_to"}],
            }
        ],
    )
    async with rt.pool.acquire() as conn:
        assert (
            await conn.fetchval("SELECT count(*) FROM memory_links WHERE namespace = $1", ns) == 1
        )
    await _put(
        rt, ns, [{"id": "q", "content": "ヒスイの次の集まりの場所、決まった？"}]
    )  # arrives later
    resp = await _ask(rt, ns, "ヒスイの集まりはどこ")
    assert "r" in [r.id for r in resp.results]
    other = ns + "-b"
    await _put(rt, other, [{"id": "q", "content": "ヒスイの次の集まりの場所、決まった？"}])
    resp = await _ask(rt, other, "ヒスイの集まりはどこ")
    assert "r" not in [r.id for r in resp.results]
    async with rt.pool.acquire() as conn:
        await conn.execute("DELETE FROM memories WHERE namespace = $1 AND external_id = 'r'", ns)
        assert (
            await conn.fetchval("SELECT count(*) FROM memory_links WHERE namespace = $1", ns) == 0
        )


async def test_thread_and_given_entities_are_stored(rt, ns):
    await _put(
        rt, ns, [{"id": "a", "content": "進捗報告", "thread": "weekly", "entities": ["Project X"]}]
    )
    async with rt.pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT m.thread, array_agg(e.entity) AS ents FROM memories m "
            "JOIN memory_entities e ON e.memory_id = m.id WHERE m.namespace = $1 GROUP BY 1",
            ns,
        )
    assert row["thread"] == "weekly" and row["ents"] == ["project x"]


async def test_seeds_from_the_conversation_and_the_run_log_records_expansion(rt, ns):
    await _put(rt, ns, PROJECT)
    resp = await _ask(rt, ns, "それはどうなった", seed_ids=("ask",))
    assert "reply" in [r.id for r in resp.results]
    await rt.orchestrator.flush()
    from db.run_log import get_run

    run = await get_run(rt.pool, resp.metadata.run_id)
    assert run["plan"]["expansion"]["expanded"] and run["plan"]["expansion"]["seeds"][0] == "ask"
    assert run["plan"]["expansion"]["contributed"]["links"] >= 1
    assert run["plan"]["quotas"]


def test_quotas_keep_each_source_its_seats_and_cap_entity_only():
    """A prolific source cannot take every seat; entity-only candidates get at most their share."""
    ordered = []
    per = {Source.VECTOR: [], Source.KEYWORD: [], Source.ENTITY: []}
    for i in range(40):  # entity-only candidates with the best fused scores
        c = cand(i, 1.0, Source.ENTITY)
        per[Source.ENTITY].append(c)
        ordered.append(Fused(c, {"entity": 1.0}, 2.0 - i / 100))
    for i in range(40, 60):
        c = cand(i, 0.5, Source.KEYWORD)
        per[Source.KEYWORD].append(c)
        ordered.append(Fused(c, {"keyword": 0.5}, 0.5))
    top = admit(ordered, per, replace(HYBRID, entity_only_share=0.2), 20)
    entity_only = [f for f in top if set(f.signals) == {"entity"}]
    assert len(top) == 20 and 1 <= len(entity_only) <= 4
    assert sum(1 for f in top if "keyword" in f.signals) >= 4
    # The shipped presets give memories that only share a name no seat at all, even through
    # the entity source's own quota.
    top = admit(ordered, per, HYBRID, 20)
    assert not [f for f in top if set(f.signals) == {"entity"}] and len(top) == 20


def test_an_entity_only_memory_that_gives_the_asked_answer_gets_a_seat():
    """No search matched 「アカネの提出期限は2月9日」 (no query word), but it states the date asked
    for and its seed does not: it is admitted, the other entity-only memories are not."""
    per = {Source.KEYWORD: [], Source.ENTITY: []}
    ordered = []
    for i in range(30):
        c = cand(i, 0.5, Source.KEYWORD)
        per[Source.KEYWORD].append(c)
        ordered.append(Fused(c, {"keyword": 0.5}, 1.0 - i / 100))
    for i in (30, 31):
        c = cand(i, 1.0, Source.ENTITY)
        per[Source.ENTITY].append(c)
        ordered.append(Fused(c, {"entity": 1.0}, 0.1))
    top = admit(ordered, per, HYBRID, 20, answering=frozenset({31}))
    ids = {f.candidate.id for f in top}
    assert 31 in ids and 30 not in ids and len(top) == 20


def _hop(i: int, score: float, source: Source, seed: str = "m1", **kw) -> Candidate:
    c = cand(i, score, source)
    c.hop = Hop(seed=seed, kind=kw.pop("kind", source.value), seed_text="seed", **kw)
    return c


def test_a_chain_that_answers_stands_for_its_memory_and_adjacency_only_adds_a_bounded_credit():
    """LoCoMo: a thread neighbour inherited its seed's score and buried the answering turn
    under twelve turns of its session that share no word with the question. A hop now adds at
    most hop_credit x its seed's score to what the memory scores itself; only a chain that
    answers (the asked date where the seed has none) stands above its seed."""
    seed = cand(1, 0.9, Source.KEYWORD)
    fused = {1: Fused(seed, {"keyword": 0.9}, 0.8)}
    answer = _hop(2, 1.0, Source.ENTITY, gives_answer=True, added=0.0)
    plain = _hop(3, 1.0, Source.THREAD)
    direct = cand(4, 0.5, Source.KEYWORD)
    fused[4] = Fused(direct, {"keyword": 0.5}, 0.5)
    near = _hop(4, 1.0, Source.THREAD)
    little = _hop(5, 1.0, Source.ENTITY, added=0.05)
    per = {
        Source.KEYWORD: [seed, direct],
        Source.ENTITY: [answer, little],
        Source.THREAD: [plain, near],
    }
    out, expanded = expand(fused, per, HYBRID)
    assert out[2].score == pytest.approx(HYBRID.answer_weight * 0.8) and out[2].score > 0.8
    credit = HYBRID.hop_credit * HYBRID.expansion[Source.THREAD] * 0.8
    # a neighbour that matches nothing is its seed's context, not a result ...
    assert 3 not in out
    # ... unless the caller named the seed (the conversation's turn): then it has the credit
    named, _ = expand(fused, per, HYBRID, frozenset({"m1"}))
    assert named[3].score == pytest.approx(credit) and named[3].score < named[1].score
    # a memory that matches and sits beside the seed gains the credit on its own score, even
    # the one its source scaled to 0 (found, though the least)
    assert out[4].score == pytest.approx(0.5 + credit)
    least = cand(6, 0.1, Source.KEYWORD)
    at_zero = {**fused, 6: Fused(least, {"keyword": 0.0}, 0.0)}
    out6, _ = expand(at_zero, {**per, Source.THREAD: [_hop(6, 1.0, Source.THREAD)]}, HYBRID)
    assert out6[6].score == pytest.approx(credit)
    # a shared name that adds too little of the query is no bridge
    assert 5 not in out
    assert expanded.answering == frozenset({2})
    # A source the preset does not weigh passes on nothing, answering or not.
    out, expanded = expand(fused, per, replace(HYBRID, expansion={}))
    assert 2 not in out and not expanded.answering


def test_a_neighbour_never_outranks_its_seed():
    """Whatever the scores, a hop that neither answers nor matches stays below its seed (and
    is no result at all unless the caller named the seed)."""
    for seed_score in (0.05, 0.3, 0.7, 1.0):
        seed = cand(1, seed_score, Source.VECTOR)
        fused = {1: Fused(seed, {"vector": seed_score}, seed_score)}
        per = {
            Source.VECTOR: [seed],
            Source.LINKS: [_hop(2, 1.0, Source.LINKS, kind="reply_to", gain=2.0)],
            Source.THREAD: [_hop(3, 1.0, Source.THREAD, seed="s")],
            Source.ENTITY: [_hop(4, 1.0, Source.ENTITY, added=1.0)],
        }
        out, _ = expand(fused, per, HYBRID)
        assert not {2, 3, 4} & out.keys()  # adjacency alone: no result
        out, _ = expand(fused, per, HYBRID, frozenset({"m1", "s"}))  # seeds the caller named
        assert max(out[i].score for i in (2, 3, 4)) < out[1].score


def test_diversify_by_a_metadata_key():
    rs = []
    for i, year in enumerate(["2024", "2024", "2024", "2025", "2026"]):
        c = cand(i, 1.0, Source.VECTOR)
        c.metadata = {"year": year}
        rs.append(ScoredResult(c, 1.0 - i / 10, {}, ["vector"]))
    got = [r.candidate.metadata["year"] for r in diversify(rs, "year", 1, 4)]
    assert got == ["2024", "2025", "2026", "2024"]


async def test_expansion_seeds_from_the_text_legs_while_the_query_is_embedded(rt, ns):
    """The second wave does not wait for the vector legs: its seeds come from keyword/trigram."""
    await _put(rt, ns, PROJECT)
    resp = await _ask(rt, ns, "山田真由さんと打ち合わせしたプロジェクトの締め切りはいつ？")
    await rt.orchestrator.flush()
    from db.run_log import get_run

    run = await get_run(rt.pool, resp.metadata.run_id)
    assert (
        run["plan"]["expansion"]["seeded_from"]
        and "vector" not in run["plan"]["expansion"]["seeded_from"]
    )
    assert run["plan"]["expansion"]["seeds"][0] == "intro"


def _ctx(rt, ns, q, **kw):
    return leg_context(rt, ns, q, now=NOW, **kw)


async def test_recent_and_states_are_the_newest_first(rt, ns):
    items = [
        {
            "id": f"e{i}",
            "content": f"出来事{i}",
            "created_at": (NOW - timedelta(days=i)).isoformat(),
        }
        for i in range(1, 4)
    ]
    items += [
        {
            "id": "s-old",
            "content": "住所は横浜",
            "memory_type": "state",
            "created_at": (NOW - timedelta(days=30)).isoformat(),
        },
        {
            "id": "s-new",
            "content": "住所は川崎",
            "memory_type": "state",
            "created_at": (NOW - timedelta(days=2, hours=12)).isoformat(),
        },
    ]
    await _put(rt, ns, items)
    got = [c.external_id for c in await recent(*_ctx(rt, ns, "最近どう"))]
    assert got == ["e1", "e2", "s-new", "e3", "s-old"]
    got = [c.external_id for c in await states(*_ctx(rt, ns, "住所"))]
    assert got == ["s-new", "s-old"]
    assert [c.external_id for c in await recent(*_ctx(rt, ns + "-other", "最近どう"))] == []


async def test_the_exploration_slot_searches_only_the_older_past(rt, ns):
    old = {
        "id": "old",
        "content": "京都で抹茶のパフェを食べた",
        "created_at": (NOW - timedelta(days=400)).isoformat(),
    }
    new = {
        "id": "new",
        "content": "京都で抹茶のパフェを食べた！",
        "created_at": (NOW - timedelta(days=3)).isoformat(),
    }
    await _put(rt, ns, [old, new])
    q = "抹茶のパフェ"
    run, given = _ctx(rt, ns, q, vectors=[rt.embedder.embed_query(q)])
    got = await vector_global(run, given)
    assert [c.external_id for c in got] == ["old"] and got[0].source == Source.VECTOR_GLOBAL
    with pytest.raises(Skip):
        await vector_global(replace(run, now=None), given)


async def test_a_caller_adds_the_newest_memories_states_and_the_exploration_slot(rt, ns, client):
    """options.add_sources: memories no similarity search would pick come in, each saying how."""
    old = (NOW - timedelta(days=400)).isoformat()
    items = [
        {"id": "gym-old", "content": "ジムで筋トレをした。ベンチプレス60kg", "created_at": old},
        {
            "id": "gym-new",
            "content": "ジムで筋トレをした。ベンチプレス62kg",
            "created_at": (NOW - timedelta(days=2)).isoformat(),
        },
        {
            "id": "newest",
            "content": "新しい傘を買った",
            "created_at": (NOW - timedelta(hours=1)).isoformat(),
        },
        {
            "id": "home",
            "content": "住まいは川崎",
            "memory_type": "state",
            "created_at": (NOW - timedelta(days=30)).isoformat(),
        },
    ]
    items += [
        {
            "id": f"gym{i}",
            "content": f"ジムで筋トレ{i}回目",
            "created_at": (NOW - timedelta(days=3 + i)).isoformat(),
        }
        for i in range(12)
    ]
    await _put(rt, ns, items)
    body = {
        "query": "ジムで筋トレ",
        "namespace": ns,
        "options": {"now": NOW.isoformat(), "limit": 20},
    }
    plain = (await client.post("/v1/retrieve", json=body)).json()
    assert "newest" not in [r["id"] for r in plain["results"]]
    body["options"]["add_sources"] = ["recent", "states", "vector_global"]
    r = await client.post("/v1/retrieve", json=body)
    got = {x["id"]: x for x in r.json()["results"]}
    assert r.status_code == 200
    assert (
        "recent" in got["newest"]["sources"] and "recent (newest first)" in got["newest"]["reason"]
    )
    assert "states" in got["home"]["sources"]
    assert (
        "vector_global" in got["gym-old"]["sources"]
        and "vector_global" not in got["gym-new"]["sources"]
    )
    breakdown = r.json()["metadata"]["search_breakdown"]
    assert {"recent", "states", "vector_global"} <= breakdown.keys()
    bad = await client.post("/v1/retrieve", json={**body, "options": {"add_sources": ["links"]}})
    assert bad.status_code == 422 and "add_sources" in str(bad.json())


async def test_the_entity_hop_needs_no_other_leg(rt, ns):
    """The entity leg read the query's IDF terms from the search's shared state, written there by
    the keyword leg: when the keyword leg timed out (or never ran), every entity hop was dropped as
    adding nothing. Each hop leg now asks for the terms itself."""
    from retrieval.search.hops import entity, links, thread

    await _put(rt, ns, PROJECT)
    ctx = _ctx(
        rt,
        ns,
        "山田真由さんと打ち合わせしたプロジェクトの締め切りはいつ？",
        seeds=(("intro", 1.0),),
    )
    got = {c.external_id: c for c in await entity(*ctx)}  # no keyword leg ran
    assert "deadline" in got and got["deadline"].hop is not None
    hop = got["deadline"].hop
    assert hop.seed == "intro" and hop.kind == "entity" and hop.added > 0 and hop.gives_answer
    # the reply and the thread: each says how it was reached, from which seed
    ctx = _ctx(rt, ns, "ヒスイの集まりはどこでやるの", seeds=(("ask", 1.0),))
    reply = {c.external_id: c for c in await links(*ctx)}["reply"]
    assert reply.hop is not None and reply.hop.kind == "answers_question"
    same = {c.external_id: c for c in await thread(*ctx)}["reply"]
    assert same.hop is not None and same.hop.kind == "thread" and same.score == 1.0


async def test_the_entity_source_does_not_start_from_a_long_memory(rt, ns):
    """An article names dozens of things; sharing one with it says little. A long seed alone:
    the source skips; beside a short seed, only the short one leads anywhere."""
    from retrieval.search.hops import entity
    from retrieval.text.passages import SPLIT_ABOVE

    filler = "会議では予定と担当と進め方をひとつずつ確かめ、次の週の作業を決めた。" * 80
    items = [
        {"id": "long", "content": "「アオバ」の会議録。" + filler},
        {"id": "short", "content": "「ヒスイ」の担当は山田真由さん。"},
        {"id": "via-long", "content": "「アオバ」の締め切りは3月10日。"},
        {"id": "via-short", "content": "「ヒスイ」の締め切りは4月2日。"},
    ]
    assert len(items[0]["content"]) > SPLIT_ABOVE
    await _put(rt, ns, items)
    run, given = _ctx(rt, ns, "締め切りはいつ？", long_seeds=frozenset({"long"}))
    with pytest.raises(Skip):
        await entity(run, replace(given, seeds=(("long", 1.0),)))
    got = await entity(run, replace(given, seeds=(("long", 1.0), ("short", 0.8))))
    assert [c.external_id for c in got] == ["via-short"]
    assert {c.hop.seed for c in got} == {"short"}


def test_seeds_are_scored_with_the_side_of_the_chat():
    """Seeds are scored as the reranker scores them, the side of the chat included: for a
    question about the asker's own life the assistant's answer that matched best seeds at half
    its score (so its hops pass on half as much), the user's own turn at its own."""
    from retrieval.rank.expansion import choose_seeds

    turns = [
        cand(1, 0.9, Source.KEYWORD, content="assistant: turbinado sugar in cookies"),
        cand(2, 0.6, Source.KEYWORD, content="user: I tried turbinado sugar"),
        cand(3, 0.1, Source.KEYWORD, content="user: something else"),
    ]
    preset = replace(HYBRID, lex_weight=0.0)
    plain = dict(choose_seeds({Source.KEYWORD: turns}, preset, (), "cookies"))
    asked = dict(choose_seeds({Source.KEYWORD: turns}, preset, (), "cookies", "user"))
    assert plain["m1"] == 1.0 > plain["m2"]
    assert asked["m2"] == 1.0 > asked["m1"]


FRIDAY = [
    {
        "id": "dent1",
        "content": "Dentist appointment on Friday at 10; the left molar again.",
        "created_at": "2026-11-18T09:00:00+09:00",
    },
    {
        "id": "dent2",
        "content": "The dentist said the filling needs one more visit next month.",
        "created_at": "2026-11-20T12:00:00+09:00",
        "links": [{"to": "dent1", "label": "same_topic"}],
    },
    {
        "id": "ramen",
        "content": "Had miso ramen near the station on Friday night.",
        "created_at": "2026-11-20T20:00:00+09:00",
    },
    {
        "id": "ja-dent1",
        "content": "金曜の10時に歯医者の予約。",
        "created_at": "2026-11-18T09:00:00+09:00",
    },
    {
        "id": "ja-dent2",
        "content": "歯医者で詰め物をもう一度やり直すと言われた。",
        "created_at": "2026-11-20T12:00:00+09:00",
        "links": [{"to": "ja-dent1", "label": "same_topic"}],
    },
    {
        "id": "ja-ramen",
        "content": "金曜の夜、駅前で味噌ラーメンを食べた。",
        "created_at": "2026-11-20T20:00:00+09:00",
    },
]


@pytest.mark.parametrize(
    ("question", "meal"),
    [("What did I eat on Friday?", "ramen"), ("金曜日に何を食べた？", "ja-ramen")],
)
async def test_a_link_never_lifts_a_memory_that_does_not_match_above_one_that_does(
    rt, ns, question, meal
):
    """#52: "what did I eat on Friday" put a dentist visit (0.772) above the ramen (0.700)
    because it was linked to another dentist memory. A link is context: the meal stays first,
    and the linked visit scores no higher than the meal with the hops or without them."""
    await _put(rt, ns, FRIDAY)
    for hops in (True, False):
        resp = await _ask(rt, ns, question, expand=hops)
        by_id = {r.id: r for r in resp.results}
        assert resp.results[0].id == meal, [(r.id, r.score) for r in resp.results]
        for linked in ("dent2", "ja-dent2"):
            if linked in by_id:
                assert by_id[linked].score < by_id[meal].score, (hops, linked)
    with_links = await _ask(rt, ns, question)
    assert "links" in with_links.metadata.search_breakdown  # the hop ran, and lifted nothing


async def test_the_thread_and_entity_hops_keep_the_k_their_best_seeds_reach(rt, ns):
    """The thread and entity statements return each memory once, best seed first, and are
    asked for k rows (not 4k): the k kept are the nearest in time to the best seed's own turn,
    then the other thread's."""
    from retrieval.search.hops import entity, thread

    start = NOW - timedelta(days=10)

    def turn(thread_id: str, i: int) -> dict:
        at = (start + timedelta(minutes=10 * i)).isoformat()
        # five turns name コハク (a rarer name than five would be too common to bridge)
        text = f"「コハク」の作業メモ{i}。" if thread_id == "a" and i < 5 else f"別の話{i}。"
        return {"id": f"{thread_id}{i}", "content": text, "thread": thread_id, "created_at": at}

    await _put(rt, ns, [turn("a", i) for i in range(8)] + [turn("b", i) for i in range(8)])
    run, given = _ctx(rt, ns, "コハクの作業は？", k=3, seeds=(("a3", 1.0), ("b0", 0.5)))
    got = await thread(run, given)
    # a2 and a4 are as near to a3: the statement's order (the earlier id) breaks the tie
    assert [c.external_id for c in got] == ["a2", "a4", "a1"]
    assert {c.hop.seed for c in got} == {"a3"}
    # nothing of the other thread while the best seed's thread fills the k
    run, given = _ctx(rt, ns, "コハクの作業は？", k=10, seeds=(("a3", 1.0), ("b0", 0.5)))
    got = [c.external_id for c in await thread(run, given)]
    assert got[:7] == ["a2", "a4", "a1", "a5", "a0", "a6", "a7"] and got[7:] == ["b1", "b2", "b3"]
    # the entity hop from a3: the four others that name コハク, the oldest first; k of them
    run, given = _ctx(rt, ns, "作業の進み具合は？", k=2, seeds=(("a3", 1.0),))
    assert [c.external_id for c in await entity(run, given)] == ["a0", "a1"]
