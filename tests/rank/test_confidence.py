"""The confidence's signals and its map (retrieval.rank.confidence), on the real analyzer."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from retrieval.models import Candidate, Relevance, ScoredResult, Source
from retrieval.rank.confidence import (
    SIGNALS,
    Calibration,
    Map,
    asked,
    assess,
    coverage,
    promote,
    signals_of,
    states,
    who,
    whose,
)

NOW = datetime(2026, 11, 22, 3, 0, tzinfo=UTC)


def _result(content: str, score: float, i: int = 1, **kw: object) -> ScoredResult:
    c = Candidate(
        id=i, external_id=f"m{i}", content=content, title=None, memory_type="dialog",
        source_type="conversation", metadata=dict(kw.get("metadata", {})),  # type: ignore[call-overload]
        created_at=NOW, embedding=None, score=score, source=Source.VECTOR,
    )  # fmt: skip
    return ScoredResult(c, score, {}, ["vector"], relevance=Relevance.HIGH)


@pytest.mark.parametrize(
    ("question", "content", "expected"),
    [
        ("What did Caroline realize after her charity race?", "Melanie: I ran a race.", -1.0),
        ("What did Melanie realize after her charity race?", "Melanie: I ran a race.", 1.0),
        # the other speaker talking about her: cannot be told
        ("What did Caroline do?", "Melanie: Caroline, your race was great!", 0.0),
        ("What is my cat's name?", "user: my cat is Luna", 1.0),
        ("What is my cat's name?", "assistant: a cat needs a name", -1.0),
        ("Which restaurant you recommended was it?", "assistant: try the ramen place", 1.0),
        # a Japanese question naming no one asks about the asker
        ("テニスはいつしている？", "assistant: テニスはいつしているんですか？", -1.0),
        ("テニスはいつしている？", "user: 毎週土曜日の朝にしている。", 1.0),
        ("田中さんはいつテニスをしている？", "user: 毎週土曜日の朝にしている。", None),
        # whose turn it is does not apply: a question about no one, a memory of nobody's
        ("What is the weather like?", "Melanie: sunny", None),
        ("What did Caroline paint?", "The lake at sunrise, in oils.", None),
        ("What is the capital?", "user: Paris, I think", None),
        ("キャロラインはレースの後で何に気づいた？", "Caroline: I realized I love running.", 1.0),
        ("キャロラインはレースの後で何に気づいた？", "Melanie: I realized I love running.", -1.0),
        # said by the one asked about, but only of "you": about whom she speaks to
        (
            "What did Maria get promoted to?",
            "Maria: Congrats on the promotion! How do you feel?",
            0.5,
        ),
        ("What did Maria get promoted to?", "Maria: Thanks John! I got promoted to manager.", 1.0),
        # the words asked about follow "your": the one spoken to's, though she says "me"
        (
            "What color did Joanna choose for her hair?",
            "Joanna: Wow, your new hair color looks amazing! Tell me all about it!",
            0.5,
        ),
        ("Why did Joanna get a third turtle?", "Joanna: I bet you got a third turtle.", 0.5),
        ("Why did Joanna get a third turtle?", "Joanna: I got a third turtle, Nate!", 1.0),
        # the one asked about named, but the words asked about are the speaker's own
        (
            "What did Joanna take to the beach?",
            "Nate: Joanna, I took my turtles to the beach.",
            -1.0,
        ),
        ("What did Joanna take to the beach?", "Nate: Joanna took turtles to the beach.", 0.0),
        # "Remind me" asks to recall; it does not make the question the user's
        ("Remind me, what did Caroline realize?", "Melanie: I realized I love running.", -1.0),
    ],
)
def test_who(analyzer, question, content, expected):
    intent = analyzer.analyze(question, NOW)
    assert who(intent, content, {}) == expected


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("Wow, your new hair color looks amazing! Tell me all about it!", "you"),
        ("I bet you would be getting a third turtle.", "you"),
        ("You asked, so: my turtles went to the beach.", "me"),
        ("Turtles at the beach, what a day.", None),  # held, but after no one
        ("I love the beach.", None),  # not held
    ],
)
def test_whose_the_words_are(body, expected):
    assert whose(body, ["turtl", "hair", "color"]) == expected


def test_who_reads_a_role_in_metadata(analyzer):
    intent = analyzer.analyze("What was the museum you told me about?", NOW)
    assert intent.speaker == "assistant"
    assert who(intent, "The museum opens at ten.", {"role": "assistant"}) == 1.0
    assert who(intent, "The museum opens at ten.", {"role": "user"}) == -1.0


def test_coverage_weighs_a_word_no_memory_holds_most():
    idf = {"cat": 2.0, "name": 0.5}
    # "hamster" is in no memory: it weighs the most there is, so missing it costs most
    held, lacked = coverage(["hamster", "name"], {"name", "cat"}, idf, unseen=6.0)
    assert held == pytest.approx(0.5 / 6.5)
    assert lacked == 1.0  # a word no memory holds
    assert coverage(["cat", "name"], {"name", "cat"}, idf, unseen=6.0) == (1.0, 0.0)
    assert coverage(["cat", "name"], {"name"}, idf, unseen=6.0)[1] == pytest.approx(2.0 / 6.0)
    assert coverage([], {"x"}, idf, unseen=6.0) == (1.0, 0.0)


@pytest.mark.parametrize(
    ("question", "kind", "yes", "no"),
    [
        ("How often do I play tennis?", "frequency", "I play every Saturday", "I like tennis"),
        ("How many cats do I have?", "number", "I have two cats", "I have cats"),
        ("テニスはどのくらいの頻度でしている？", "frequency", "毎週土曜にテニス", "テニスが好き"),
        ("会議の予算はいくら？", "amount", "予算は300万円", "予算の話をした"),
        ("締め切りは何日？", "date", "締め切りは2月9日", "締め切りの話"),
    ],
)
def test_the_kind_of_answer(analyzer, question, kind, yes, no):
    intent = analyzer.analyze(question, NOW)
    assert asked(intent) == kind
    assert states(kind, yes)
    assert not states(kind, no)


def test_a_question_asking_no_kind(analyzer):
    assert asked(analyzer.analyze("What is my cat's name?", NOW)) is None


def test_map_and_assess_label_by_confidence(analyzer):
    cal = Calibration(
        read=Map({"verifier": 1.0}, 0.0),
        unread=Map({"score": 4.0}, -2.0),
        tail=Map({"score": 1.0}, 0.0),
        high=0.7,
        answers=0.5,
        whoever={k: Map({"score": 0.0}, -9.0) for k in ("read", "unread", "tail")},
    )
    intent = analyzer.analyze("What is my cat's name?", NOW)
    results = [_result("user: my cat is Luna", 0.9, 1), _result("user: I like dogs", 0.3, 2)]
    sigs = [
        {"verifier": 3.0, "score": 0.9, "who": 1.0},
        {"score": 0.3, "coverage": 1.0, "who": 1.0},
    ]
    out, answered = assess(results, sigs, cal)
    assert out[0].confidence == pytest.approx(1 / (1 + 2.718281828**-3.0), rel=1e-6)
    assert out[0].relevance is Relevance.HIGH
    assert out[1].confidence == pytest.approx(1 / (1 + 2.718281828 ** (2.0 - 1.2)), rel=1e-6)
    assert out[1].relevance is Relevance.MEDIUM  # was high by its score
    assert answered.answered and answered.threshold == 0.5
    assert out[0].signals["confidence_verifier"] == 3.0
    low, answered = assess(results[1:], sigs[1:], cal)
    assert not answered.answered
    nobody_s, _ = assess(results[:1], [{"verifier": 3.0, "score": 0.9}], cal)
    assert nobody_s[0].confidence == pytest.approx(1 / (1 + 2.718281828**9.0), rel=1e-6)
    assert intent.query.startswith("What")


def test_signals_without_the_verifier(analyzer, nlp):
    intent = analyzer.analyze("What is the name of my hamster?", NOW)
    results = [_result("user: My cat Luna sleeps all day.", 0.8)]
    sigs = signals_of(intent, results, nlp.terms, {"name": 1.0, "cat": 3.0}, 7.0, None)
    assert "verifier" not in sigs[0]
    assert sigs[0]["coverage"] < 0.2  # hamster: in no memory
    assert sigs[0]["unmatched"] == 1.0
    assert sigs[0]["unseen"] == 1.0
    assert sigs[0]["who"] == 1.0
    assert sigs[0]["score"] == 0.8


def test_the_shipped_calibration_loads():
    cal = Calibration.load()
    assert 0.0 < cal.answers < 1.0 and 0.0 < cal.high < 1.0
    assert set(cal.read.weights) >= {"verifier"}
    assert "verifier" not in cal.unread.weights
    assert set(cal.tail.weights) <= {"who", "kind", "score"}


@pytest.mark.parametrize(
    ("question", "content", "expected"),
    [
        ("テニスはいつしている？", "assistant: いいですね！テニスはいつしているんですか？", 1.0),
        ("テニスはいつしている？", "user: 毎週土曜日の朝に近所のコートでしている。", 0.0),
        ("When do I play tennis?", "assistant: When do you usually play tennis, by the way?", 1.0),
        ("When do I play tennis?", "user: I play tennis on Sunday afternoons.", 0.0),
        # a question back to the person asked about is no echo of this one
        ("What did John paint?", "Maria: Nice! What about you, John?", 0.0),
        # a question of names only (Tilly, stemmed "tilli") asks nothing a memory could echo
        ("When did Nate get Tilly for Joanna?", "Joanna: Tilly helps me stay focused.", 0.0),
    ],
)
def test_asks_marks_a_memory_that_asks_the_question_back(
    analyzer, nlp, question, content, expected
):
    intent = analyzer.analyze(question, NOW)
    sigs = signals_of(intent, [_result(content, 0.5)], nlp.terms, {}, 7.0, None)
    assert sigs[0]["asks"] == expected


def test_a_word_some_memory_holds_is_not_unseen(analyzer, nlp):
    intent = analyzer.analyze("What is the name of my dog?", NOW)
    results = [_result("user: My cat Luna sleeps all day.", 0.8)]
    sigs = signals_of(intent, results, nlp.terms, {"name": 1.0, "cat": 3.0, "dog": 5.0}, 7.0, None)
    assert 0.0 < sigs[0]["unmatched"] < 1.0
    assert sigs[0]["unseen"] == 0.0


def test_a_written_date_is_asked_of_the_memory_time_not_its_words(analyzer, nlp):
    intent = analyzer.analyze("What painting did Melanie show on October 13, 2023?", NOW)
    assert {"octob", "13", "2023"} <= set(intent.time_terms) <= set(intent.keywords)
    results = [_result("Melanie: Here is the painting I just finished!", 0.7)]
    sigs = signals_of(intent, results, nlp.terms, {"paint": 2.0, "melani": 1.0}, 7.0, None)
    assert sigs[0]["coverage"] == 1.0 and sigs[0]["unseen"] == 0.0


def test_the_shipped_maps_read_what_the_service_computes():
    cal = Calibration.load()
    computed = set(SIGNALS)
    for m in (cal.read, cal.unread, cal.tail):
        assert set(m.weights) <= computed and "who" in m.weights
    for m in cal.whoever.values():
        assert set(m.weights) <= computed - {"who"}


def test_a_memory_of_nobody_s_is_mapped_without_who(analyzer, nlp):
    cal = Calibration.load()
    intent = analyzer.analyze("京都への出張はいつ？", NOW)
    results = [_result("来週の金曜に京都へ出張する", 0.6)]
    sigs = signals_of(intent, results, nlp.terms, {"京都": 2.0, "出張": 2.0}, 7.0, None)
    assert "who" not in sigs[0]
    assert cal.map_for(sigs[0]) is cal.whoever["unread"]
    labelled = {**sigs[0], "who": 1.0}
    assert cal.map_for(labelled) is cal.unread
    assert cal.map_for({"score": 0.5, "kind": 0.0}) is cal.whoever["tail"]


def _sure(i: int, score: float, confidence: float) -> ScoredResult:
    r = _result(f"user: memory {i}", score, i)
    return replace(r, confidence=confidence, reason=f"found by vector #{i}")


def test_a_clearly_surer_result_close_by_score_is_put_first():
    results = [_sure(1, 0.9, 0.40), _sure(2, 0.85, 0.55), _sure(3, 0.8, 0.90), _sure(4, 0.7, 0.99)]
    out = promote(results)
    assert [r.candidate.id for r in out] == [3, 1, 2, 4]  # the fourth is beyond PROMOTE_AMONG
    assert out[0].score == 0.9 and all(
        a.score >= b.score for a, b in zip(out, out[1:], strict=False)
    )
    assert "put first by its confidence (0.90 against 0.40 for m1)" in out[0].reason
    assert out[0].signals["confidence_promoted"] == 1.0


@pytest.mark.parametrize(
    "results",
    [
        [_sure(1, 0.9, 0.40), _sure(2, 0.85, 0.45)],  # not clearly surer
        [_sure(1, 0.9, 0.40), _sure(2, 0.6, 0.95)],  # too far below by score
        [_sure(1, 0.9, 0.80), _sure(2, 0.85, 0.60)],  # the first is the surest
        [_sure(1, 0.9, 0.40)],
        [],
    ],
)
def test_otherwise_the_order_stays(results):
    assert promote(results) == results
