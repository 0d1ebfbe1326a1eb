"""Reading a question against a memory (retrieval.analysis.reading): whose turn it is, whose
the words asked about are, and the kind of answer asked and stated; on the real analyzer."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from retrieval.analysis.reading import asked, states, who, whose

NOW = datetime(2026, 11, 22, 3, 0, tzinfo=UTC)


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
