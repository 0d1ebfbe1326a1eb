"""Questions about now, and whose fact a text states."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval.analysis import tense
from retrieval.analysis.tense import asks_about_now, plans_ahead, relations_in


@pytest.mark.parametrize(
    ("question", "now"),
    [
        ("where do I live now?", True),
        ("What laptop am I using these days?", True),
        ("Who is my dentist?", True),
        ("What's my job title?", True),
        # the household the asker speaks for is the asker
        ("Which streaming service are we paying for?", True),
        ("Who is the vet our cat goes to?", True),
        ("What did we order for the party?", False),
        ("兄は今どこに住んでる？", True),
        ("今の携帯のキャリアは？", True),
        ("いつも髪を切ってもらってる美容院は？", True),
        ("いま習っている楽器は？", True),
        # the past, or someone else's present, is not asked about now
        ("Where did I live in 2023?", False),
        ("What was my first job?", False),
        ("What's the plan I mentioned earlier?", False),
        ("What is Caroline's identity?", False),
        ("大阪に住んでいた頃の家は？", False),
        ("ジョンが飼い始めた犬の名前は？", False),
        ("会議で何を主張してた？", False),
        # a possessive 's is not "is"
        ("How many months passed between my degree and my master's thesis?", False),
        # a sum is made of every part, older ones included
        ("What is the total amount I spent on the handbag and the skincare?", False),
        ("How much do my gym and my phone cost me altogether?", False),
        ("今のジムと携帯の月額は合計でいくら？", False),
    ],
)
def test_a_question_about_now(nlp, question, now):
    assert asks_about_now(question, nlp.tokens(question), past_window=False) is now


def test_a_named_past_window_is_never_now(nlp):
    q = "Where do I live now?"
    assert not asks_about_now(q, nlp.tokens(q), past_window=True)


def test_relations_in_both_languages_and_not_inside_other_words():
    assert (
        relations_in("兄一家が福岡に引っ越した") == {"brother"} == relations_in("my brother moved")
    )
    assert relations_in("My wife uses a Surface Laptop") == {"spouse"}
    assert relations_in("My teammate Rina was promoted") == {"colleague"}
    assert relations_in("大丈夫、弟子が来た") == frozenset()
    assert relations_in("Moved to Kyoto this weekend") == frozenset()


def _by_the_patterns(text: str) -> frozenset[str]:
    """relations_in's answer by the eleven patterns (its path for a text that is not ASCII)."""
    return frozenset(k for k, rx in tense._RELATION_RES.items() if rx.search(text))


@pytest.mark.parametrize(
    "text",
    [
        "My MOM and my Dad",
        "a moment of reason, a person in season",  # mom, son inside other words: none
        "friend_1 and sons2 and kid-friendly",  # word characters glue: only "kid"
        "my co-workers, a coworker, co-worker's desk, co--worker, co-workerish",
        "grand-mother, grandmother, GRANDPA",
        "the children's and the child's",
        "",
    ],
)
def test_an_ascii_text_names_what_the_patterns_find(text):
    assert relations_in(text) == _by_the_patterns(text)


_WORDS = [w for _, en in tense._RELATIONS.values() for w in en.split()]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(_WORDS),
            st.sampled_from(["Co", "-", "_", "s", "ren", "x", "1", " ", ".", "'", "MOTHER"]),
            st.text(alphabet="abcdefghijklmnopqrstuvwxyz -_'", max_size=6),
        ),
        max_size=12,
    )
)
def test_the_one_pass_over_words_agrees_with_the_patterns(parts):
    text = "".join(parts)
    assert relations_in(text) == _by_the_patterns(text)


@pytest.mark.parametrize(
    ("question", "ahead"),
    [
        ("I've got some free time tonight, any documentary recommendations?", True),
        ("Any ideas for dinner tomorrow?", True),
        ("今夜ひまなんだけど、おすすめの映画ある？", True),
        # something past names memories; no suggestion asked, no plan
        ("I watched a film today, any similar recommendations?", False),
        ("What did I cook tonight? Any tips to improve it?", False),
        ("What were my ideas last week?", False),
        ("今日観た映画に似たおすすめは？", False),
        ("今日の予定", False),
        ("What do I have on tonight?", False),
    ],
)
def test_a_suggestion_for_the_time_ahead(nlp, question, ahead):
    assert plans_ahead(question, nlp.tokens(question)) is ahead


@pytest.mark.parametrize(
    ("text", "window", "two"),
    [
        ("How many days had passed between the Sunday mass and the Ash Wednesday service?",
         "Sunday", True),
        ("Which did I buy first, the bike or the helmet?", None, True),
        ("Did I move before or after I changed jobs on Friday?", "on Friday", True),
        ("引っ越しと転職、どちらが先？", None, True),
        ("先週の土曜から何日経った？", "先週の土曜", True),
        # a window that is itself the span between two dates, and one-moment questions
        ("What did I do between May and August?", "between May and August", False),
        ("6月から8月まで何をした？", "6月から8月まで", False),
        ("How long have I lived here since 2019?", "since 2019", False),
        ("What did we adopt on February 14?", "February 14", False),
        ("先週の土曜に何をした？", "先週の土曜", False),
    ],
)  # fmt: skip
def test_a_question_about_two_moments(text, window, two):
    from retrieval.analysis.tense import relates_two_moments

    assert relates_two_moments(text, window) is two
