"""The words that frame a question (retrieval.analysis.frame): left out of its keywords, its
names and whose it is, in English and Japanese, and kept where they are the question."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from retrieval.analysis.frame import frame_spans

NOW = datetime(2026, 11, 22, 3, 0, tzinfo=UTC)


def _left(text: str) -> str:
    for s, e in frame_spans(text):
        text = text[:s] + " " * (e - s) + text[e:]
    return " ".join(text.split())


@pytest.mark.parametrize(
    ("question", "left"),
    [
        ("Do you remember: when did Melanie go to the museum?", "when did Melanie go to the museum?"),
        ("Remind me, what is my cat's name?", "what is my cat's name?"),
        ("Can you remind me what the assistant said about Kyoto?",
         "what the assistant said about Kyoto?"),
        ("Hey, quick question: do you recall where I parked?", "where I parked?"),
        ("I can't remember. Where did I park?", "Where did I park?"),
        ("So what did Caroline say?", "what did Caroline say?"),
        ("Remember when we went to Kyoto?", "when we went to Kyoto?"),
        ("Tell me about my trip", "my trip"),
        ("テニスはいつしているか覚えてる？", "テニスはいつしているか"),
        ("ねえ、テニスはいつ？", "テニスはいつ？"),
        ("ちょっと聞きたいんだけど、猫の名前は？", "猫の名前は？"),
        # not a frame: the words say what is asked
        ("I forgot my password at work", "I forgot my password at work"),
        ("Well water supply?", "Well water supply?"),
        ("Do you remember?", "Do you remember?"),
        ("覚えてる？", "覚えてる？"),
    ],
)  # fmt: skip
def test_frame_spans(question, left):
    assert _left(question) == left


@pytest.mark.parametrize(
    ("framed", "plain"),
    [
        ("Remind me, what did Caroline realize after her race?",
         "What did Caroline realize after her race?"),
        ("I forgot. What types of pottery have Melanie and her kids made?",
         "What types of pottery have Melanie and her kids made?"),
        ("Quick question. How often does Melanie go to the beach?",
         "How often does Melanie go to the beach?"),
        ("メラニーはいつ陶芸教室に申し込んだか覚えてる？", "メラニーはいつ陶芸教室に申し込んだ？"),
    ],
)  # fmt: skip
def test_a_framed_question_is_analysed_as_the_plain_one(analyzer, framed, plain):
    a, b = analyzer.analyze(framed, NOW), analyzer.analyze(plain, NOW)
    assert a.keywords == b.keywords
    assert a.speaker == b.speaker
    assert [n.text for n in a.names] == [n.text for n in b.names]
    assert a.query == framed  # the question itself is kept as asked
