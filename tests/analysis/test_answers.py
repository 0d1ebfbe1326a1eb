"""The kind of answer a question asks for, and whether a text gives one."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from retrieval.analysis.answers import (
    _ASKING_SENTENCE_RE,
    AnswerKind,
    asked_kind,
    asks_about,
    gives,
    mentions,
)
from retrieval.text.nlp import question_focus

DATE, AMOUNT = AnswerKind.DATE, AnswerKind.AMOUNT


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("山田さんと打ち合わせしたプロジェクトの締め切りはいつ？", DATE),
        ("木村さんと進めている案件の締め切りを教えて", DATE),
        ("〆切を教えて", DATE),
        ("アオバの納期を教えて", DATE),
        ("レポートの提出期限を知りたい", DATE),
        ("新製品の発売日は？", DATE),
        ("何日に決まったんだっけ", DATE),
        ("When is the deadline for Aoba?", DATE),
        ("アオバの予算はいくら？", AMOUNT),
        ("案件の予算を教えて", AMOUNT),
        ("旅行の費用を教えて", AMOUNT),
        ("勉強会の参加費を教えて", AMOUNT),
        ("How much is the budget?", AMOUNT),
        ("ヒスイの集まりはどこでやるの", None),
        ("誰と打ち合わせしたっけ", None),
        ("pgvectorの設定方法", None),
        ("", None),
    ],
)
def test_asked_kind(nlp, question, kind):
    toks = nlp.tokens(question)
    focus = question_focus(question, toks)
    assert asked_kind(question, toks, focus.term if focus else None) == kind


@pytest.mark.parametrize(
    ("text", "word", "term"),
    [
        # Japanese: the last common noun, as written, and its normal form
        ("山田真由さんと打ち合わせしたプロジェクトの締め切りはいつ？", "締め切り", "締め切り"),
        ("提出の締切はいつ？", "締切", "締め切り"),
        ("井上さんと進めている案件の予算を教えて", "予算", "予算"),
        ("ヒスイの集まりはどこでやるの", "集まり", "集まり"),
        ("どこ？", None, None),
        # English: the noun a question word asks about, as typed; no verb ever is one
        ("Which book did Hanako Ikeda recommend to me?", "book", "book"),
        ("What restaurants did we try in Kyoto?", "restaurants", "restaur"),
        ("what kind of dog does John have", "dog", "dog"),
        ("what did I eat last week", None, None),
        ("where do I live now?", None, None),
    ],
)
def test_the_focus_is_what_the_question_asks_about_as_written(nlp, text, word, term):
    got = question_focus(text, nlp.tokens(text))
    assert (got.word, got.term) == (word, term) if word else got is None


@pytest.mark.parametrize(
    ("text", "kind", "expected"),
    [
        ("アカネの提出期限は2月9日。遅れないように。", DATE, True),
        ("「カエデ」の締め切りは1月1日に決まった。", DATE, True),
        ("締め切りは十二月三日です", DATE, True),
        ("1910年に建てられた", DATE, True),
        ("令和5年に引っ越した", DATE, True),
        ("期限は2026-03-10", DATE, True),
        ("次は15日にやる", DATE, True),
        ("毎週月曜に定例", DATE, True),
        ("due Mar 10", DATE, True),
        ("井上さんとプロジェクト「アカネ」の打ち合わせをした。場所は仙台。", DATE, False),
        ("3日間かかった", DATE, False),
        ("「アカネ」の予算は520万円で承認された。", AMOUNT, True),
        ("会費は￥3,000", AMOUNT, True),
        ("It costs $20", AMOUNT, True),
        ("三千円だった", AMOUNT, True),
        ("費用は20 dollars", AMOUNT, True),
        ("「アカネ」の締め切りは2月9日。", AMOUNT, False),
        ("参加者は30人", AMOUNT, False),
    ],
)
def test_gives(text, kind, expected):
    assert gives(kind, text) is expected


@given(st.text(max_size=300), st.sampled_from(list(AnswerKind)))
def test_gives_takes_any_text(text, kind):
    assert gives(kind, text) is (mentions(kind, text) > 0)


def test_mentions_counts_up_to_most_and_reads_only_the_start():
    assert mentions(DATE, "1月1日と2月2日と3月3日") == 2
    assert mentions(DATE, "1月1日と2月2日と3月3日", most=5) == 3
    assert mentions(AMOUNT, "あ" * 100_000 + "500円") == 0


@pytest.mark.parametrize(
    ("turn", "keywords", "names", "expected"),
    [
        # The turn asks what the query asks: its reply answers the query.
        (
            "Aiko: Sounds fun, Ken! How often do you and your family work out?",
            ["ken", "work", "famili"],
            ["Ken"],
            True,
        ),
        # It asks something else, or only the other's name is shared: the reply is a neighbour.
        (
            "Ken: Thanks, Aiko! What have you been up to lately, Ken?",
            ["ken", "work", "famili"],
            ["Ken"],
            False,
        ),
        ("Ken: We worked out a lot. Great!", ["work"], [], False),
        ("プロジェクトXの締め切りはいつ？", ["締め切り"], [], True),
        ("週末は何をしていたの", ["週末"], [], True),
        ("昨日の会議はどうだった？", ["締め切り"], [], False),
        # A query with only names to compare cannot tell: every asking turn stays one.
        ("Hey Ken, how are you?", ["ken"], ["Ken"], True),
    ],
)
def test_asks_about(turn, keywords, names, expected):
    assert asks_about(turn, keywords, names) is expected


@given(st.text(max_size=300), st.lists(st.text(min_size=1, max_size=8), max_size=5))
def test_asks_about_takes_any_text(text, keywords):
    assert asks_about(text, keywords, ["Ken"]) in (True, False)


# The asking-sentence pattern as it was before its matches were anchored to where a run of text
# starts: the same matches, found by trying every character.
_UNANCHORED = re.compile(r"[^。！？!?.\n]*(?:[?？]|(?:か|かな|の)[。！!]?\s*$)")


@given(st.text(alphabet="ab cかなの。！？!?.\n\t", max_size=40))
def test_asking_sentences_anchored_are_the_ones_found_unanchored(text):
    got = [m.group(0) for m in _ASKING_SENTENCE_RE.finditer(text)]
    assert got == [m.group(0) for m in _UNANCHORED.finditer(text)]
