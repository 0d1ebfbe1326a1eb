"""Long memories (issue #25): passages on sentence boundaries, each with its own vector; a
memory scored by its best passage; the highlight; the response budget."""

import re
import unicodedata
from datetime import UTC, datetime

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval.analysis.chars import clean
from retrieval.analysis.strategy import KEYWORD_BOOST
from retrieval.ingest.memory_in import parse_items
from retrieval.ingest.recipe import mean_direction, plan
from retrieval.models import Highlight, Relevance, Result, RetrievalOptions, Source
from retrieval.rank.budget import fit
from retrieval.rank.highlight import (
    bm25_idf,
    focus,
    focus_all,
    span_index,
    weighted_coverage,
)
from retrieval.rank.lexical import highlights, lex_highlights
from retrieval.rank.rerank import rerank
from retrieval.text.passages import (
    _END,
    OVERLAP_MAX_CHARS,
    PASSAGE_MAX_CHARS,
    SPLIT_ABOVE,
    Span,
    pack,
    sentence_ends,
    sentences,
    split_passages,
)
from tests.fakes import cand
from tests.helpers import asked, ingest_items

NOW = datetime(2026, 11, 22, tzinfo=UTC)

TOPICS = [
    "東大寺の大仏は奈良時代に聖武天皇の発願で造立された盧舎那仏で、高さは約15メートルある。",
    "アポロ11号は1969年に月面着陸に成功し、アームストロング船長が最初に月面を歩いた。",
    "味噌汁は出汁に味噌を溶かした汁物で、豆腐やわかめなどの具を入れて作る家庭料理である。",
    "富士山は静岡県と山梨県にまたがる活火山で、標高は3776メートルと日本で最も高い。",
    "将棋は二人で行う盤上遊戯で、取った駒を自分の駒として再び使えるのが特徴である。",
    "光合成は植物が光のエネルギーを使って二酸化炭素と水から糖を作り酸素を出す反応である。",
]


def _paragraph(sentence: str, n: int = 8) -> str:
    return "".join(sentence for _ in range(n))


LONG = "\n\n".join(_paragraph(t) for t in TOPICS)


def test_a_short_memory_has_no_passages_and_a_long_one_is_covered_in_order():
    assert split_passages("あ" * SPLIT_ABOVE) == []
    spans = split_passages(LONG)
    assert len(LONG) > SPLIT_ABOVE and len(spans) >= len(TOPICS)
    assert spans[0].start == 0 and spans[-1].end == len(LONG)
    for a, b in zip(spans, spans[1:], strict=False):
        assert a.start < b.start and b.start <= a.end + 2  # in order, no gap but the break
    for sp in spans:
        assert sp.size <= PASSAGE_MAX_CHARS
        text = LONG[sp.start : sp.end]
        assert text == text.strip() and text.endswith("。")  # whole sentences
        assert "\n\n" not in text  # these paragraphs are each a passage's worth


def test_sentences_end_at_japanese_and_english_ends_and_at_line_breaks():
    text = "今日は晴れ。明日は雨！本当？「そうだ。」\nNext line. Version 3.14 is out! Done"
    got = [text[s.start : s.end] for s in sentences(text)]
    assert got == [
        "今日は晴れ。",
        "明日は雨！",
        "本当？",
        "「そうだ。」",
        "Next line.",
        "Version 3.14 is out!",
        "Done",
    ]


@settings(max_examples=200, deadline=None)
@given(st.text(st.sampled_from(list("文。！？!?．.…\n \t　a1)」’\"'")), max_size=60))
def test_sentence_ends_are_the_regexs_own_matches(text: str) -> None:
    def spans(ms):
        return [(m.start(), m.end(), m.group("nl")) for m in ms]

    assert spans(sentence_ends(text)) == spans(_END.finditer(text))


def test_a_sentence_longer_than_a_passage_is_cut_at_a_comma_and_a_short_last_sentence_overlaps():
    long_sentence = "、".join(["長い文の一部"] * 200) + "。"
    spans = pack(long_sentence)
    assert all(s.size <= PASSAGE_MAX_CHARS for s in spans)
    assert all(long_sentence[s.end - 1] in "、。" for s in spans)
    # A passage that ends on a short sentence inside a paragraph repeats it in the next one.
    text = "".join(f"これは{i}番目の文で、少し長めに書いてある内容です。" for i in range(60))
    spans = pack(text)
    assert any(b.start < a.end for a, b in zip(spans, spans[1:], strict=False))
    assert all(a.end - b.start <= OVERLAP_MAX_CHARS for a, b in zip(spans, spans[1:], strict=False))


