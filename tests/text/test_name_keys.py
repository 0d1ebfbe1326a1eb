"""Names across scripts: one person, one key, whichever script and order wrote the name."""

import pytest

from retrieval.ingest.index import index_terms, word_count
from retrieval.text.name_keys import (
    READING_PREFIX,
    SOUND_PREFIX,
    fold,
    name_keys,
    query_names,
    romaji,
    skeleton,
)


def keys(nlp, text: str) -> set[str]:
    return set(name_keys(nlp.tokens(text)))


def asked(nlp, text: str) -> set[str]:
    """What a question's names look up."""
    return {k for n in query_names(nlp.tokens(text)) for k in n.keys}


@pytest.mark.parametrize(
    ("kana", "latin"),
    [
        ("サトウ", "satou"),
        ("オオタ", "oota"),
        ("ジョン", "jon"),
        ("シェリー", "sherii"),
        ("ティム", "timu"),
        ("デビッド", "debiqdo"),
        ("きゃべつ", "kyabetsu"),
    ],
)
def test_romaji_is_hepburn_with_marks_for_fold(kana, latin):
    assert romaji(kana) == latin


def test_fold_makes_one_spelling_of_a_sound():
    assert fold("Satoh") == fold("Satou") == fold(romaji("サトウ")) == "sato"
    assert fold("Ohta") == fold(romaji("オオタ")) == "ota"
    assert fold(romaji("デビッド")) == fold(romaji("デービッド")) == "debido"
    assert fold("Namba") == fold("Nanba")
    assert skeleton(romaji("マイケル")) == skeleton(romaji("マイクル")) == "mkr"


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("佐藤さんは会議で", "What did Sato say"),
        ("太田さん", "When is Ohta busy"),
        ("橋本さん", "Hashimotoさん"),
        ("清水さんにもらった", "Shimizu gave me"),
        ("ジョンが", "John adopted a dog"),
        ("エミリーは", "Emily orders"),
        ("デビッドの", "David's wife"),
    ],
)
def test_a_name_in_kanji_kana_or_latin_letters_shares_a_key(nlp, one, other):
    """Asked in either script, the name finds the memory written in the other."""
    assert asked(nlp, one) & keys(nlp, other), (asked(nlp, one), keys(nlp, other))
    assert asked(nlp, other) & keys(nlp, one), (asked(nlp, other), keys(nlp, one))


def test_foreign_names_whose_katakana_varies_meet_by_their_consonants(nlp):
    for question, memory in (
        ("マイケルのお土産", "Michael brought cookies"),
        ("Michael brought cookies", "マイケルのお土産"),
    ):
        shared = asked(nlp, question) & keys(nlp, memory)
        assert shared and all(k.startswith(SOUND_PREFIX) for k in shared)


def test_consonants_match_only_across_scripts(nlp):
    """Tilly and Tell share tr, as do two kana names; neither is one name written twice (on
    LoCoMo "Tilly" found every turn that began "Tell me")."""
    assert not asked(nlp, "When did Nate get Tilly?") & keys(nlp, "Tell me more, Joanna!") - (
        asked(nlp, "Nate") | asked(nlp, "Joanna")
    )
    assert keys(nlp, "メアリーが来た") and skeleton(romaji("メアリー")) == skeleton(
        romaji("エミリー")
    )
    assert not asked(nlp, "エミリーは") & keys(nlp, "メアリーが来た")
    assert asked(nlp, "Emily") & keys(nlp, "エミリーは")  # across scripts they still meet


def test_name_order_and_honorifics_do_not_matter(nlp):
    assert keys(nlp, "山田太郎さん") <= keys(nlp, "Yamada Taro") | keys(nlp, "Taro Yamada")
    assert {n.text for n in query_names(nlp.tokens("Kuroda-sensei told me"))} == {"Kuroda"}
    assert {n.text for n in query_names(nlp.tokens("Tanaka-san recommended"))} == {"Tanaka"}
    assert {n.text for n in query_names(nlp.tokens("黒田先生に言われた"))} == {"黒田"}
    assert not keys(nlp, "Dr. and Mr. and Ms.")


def test_lower_case_words_and_stop_words_are_no_names(nlp):
    assert not keys(nlp, "what did I eat last week")
    assert not query_names(nlp.tokens("What did I eat"))


def test_a_memorys_index_terms_hold_its_name_keys_but_not_its_length(nlp):
    terms = index_terms(nlp.tokens("佐藤さんは会議で予算を削るべきだと主張した"))
    assert READING_PREFIX + "sato" in terms and "佐藤" in terms
    assert word_count(terms) == len([t for t in terms if not t.startswith(READING_PREFIX)])
