"""The confidence's signals and its map (retrieval.rank.confidence), on the real analyzer."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from retrieval.models import Candidate, Relevance, ScoredResult, Source
from retrieval.rank.calibration import Calibration
from retrieval.rank.confidence import SIGNALS, coverage, signals_of

NOW = datetime(2026, 11, 22, 3, 0, tzinfo=UTC)


def _result(content: str, score: float, i: int = 1, **kw: object) -> ScoredResult:
    c = Candidate(
        id=i, external_id=f"m{i}", content=content, title=None, memory_type="dialog",
        source_type="conversation", metadata=dict(kw.get("metadata", {})),  # type: ignore[call-overload]
        created_at=NOW, embedding=None, score=score, source=Source.VECTOR,
    )  # fmt: skip
    return ScoredResult(c, score, {}, ["vector"], relevance=Relevance.HIGH)


def test_coverage_weighs_a_word_no_memory_holds_most():
    idf = {"cat": 2.0, "name": 0.5}
    # "hamster" is in no memory: it weighs the most there is, so missing it costs most
    held, lacked = coverage(["hamster", "name"], {"name", "cat"}, idf, unseen=6.0)
    assert held == pytest.approx(0.5 / 6.5)
    assert lacked == 1.0  # a word no memory holds
    assert coverage(["cat", "name"], {"name", "cat"}, idf, unseen=6.0) == (1.0, 0.0)
    assert coverage(["cat", "name"], {"name"}, idf, unseen=6.0)[1] == pytest.approx(2.0 / 6.0)
    assert coverage([], {"x"}, idf, unseen=6.0) == (1.0, 0.0)


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


def test_the_shipped_maps_were_fitted_on_the_signal_code_as_it_is():
    """The maps fit the signals the code computes now: a change to the code that reads them
    (SIGNAL_CODE) or to the reader's weights, without a refit, fails here. Refit with
    `scripts/verifier/fit.py --write`; a change shown to leave every signal as it was (the rows
    of `--json`, before and after) may be stamped with `--stamp`."""
    from retrieval.rank.calibration import fitted_fingerprint, signal_fingerprint

    assert fitted_fingerprint() == signal_fingerprint()


def test_the_fingerprint_moves_with_the_code_not_with_its_comments(tmp_path):
    import shutil

    from retrieval.rank.calibration import PACKAGE, SIGNAL_CODE, signal_fingerprint

    for rel in SIGNAL_CODE:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(PACKAGE / rel, tmp_path / rel)
    base = signal_fingerprint(tmp_path)
    reading = tmp_path / "analysis" / "reading.py"
    text = reading.read_text()
    reading.write_text(
        text.replace('"""Reading a question', '"""Reading, said otherwise, a question', 1)
        + "\n# a comment\n"
    )
    assert signal_fingerprint(tmp_path) == base
    reading.write_text(text.replace("WHOSE_CHARS = 1000", "WHOSE_CHARS = 999"))
    assert signal_fingerprint(tmp_path) != base
