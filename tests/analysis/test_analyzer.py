"""Query Analyzer: query types, keywords, entities, cue dictionaries, and the shared dev set."""

import json
from datetime import datetime

import pytest

from retrieval.analysis.analyzer import CueDictionary, QueryAnalyzer
from retrieval.analysis.strategy import select_strategy
from retrieval.models import QueryType, Strategy
from retrieval.text.nlp import english_norm
from tests.helpers import dev_case_ok, shared_file

NOW = datetime.fromisoformat("2026-11-22T12:00:00+09:00")


@pytest.mark.parametrize(
    "query,qtype",
    [
        ("Resonant Engineはいつ開始した？", QueryType.FACTUAL),
        ("呼吸のリズムとは何か", QueryType.CONCEPTUAL),
        ("マイグレーションはどうやって実行する？", QueryType.PROCEDURAL),
        ("最近の体調の話", QueryType.TEMPORAL),
        ("ベクトル検索とキーワード検索の違い", QueryType.COMPARATIVE),
        ("PostgreSQLとDuckDBはどちらが速い？", QueryType.COMPARATIVE),
        ("How to restore the database from a backup", QueryType.PROCEDURAL),
        ("What is reciprocal rank fusion?", QueryType.CONCEPTUAL),
        ("Who reviewed the PR?", QueryType.FACTUAL),
    ],
)
def test_query_types(analyzer, query, qtype):
    assert analyzer.analyze(query, NOW).query_type == qtype


def test_spec_time_range_example(analyzer):
    intent = analyzer.analyze("先週のIntent", NOW)
    assert intent.time_range.relative == "last_week"
    assert select_strategy(intent) == Strategy.TEMPORAL


def test_a_time_ahead_in_a_request_for_suggestions_is_no_window(analyzer):
    """ "Free time tonight, any recommendations?" asks for memories of the asker's tastes, made
    any day; "what did I watch tonight?" asks for tonight's. Neither keeps "tonight" as a word
    to search."""
    ahead = analyzer.analyze(
        "I've got some free time tonight, any documentary recommendations?", NOW
    )
    assert ahead.time_range is None and ahead.query_type != QueryType.TEMPORAL
    assert "tonight" not in ahead.keywords and ahead.speaker == "user"
    past = analyzer.analyze("What documentary did I watch tonight?", NOW)
    assert past.time_range is not None and past.time_range.relative == "today"
    assert select_strategy(past) == Strategy.TEMPORAL
    assert analyzer.analyze("明日のおすすめの服装は？", NOW).time_range is None
    # a naive now is read in the analyzer's zone, as the time words are
    naive = NOW.replace(tzinfo=None)
    assert analyzer.analyze("Any ideas for tonight?", naive).time_range is None
    # A window that began before today holds memories, whatever the question asks for.
    for began in ("9月以降の旅行でおすすめの場所は？", "Any ideas from this week?"):
        assert analyzer.analyze(began, NOW).time_range is not None, began


def test_what_the_assistant_said_is_no_question_about_now(analyzer):
    """ "What's the phone number you provided me?" is present tense about a past conversation:
    the newest turn that mentions the number does not take its place."""
    said = analyzer.analyze("What's the phone number of the board that you provided me?", NOW)
    assert said.speaker == "assistant" and not said.present
    mine = analyzer.analyze("What's my phone number?", NOW)
    assert mine.speaker == "user" and mine.present


def test_keywords_are_content_words_without_particles_or_time_words(analyzer):
    intent = analyzer.analyze("先週話したIntentの内容", NOW)
    assert "intent" in intent.keywords and "内容" in intent.keywords and "話す" in intent.keywords
    assert not {"の", "た", "先週"} & set(intent.keywords)


def test_entities_and_name_terms(analyzer):
    intent = analyzer.analyze("2025年1月に東京でResonant Engineの設計レビューをした", NOW)
    texts = {e.text for e in intent.entities}
    assert {"東京", "Resonant Engine"} <= texts
    assert "Resonant Engine" in intent.name_terms
    assert intent.time_range.start.month == 1 and intent.importance > 0.5


def test_english_keywords_folded(analyzer):
    intent = analyzer.analyze("When was the GIN index on memories created?", NOW)
    assert {"gin", "index", english_norm("memory")} <= set(intent.keywords)
    assert "the" not in intent.keywords and "when" not in intent.keywords
    # stemmed alike in queries and memories (a maintained Snowball stemmer, not a plural fold)
    assert english_norm("painted") == english_norm("paints") == english_norm("painting")
    # no katakana reading of English words in English text (go -> ゴー, support -> サポート)
    assert not any(not t.isascii() for t in intent.keywords)
    # a capitalised question word is no name
    assert "When" not in intent.name_terms and "GIN" in intent.name_terms


def test_english_phrases_sudachi_reads_as_one_word_are_their_words(analyzer):
    # Sudachi reads "want to" as ウォントゥ and "don't" as ドント; "Joanna's" leaves an "s".
    intent = analyzer.analyze("What does Nate want to do at Joanna's place? I don't know", NOW)
    assert {"want", "joanna", "place", "know"} <= set(intent.keywords)
    assert not any(not t.isascii() for t in intent.keywords)
    assert "s" not in intent.keywords and "t" not in intent.keywords


def test_dictionary_can_be_replaced_without_code(tmp_path, nlp):
    path = tmp_path / "dict.json"
    path.write_text(json.dumps({"procedural": ["レシピ"], "factual": []}), encoding="utf-8")
    a = QueryAnalyzer(nlp, dictionary=CueDictionary.load(path))
    assert a.analyze("カレーのレシピ", NOW).query_type == QueryType.PROCEDURAL


def test_bad_dictionary_is_refused(tmp_path):
    path = tmp_path / "dict.json"
    path.write_text(json.dumps({"procedural": "レシピ"}), encoding="utf-8")
    with pytest.raises(ValueError, match="procedural"):
        CueDictionary.load(path)


def test_dev_set_accuracy(analyzer):
    """The shared labelled examples (no sentence is special-cased); prints the accuracy."""
    path = shared_file("eval", "analyzer_dev.jsonl")
    if not path.exists():
        pytest.skip("shared/eval not present")
    cases = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    ok = sum(dev_case_ok(analyzer, c, NOW) for c in cases)
    print(f"analyzer dev accuracy: {ok}/{len(cases)}")
    assert ok / len(cases) >= 0.9
