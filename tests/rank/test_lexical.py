"""The character n-gram signal: what a memory holds of the question, names included."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval.rank.lexical import (
    _CODES,
    asked_grams,
    char_ngrams,
    held_ngrams,
    lexical_overlap,
    name_grams,
)


def test_a_name_held_in_another_script_holds_the_query_grams_that_touch_it():
    assert name_grams("清水さんに会った", ["清水"], 3) == {"清水さ", "水さん"}
    assert name_grams("清水さんに会った", [], 3) == set()
    # The name twice: both places count.
    assert name_grams("清水と清水さん", ["清水"], 2) == {"清水", "水と", "と清", "水さ"}


def test_a_gram_that_touches_a_name_the_memory_does_not_hold_is_not_held():
    """Of 木村翔太, a memory naming another 翔太 (山口翔太) holds 翔太's grams, not 村翔太: the
    multi-hop dev set's decoy intro rose above the answer when it did."""
    q = "木村翔太さんと打ち合わせ"
    assert name_grams(q, ["翔太"], 3) >= {"村翔太", "木村翔"}
    assert name_grams(q, ["翔太"], 3, others=["木村"]) == {"翔太さ", "太さん"}
    # Both held (the right person in another script): every gram around the full name.
    assert name_grams(q, ["木村", "翔太"], 3) >= {"木村翔", "村翔太", "翔太さ"}


def test_held_names_raise_only_the_memory_that_holds_them():
    q = "Michaelさんと話した"
    docs = {1: "マイケルさんと話した", 2: "ジョンさんと話した"}
    plain = lexical_overlap(q, docs, 3)
    held = lexical_overlap(q, docs, 3, held={1: ["Michael"]}, names=["Michael"])
    assert plain[1] == plain[2]
    assert held[1] > plain[1] and held[1] > held[2]
    # A memory holding another of the question's names gets nothing for this one.
    other = lexical_overlap(q, docs, 3, held={1: ["Tanaka"]}, names=["Michael", "Tanaka"])
    assert other[1] == plain[1]


_WORDS = st.text(st.sampled_from("abcAB 1_-会議は水曜日𠮷ｱ"), max_size=40)


@settings(max_examples=300, deadline=None)
@given(text=_WORDS, query=_WORDS, n=st.integers(1, 4))
def test_the_n_grams_a_memory_holds_are_the_sets_intersection(text, query, n):
    # held_ngrams keeps a memory's n-grams as integer codes (a set past MAX_CODED_N, or for a
    # text shorter than n); what it finds must be the plain set intersection.
    q = char_ngrams(query, n) | char_ngrams(text[3:9], n)
    _CODES._items.clear()  # made, then read from the cache: both the same
    for _ in range(2):
        assert held_ngrams(text, n, "m", q, asked_grams(q, n)) == char_ngrams(text, n) & q