def _grams(query: str) -> tuple[str, ...]:
    return tuple({query[i : i + 2] for i in range(len(query) - 1)})


def test_the_highlight_is_the_passage_that_covers_the_query_helped_by_the_vector_leg():
    assert focus("短い。", (), _grams("短い"), owner=1) == (Span(0, 3, True), "短い")
    fuji = LONG.index("富士山")
    got, text = focus(LONG, (), _grams("富士山の標高は何メートル"), owner=1)
    assert text == clean(LONG[got.start : got.end]) and "。" not in text
    assert got.start <= fuji < got.end
    # Nothing in common with the text: the passage the vector leg found best wins.
    shogi = next(s for s in pack(LONG) if "将棋" in LONG[s.start : s.end])
    got, _ = focus(LONG, ((shogi.start, shogi.end, 0.9),), _grams("ボードゲームの規則"), owner=1)
    assert got == Span(shogi.start, shogi.end)


def test_a_passage_no_more_similar_than_the_vector_legs_last_gets_no_vector_credit():
    # The vector leg returned the shogi passage only as its least similar (the floor): a passage
    # it did not return may be as similar, so the few words the query shares with the Fuji
    # passage decide. Above the floor, the same passage wins on the vector alone.
    shogi = next(s for s in pack(LONG) if "将棋" in LONG[s.start : s.end])
    found = ((shogi.start, shogi.end, 0.8),)
    query = _grams("富士山についてもっと詳しく教えてください")
    got, _ = focus(LONG, found, query, floor=0.8, owner=1)
    assert "富士山" in LONG[got.start : got.end]
    got, _ = focus(LONG, found, query, floor=0.7, owner=1)
    assert got == Span(shogi.start, shogi.end)


def test_a_name_most_passages_hold_does_not_choose_the_highlight():
    # The article's subject is named in five passages of six; the asked word only in the one
    # that answers, which names the subject by half. Counted plainly, the name's seven bigrams
    # beat the asked word's two; weighted by how few passages hold them, they do not.
    filler = "作曲家として多くの作品を残し、指揮者としても活躍した。" * 12
    paragraphs = [f"グスタフ・マーラーは{i}番目の話題である。{filler}" for i in range(5)]
    paragraphs.insert(3, "グスタフの兄弟は十四人いたが、半数は幼くして亡くなった。" + filler)
    text = "\n\n".join(paragraphs)
    got, _ = focus(text, (), _grams("グスタフマーラーの兄弟"), owner=1)
    assert "兄弟" in text[got.start : got.end]


def _by_substring(
    content: str, found: list[tuple[int, int, float]], grams: tuple[str, ...], floor: float
) -> dict[tuple[int, int], float]:
    """What the index computes, the plain way: each span's weighted share of the query's
    bigrams (substring tests on its cleaned text) plus the vector credit."""
    top = max((x for _, _, x in found), default=0.0) - floor
    spans = [(s.start, s.end) for s in pack(content)]
    spans += [(a, b) for a, b, _ in found if (a, b) not in spans and top > 0]
    held = {ab: {g for g in grams if g in clean(content[ab[0] : ab[1]])} for ab in spans}
    cover = weighted_coverage(held, grams, bm25_idf)
    vec = dict.fromkeys(spans, 0.0)
    for a, b, x in found:
        if top > 0:
            vec[(a, b)] = max(vec[(a, b)], max(x - floor, 0.0) / top)
    return {ab: cover[ab] + 0.5 * vec[ab] for ab in spans}


# Text of CJK, Latin, digits, a character beyond the BMP (the index's wide codes), sentence
# ends, commas and blanks.
_CHARS = st.sampled_from(list("富士山の標高はメートル将棋駒abcXYZ019𠮷🍣。、！？. ,\n　"))


