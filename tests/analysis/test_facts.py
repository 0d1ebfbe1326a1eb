"""Which changing attribute of whom a text states (retrieval.analysis.facts), and questions
for one asked of now without a word for now."""

import pytest

from retrieval.analysis.facts import fact_key, one_at_a_time
from retrieval.analysis.tense import asks_about_now


@pytest.mark.parametrize(
    ("text", "key"),
    [
        # the same attribute in either language
        ("札幌に引っ越した。冬は雪かきが大変そう。", "residence"),
        ("Moved to Fukuoka last month.", "residence"),
        ("My main credit card is the Rakuten Card.", "credit_card"),
        ("メインのクレジットカードを三井住友カードに切り替えた。", "credit_card"),
        ("かかりつけ医を駅前の山本内科に変えた。", "doctor"),
        ("My family doctor is Dr. Ito at Ito Clinic.", "doctor"),
        # the more specific attribute wins: car insurance is insurance, the vet is no doctor
        ("自動車保険をソニー損保に切り替えた。", "insurance"),
        ("The cat had her vaccination at the animal hospital.", "vet"),
        ("Switched dentists: Dr. Hamada is much better.", "dentist"),
        # whose: a relation, or another person named with an honorific
        ("兄一家が福岡に引っ越した。", "residence:brother"),
        ("My sister uses a Galaxy phone.", "phone:sister"),
        ("清水さんは毎週金曜は在宅勤務。", "job:清水"),
        # no attribute; a car wash is not a car; moving a team is not moving house
        ("日曜日に洗車した。", None),
        ("Greg pushed back on moving the team to the new office.", None),
        ("Saw some live music at the club.", None),
        ("My parents still live in Nagoya.", "residence:parents"),
        ("『三体』を読み終えた。", None),
        # a memory that asks states nothing
        ("Should I switch to a new phone?", None),
    ],
)
def test_the_attribute_and_whose_it_is(text, key):
    assert fact_key(text) == key


def test_a_question_has_the_key_of_what_it_asks():
    assert fact_key("Which city do I live in?", asked=True) == "residence"
    assert fact_key("兄は今どこに住んでる？", asked=True) == "residence:brother"
    assert fact_key("Where do I live now?", asked=True) == "residence"
    assert fact_key("Which city do I live in?") is None  # as a memory: a question


def test_attributes_held_several_at_once_do_not_replace_each_other():
    assert one_at_a_time("residence") and one_at_a_time("phone:sister")
    assert not one_at_a_time("medicine") and not one_at_a_time("music_lessons:child")


@pytest.mark.parametrize(
    ("question", "now"),
    [
        # a changing attribute asked with nothing past is asked of now
        ("住まいはどこ？", True),
        ("スマホの機種は何？", True),
        ("猫にはどのキャットフードをあげてる？", True),
        ("Who teaches me piano?", True),
        ("Who supplies our electricity?", True),
        # ... not with a past verb or a word for before
        ("前はどの電力会社だった？", False),
        ("札幌で住んでいた家は？", False),
        ("What car did I drive before the Aqua?", False),
        ("Which doctor treated me?", False),
        # nor with no attribute named, nor in a search phrase that asks nothing
        ("駅前のラーメン屋の名前は？", False),
        ("ジムで筋トレ", False),
        ("my car insurance", False),
    ],
)
def test_a_question_for_a_changing_attribute_is_about_now(nlp, question, now):
    toks = nlp.tokens(question)
    about = fact_key(question, asked=True) is not None
    assert asks_about_now(question, toks, past_window=False, about_a_fact=about) is now
