"""The shipped verifier (retrieval/data/verifier): it loads, reads pairs as it was trained to,
and scores the hamster/cat, table tennis/tennis and Caroline/Melanie cases in both languages."""

from __future__ import annotations

import json

import numpy as np
import pytest

from retrieval.embedding.e5_weights import shared_weights
from retrieval.rank.verifier import (
    MEMORY_CHARS,
    MODEL_DIR,
    PAIR_TOKENS,
    QUESTION_TOKENS,
    Verifier,
    match_flags,
    memory_window,
    pair_ids,
)

CASES = [
    (
        "user: My cat Luna loves sleeping on the windowsill.",
        "What is the name of my cat?",
        "What is the name of my hamster?",
    ),
    (
        "user: I play tennis every Saturday morning with my neighbour.",
        "How often do I play tennis?",
        "How often do I play table tennis?",
    ),
    (
        "Melanie: I ran a charity race for mental health last Saturday. It made me realize how "
        "important it is to take care of myself.",
        "What did Melanie realize after her charity race?",
        "What did Caroline realize after her charity race?",
    ),
    ("うちの猫の名前はミケ。もう十歳になる。", "うちの猫の名前は？", "うちのハムスターの名前は？"),
    (
        "毎週土曜日の朝に近所の公園でテニスをしている。",
        "テニスはどのくらいしている？",
        "卓球はどのくらいしている？",
    ),
    (
        "メラニー: チャリティーレースを走って、自分を大切にすることの大切さに気づいた。",
        "メラニーはチャリティーレースの後で何に気づいた？",
        "キャロラインはチャリティーレースの後で何に気づいた？",
    ),
]


@pytest.fixture(scope="module")
def verifier():
    return Verifier()


def test_the_card_says_how_it_was_made():
    card = json.loads((MODEL_DIR / "verifier.json").read_text())
    assert card["layers"] >= 1 and len(card["head"]["w"]) == 384 and len(card["match"]) == 2
    assert card["input"] == {
        "question_tokens": QUESTION_TOKENS,
        "pair_tokens": PAIR_TOKENS,
        "memory_chars": MEMORY_CHARS,
    }
    assert card["training"]["seed"] is not None and card["training"]["counts"]
    assert 0.5 < card["dev"]["all"] <= 1.0


def test_a_pair_is_cut_to_its_budget():
    tok = shared_weights().tokenizer
    ids = pair_ids(tok, "question " * 100, "memory " * 500)
    assert len(ids) == PAIR_TOKENS
    assert ids[0] == tok.bos and ids[-1] == tok.eos
    assert ids.count(tok.eos) == 3


def test_match_flags_mark_the_words_both_sides_hold():
    tok = shared_weights().tokenizer
    ids = pair_ids(tok, "my cat", "my dog")
    flags = match_flags(ids, tok.eos)
    cut = ids.index(tok.eos)
    question, memory = ids[1:cut], ids[cut + 2 : -1]
    assert [ids[i] for i in range(len(ids)) if flags[i] == 1] == [
        t for t in question if t in memory
    ]
    assert [ids[i] for i in range(len(ids)) if flags[i] == 2] == [
        t for t in memory if t in question
    ]
    (my,) = tok.ids("my")
    (cat,) = tok.ids("cat")
    assert flags[ids.index(my)] == 1 and flags[ids.index(cat)] == 0


def test_a_long_memory_is_read_where_the_question_is():
    text = "Caroline: " + "nothing here. " * 60 + "My hamster is called Biscuit. " + "x " * 300
    window = memory_window("What is my hamster called?", text)
    assert "hamster" in window and window.startswith("Caroline: … ")
    assert len(window) <= MEMORY_CHARS + len("Caroline: … ")
    assert memory_window("anything", "short") == "short"


def test_it_scores_every_case_the_same_alone_or_together(verifier):
    for memory, yes, no in CASES:
        both = verifier.logits(yes, [memory, memory])
        alone = verifier.logits(yes, [memory])
        assert np.all(np.isfinite(both)) and both.shape == (2,)
        assert both[0] == pytest.approx(alone[0], abs=1e-4)
        # The question the memory answers reads above its twin (hamster, table tennis, the other
        # speaker): the shipped reader gets all six right, by 0.35 (Melanie/Caroline) to 5.3.
        assert alone[0] > verifier.logits(no, [memory])[0], (yes, no)
    assert verifier.logits("x", []).shape == (0,)