@settings(max_examples=25, deadline=None)
@given(
    texts=st.lists(st.text(_CHARS, min_size=650, max_size=1000), min_size=1, max_size=3),
    query=st.text(_CHARS, min_size=1, max_size=12),
    picks=st.lists(st.tuples(st.integers(0, 50), st.floats(0.7, 0.95)), max_size=3),
    old_cut=st.booleans(),
)
def test_the_indexed_highlight_is_a_best_span_by_plain_substring_tests(
    texts: list[str], query: str, picks: list[tuple[int, float]], old_cut: bool
) -> None:
    q = clean(query)
    grams = tuple({q[i : i + 2] for i in range(len(q) - 1)} or ({q} if q else set()))
    items = []
    for text in texts:
        spans = pack(text)
        found = [(spans[i % len(spans)].start, spans[i % len(spans)].end, x) for i, x in picks]
        if spans and old_cut:
            found.append((0, min(len(text), 333), 0.9))  # a passage no pack() of today makes
        items.append((text, found if spans else []))
    for (text, found), (span, cleaned) in zip(
        items, focus_all(items, grams, 0.7, memories=range(len(items))), strict=True
    ):
        oracle = _by_substring(text, found, grams, 0.7)
        if not oracle:  # nothing but blanks and punctuation
            assert span == Span(0, len(text), True)
            continue
        assert oracle[span.bounds] == pytest.approx(max(oracle.values()), abs=1e-9)
        assert cleaned == clean(text[span.start : span.end])


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(max_codepoint=0x7F)) | st.text())
def test_clean_of_ascii_text_is_the_pattern_s_reading(text):
    # clean() takes a faster path for ASCII text; it must read as NFKC + lower + the pattern.
    assert clean(text) == re.sub(r"[\W_]+", "", unicodedata.normalize("NFKC", text).lower())


def test_a_memory_read_whole_gets_its_highlight_only_when_shown_and_the_same_one():
    # The n-gram signal reads a memory longer than SPLIT_ABOVE by its highlight, a shorter one
    # whole: only the first kind's highlights are made before ranking (lex_highlights), and a
    # shown result of the second kind gets the one highlights() makes for it alone.
    mid = "\n\n".join(_paragraph(t, 4) for t in TOPICS[:5])
    long = "\n\n".join(_paragraph(t) for t in TOPICS)
    assert PASSAGE_MAX_CHARS < len(mid) <= SPLIT_ABOVE < len(long)
    per_source = {
        Source.KEYWORD: [
            cand(1, 3.0, Source.KEYWORD, content=mid),
            cand(2, 2.0, Source.KEYWORD, content=long),
            cand(3, 1.0, Source.KEYWORD, content="富士山の標高。"),
        ]
    }
    cands = per_source[Source.KEYWORD]
    query = "富士山の標高は何メートル"
    assert set(lex_highlights(query, cands, per_source)) == {2}
    results, _ = rerank(per_source, KEYWORD_BOOST, *asked(query, limit=2), now=NOW)
    alone = highlights(query, cands, per_source)
    assert [r.candidate.id for r in results] == [1, 2]
    assert all(r.highlight == alone[r.candidate.id][0].bounds for r in results)
    assert results[0].highlight != (0, len(mid))  # a passage of it, not all of it


def test_the_span_index_is_compact_and_batched_highlights_match_single_ones():
    text = "\n\n".join(TOPICS * 6)
    ix = span_index(text, 1)
    assert ix.codes.dtype == np.uint32 and ix.owner.dtype == np.int16  # every character in the BMP
    assert ix.nbytes < 8 * len(text)  # codes and owners ~5 bytes a character, texts 2-3
    assert span_index("𠮷野家の牛丼。" * 100, 2).codes.dtype == np.int64
    # Each span's cleaned text is kept (a highlight's, read per request); another span's is made.
    assert ix.texts == tuple(clean(text[a:b]) for a, b in ix.spans)
    a, b = ix.spans[1]
    assert ix.text(text, (a, b)) is ix.texts[1]
    assert ix.text(text, (a + 1, b)) == clean(text[a + 1 : b])
    grams = ("富士", "将棋", "標高")
    items = [(text, []), ("短いメモ。", []), (" " * 700, []), (text, [(0, 50, 0.9)])]
    assert focus_all(items, grams, memories=range(len(items))) == [
        focus(c, f, grams, owner=i) for i, (c, f) in enumerate(items)
    ]
    assert focus_all([], grams, memories=[]) == []
    with pytest.raises(ValueError, match="one memory per item"):  # each is cached by its own
        focus_all(items, grams, memories=[1])
    assert focus(" " * 700, (), grams, owner=1) == (Span(0, 700, True), "")


