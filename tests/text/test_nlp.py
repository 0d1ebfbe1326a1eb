"""Tokenisation: SudachiPy called directly gives what spaCy's tokenizer gives, faster."""

from __future__ import annotations

import json

import pytest

from retrieval.text.nlp import english_norm, english_norms
from tests.helpers import shared_file

EDGE_CASES = [
    "RTX-4090 と pg_trgm を使う  Intent の件\n\n改行　全角スペース",
    "  ",
    "",
    "Hello world, last Friday!",
    "ｶﾀｶﾅ１２３と①②",
    "令和5年の先々週、お盆休みに3000年前の遺跡へ",
    "東京都庁で「アオバ」の打ち合わせ。" * 600,
]


def _fields(tokens):
    return [(t.surface, t.norm, t.tag) for t in tokens]


def test_direct_sudachi_equals_spacys_tokenizer(nlp):
    assert nlp._sudachi is not None  # ja_ginza's tokenizer wraps SudachiPy
    texts = list(EDGE_CASES)
    corpus = shared_file("eval", "jsquad", "corpus.jsonl")
    if corpus.exists():  # the project runs without ../shared; the edge cases still count
        with open(corpus, encoding="utf-8") as f:
            texts += [json.loads(line)["text"] for _, line in zip(range(300), f, strict=False)]
    for text in texts:
        assert _fields(nlp.tokens(text)) == _fields(nlp.spacy_tokens(text)), text[:60]


@pytest.mark.parametrize("text", ["山田真由さんと新しいプロジェクト「ヒスイ」の打ち合わせをした。"])
def test_tags_are_sudachis_part_of_speech(nlp, text):
    toks = nlp.tokens(text)
    assert all(t.tag for t in toks)
    assert next(t.tag for t in toks if t.surface == "打ち合わせ").startswith("名詞-普通名詞")


def test_english_norms_stems_a_batch_as_english_norm_does_one_word():
    words = ["Painted", "paints", "iPhone15", "co-worker", "RUNNING", "Osaka", "été"]
    assert english_norms(words) == {w: english_norm(w) for w in words}
    assert english_norms([]) == {}