def _result(rid: str, content: str, hl: tuple[int, int] | None) -> Result:
    return Result(
        id=rid,
        content=content,
        title=None,
        memory_type="semantic",
        source_type="note",
        metadata={},
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        score=1.0,
        signals={},
        sources=[],
        relevance=Relevance.HIGH,
        reason="",
        highlight=None
        if hl is None
        else Highlight(start=hl[0], end=hl[1], text=content[hl[0] : hl[1]]),
    )


def test_the_budget_keeps_whole_results_then_highlights_and_never_goes_past_it():
    results = [
        _result("a", "x" * 300, (0, 300)),
        _result("b", "y" * 5000, (1000, 1400)),
        _result("c", "z" * 900, (0, 900)),
        _result("d", "w" * 100, (0, 100)),
    ]
    kept, report = fit(results, 1000)
    assert [r.id for r in kept] == ["a", "b", "d"]
    assert kept[1].cut and kept[1].content == "y" * 400 and not kept[0].cut
    assert report.whole == 2 and report.cut == ["b"] and report.omitted == ["c"]
    assert report.used_chars == 800 == sum(len(r.content) for r in kept) <= 1000
    kept, report = fit(results, 10)
    assert kept == [] and report.omitted == ["a", "b", "c", "d"] and report.used_chars == 0


async def test_a_long_write_embeds_its_passages_and_a_short_one_itself(rt, ns):
    items = parse_items([{"content": LONG, "title": "百科"}, {"content": "短いメモ"}])
    texts = (await plan(rt.pool, ns, items)).texts
    assert texts[0] == "短いメモ"
    assert len(texts) == 1 + len(split_passages(LONG))
    assert all(t.startswith("百科\n") for t in texts[1:])
    v = mean_direction([np.array([1.0, 0.0]), np.array([0.0, 1.0])])
    assert np.allclose(v, [2**-0.5, 2**-0.5])


async def _passages(rt, ns) -> list[tuple[int, int]]:
    async with rt.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT p.start_char, p.end_char FROM memory_passages p JOIN memories m"
            " ON m.id = p.memory_id WHERE m.namespace = $1 ORDER BY p.ord",
            ns,
        )
    return [(r["start_char"], r["end_char"]) for r in rows]


async def test_a_long_memory_is_found_by_its_middle_and_returns_that_part(rt, ns):
    await ingest_items(
        rt,
        ns,
        [
            {"id": "long", "content": LONG, "title": "雑学"},
            {"id": "short", "content": "週末は友人と映画を見に行った。"},
        ],
    )
    assert await _passages(rt, ns) == [s.bounds for s in split_passages(LONG)]
    resp = await rt.orchestrator.retrieve(
        "植物が光から糖を作る仕組みは？", RetrievalOptions(namespace=ns, log_run=False)
    )
    top = resp.results[0]
    assert top.id == "long" and top.highlight is not None
    assert "光合成" in top.highlight.text and top.highlight.text in LONG
    assert LONG[top.highlight.start : top.highlight.end] == top.highlight.text
    assert resp.metadata.budget is None and top.content == LONG
    # Within a budget the long memory comes as its highlight.
    resp = await rt.orchestrator.retrieve(
        "植物が光から糖を作る仕組みは？",
        RetrievalOptions(namespace=ns, log_run=False, max_chars=800),
    )
    assert resp.results[0].cut and "光合成" in resp.results[0].content
    budget = resp.metadata.budget
    assert budget is not None and budget.used_chars <= 800 and budget.cut == ["long"]
    # Rewritten short, its passages go; the same text again keeps them.
    await ingest_items(rt, ns, [{"id": "long", "content": "もう短い。"}])
    assert await _passages(rt, ns) == []


async def test_the_same_long_text_again_keeps_its_passages(rt, ns):
    item = {"id": "doc", "content": LONG}
    await ingest_items(rt, ns, [item])
    before = await _passages(rt, ns)
    report = await ingest_items(rt, ns, [item])
    assert report.embedded == 0 and await _passages(rt, ns) == before != []


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"max_chars": 0}, "options.max_chars"),
        ({"max_tokens": 100}, "options.chars_per_token"),
        ({"max_tokens": 0, "chars_per_token": 1.5}, "options.max_tokens"),
        ({"max_tokens": 10**9, "chars_per_token": 4}, "options.max_tokens"),
    ],
)
async def test_a_bad_budget_is_a_422_naming_the_field(client, ns, options, field):
    r = await client.post(
        "/v1/retrieve", json={"query": "何か", "namespace": ns, "options": options}
    )
    assert r.status_code == 422
    assert field in r.text


async def test_a_budget_in_tokens_is_counted_as_the_caller_says(client, rt, ns):
    await ingest_items(
        rt, ns, [{"id": f"m{i}", "content": f"メモ{i}：" + "あ" * 200} for i in range(5)]
    )
    r = await client.post(
        "/v1/retrieve",
        json={
            "query": "メモ",
            "namespace": ns,
            "options": {"max_tokens": 300, "chars_per_token": 1.5, "context_window": 0},
        },
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["metadata"]["budget"]["max_chars"] == 450
    assert sum(len(x["content"]) for x in body["results"]) <= 450
    assert len(body["results"]) == 2 and body["results"][0]["highlight"]["start"] == 0


async def test_embed_passages_gives_stored_long_memories_theirs_and_resumes(rt, ns):
    from pgvector import Vector

    from db import meta
    from db import pass_passages as db_passages
    from retrieval.maintenance.embed_passages import embed_passages

    docs = [{"id": f"d{i}", "content": LONG.replace("。", f"。{i}", 3)} for i in range(2)]
    await ingest_items(rt, ns, [*docs, {"id": "note", "content": "短いメモ"}])
    written = await _passages(rt, ns)
    async with rt.pool.acquire() as conn:  # as a store from before migration 0014
        await conn.execute(
            "DELETE FROM memory_passages p USING memories m WHERE m.id = p.memory_id"
            " AND m.namespace = $1",
            ns,
        )
        await conn.execute(
            "UPDATE memories SET embedding = $2 WHERE namespace = $1 AND external_id = 'd1'",
            ns,
            Vector(rt.embedder.embed_documents([LONG[:2000]])[0]),
        )

    def stop(msg: str) -> None:
        raise KeyboardInterrupt  # the operator's Ctrl-C after the first batch

    with pytest.raises(KeyboardInterrupt):
        await embed_passages(rt.pool, rt.embedder, namespace=ns, batch=1, log=stop)
    async with rt.pool.acquire() as conn:
        where, last = await meta.progress(conn, db_passages.PROGRESS_KEY)
    assert where == ns and last > 0
    assert await embed_passages(rt.pool, rt.embedder, namespace=ns, batch=1) == 1
    assert sorted(await _passages(rt, ns)) == sorted(written)
    async with rt.pool.acquire() as conn:
        assert await meta.progress(conn, db_passages.PROGRESS_KEY) == ("", 0)
        got = await conn.fetch(
            "SELECT m.embedding AS own, v.embedding AS copy FROM memories m"
            " JOIN memory_vectors v ON v.memory_id = m.id"
            " WHERE m.namespace = $1 AND m.external_id = 'd1'",
            ns,
        )
        ps = await conn.fetch(
            "SELECT p.embedding FROM memory_passages p JOIN memories m ON m.id = p.memory_id"
            " WHERE m.namespace = $1 AND m.external_id = 'd1' ORDER BY p.ord",
            ns,
        )
    want = mean_direction([np.asarray(p["embedding"].to_numpy()) for p in ps])
    assert np.allclose(got[0]["own"].to_numpy(), want, atol=1e-5)
    assert np.allclose(got[0]["copy"].to_numpy(), want, atol=1e-5)


def test_the_mcp_answer_shows_a_long_memory_by_the_part_that_answers():
    from retrieval.api.mcp import MAX_CONTENT_CHARS, render_results
    from retrieval_client.models import RetrieveResponse

    at = LONG.index("将棋")
    r = _result("doc", LONG, (at, at + 100))
    text = render_results(RetrieveResponse.model_validate({"results": [r], "metadata": None}))
    assert len(LONG) > MAX_CONTENT_CHARS and LONG[at : at + 100] in text
    assert f"[characters {at}-{at + 100} of the memory]" in text and LONG[:50] not in text


def test_the_embed_passages_command_reports_what_it_did(rt, ns, monkeypatch, capsys):
    from retrieval.cli import main

    monkeypatch.setenv("RETRIEVAL_DATA_DIR", str(rt.settings.data_dir))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert main(["embed-passages", "--namespace", ns]) == 0
    assert "0 long memories given passages" in capsys.readouterr().out
