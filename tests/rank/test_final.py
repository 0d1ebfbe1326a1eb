"""The final stage (retrieval.rank.final): confidence, order, score and label in one place."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval.models import Candidate, Relevance, ScoredResult, Source, WindowPlace
from retrieval.rank.calibration import Calibration, Map
from retrieval.rank.final import WEAK_SCORE, finish, label, never_rises, promote

NOW = datetime(2026, 11, 22, 3, 0, tzinfo=UTC)
CAL = Calibration(
    read=Map({"verifier": 1.0}, 0.0),
    unread=Map({"score": 4.0}, -2.0),
    tail=Map({"score": 1.0}, 0.0),
    high=0.7,
    answers=0.5,
    whoever={k: Map({"score": 0.0}, -9.0) for k in ("read", "unread", "tail")},
)


def _result(i: int, score: float, confidence: float | None = None) -> ScoredResult:
    c = Candidate(
        id=i, external_id=f"m{i}", content=f"user: memory {i}", title=None, memory_type="dialog",
        source_type="conversation", metadata={}, created_at=NOW, embedding=None, score=score,
        source=Source.VECTOR,
    )  # fmt: skip
    return ScoredResult(c, score, {}, ["vector"], confidence=confidence, reason=f"found #{i}")


def _sigmoid(z: float) -> float:
    return 1 / (1 + math.exp(-z))


def test_each_result_is_mapped_and_labelled_by_its_confidence():
    results = [_result(1, 0.9), _result(2, 0.3)]
    sigs = [
        {"verifier": 3.0, "score": 0.9, "who": 1.0},
        {"score": 0.3, "coverage": 1.0, "who": 1.0},
    ]
    out = finish(results, sigs, CAL, high_score=0.5)
    assert out.results[0].confidence == pytest.approx(_sigmoid(3.0), rel=1e-6)
    assert out.results[0].relevance is Relevance.HIGH
    assert out.results[1].confidence == pytest.approx(_sigmoid(-0.8), rel=1e-6)
    assert out.results[1].relevance is Relevance.LOW  # below `answers`, whatever its score
    assert out.answered is not None and out.answered.answered and out.answered.threshold == 0.5
    assert out.results[0].signals["confidence_verifier"] == 3.0
    alone = finish(results[1:], sigs[1:], CAL, high_score=0.5)
    assert alone.answered is not None and not alone.answered.answered
    nobody_s = finish(results[:1], [{"verifier": 3.0, "score": 0.9}], CAL, high_score=0.5)
    assert nobody_s.results[0].confidence == pytest.approx(_sigmoid(-9.0), rel=1e-6)


def test_labels_on_one_scale():
    assert label(0.9, 0.75, CAL, 0.5) is Relevance.HIGH
    assert label(0.9, 0.6, CAL, 0.5) is Relevance.MEDIUM
    assert label(0.9, 0.4, CAL, 0.5) is Relevance.LOW
    assert label(WEAK_SCORE / 2, 0.99, CAL, 0.5) is Relevance.LOW  # little found it
    # Without a calibration, by the score.
    assert label(0.6, None, None, 0.5) is Relevance.HIGH
    assert label(0.3, None, None, 0.5) is Relevance.MEDIUM
    assert label(0.01, None, None, 0.5) is Relevance.LOW
    out = finish([_result(1, 0.6), _result(2, 0.01)], None, None, high_score=0.5)
    assert out.answered is None
    assert [r.relevance for r in out.results] == [Relevance.HIGH, Relevance.LOW]


def test_nothing_answers_an_empty_list():
    out = finish([], [], CAL, high_score=0.5)
    assert out.results == [] and out.answered is not None and not out.answered.answered


def test_a_clearly_surer_result_close_by_score_is_put_first():
    results = [
        _result(1, 0.9, 0.40),
        _result(2, 0.85, 0.55),
        _result(3, 0.8, 0.90),
        _result(4, 0.7, 0.99),
    ]
    out = promote(results)
    assert [r.candidate.id for r in out] == [3, 1, 2, 4]  # the fourth is beyond PROMOTE_AMONG
    assert "put first by its confidence (0.90 against 0.40 for m1)" in out[0].reason
    assert out[0].signals["confidence_promoted"] == 1.0
    tied = never_rises(out)
    assert [r.score for r in tied] == [0.9, 0.9, 0.85, 0.7]  # it ties the score it passed


def test_one_outside_the_window_is_not_put_above_one_inside():
    # "Where did I lose my keys on May 18?": the memory told of that day stays first, however
    # sure the reader is of an older one outside the window; among those inside, the surest
    inside = [replace(_result(1, 0.9, 0.40), window=WindowPlace.INSIDE),
              replace(_result(2, 0.85, 0.95), window=WindowPlace.OUTSIDE),
              replace(_result(3, 0.8, 0.70), window=WindowPlace.INSIDE)]  # fmt: skip
    assert [r.candidate.id for r in promote(inside)] == [3, 1, 2]


@pytest.mark.parametrize(
    "results",
    [
        [_result(1, 0.9, 0.40), _result(2, 0.85, 0.45)],  # not clearly surer
        [_result(1, 0.9, 0.40), _result(2, 0.6, 0.95)],  # too far below by score
        [_result(1, 0.9, 0.80), _result(2, 0.85, 0.60)],  # the first is the surest
        [_result(1, 0.9, 0.40)],
        [],
    ],
)
def test_otherwise_the_order_stays(results):
    assert promote(results) == results


def test_a_diversified_list_keeps_its_scores():
    results = [_result(1, 0.5), _result(2, 0.9)]
    assert [
        r.score for r in finish(results, None, None, high_score=0.5, ordered=False).results
    ] == [0.5, 0.9]
    assert [r.score for r in finish(results, None, None, high_score=0.5).results] == [0.9, 0.9]


_sig = st.fixed_dictionaries(
    {
        "score": st.floats(0, 1),
        "coverage": st.floats(0, 1),
        "who": st.sampled_from([-1.0, 0.0, 1.0]),
    },
    optional={"verifier": st.floats(-8, 8)},
)


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(st.tuples(st.floats(0, 1), _sig), max_size=6),
    high=st.floats(0.05, 0.99),
    gap=st.floats(0, 0.5),
)
def test_answered_and_the_first_label_never_disagree(rows, high, gap):
    """Whatever the scores, signals and thresholds: `answered` is exactly "the first result is
    high or medium", the score never rises down the list, and every label is on one scale."""
    cal = replace(
        CAL,
        high=high,
        answers=max(high - gap, 0.01),
        unread=Map({"score": 3.0, "coverage": 2.0, "who": 1.0}, -2.5),
    )
    results = sorted((_result(i, s) for i, (s, _) in enumerate(rows)), key=lambda r: -r.score)
    sigs = [rows[r.candidate.id][1] for r in results]
    out = finish(results, sigs, cal, high_score=0.5)
    assert out.answered is not None
    if out.results:
        first = out.results[0]
        assert out.answered.answered == (first.relevance in (Relevance.HIGH, Relevance.MEDIUM))
        assert out.answered.confidence == first.confidence
    else:
        assert not out.answered.answered
    assert all(a.score >= b.score for a, b in zip(out.results, out.results[1:], strict=False))
    for r in out.results:
        assert r.relevance in (Relevance.HIGH, Relevance.MEDIUM, Relevance.LOW)
        assert r.relevance is label(r.score, r.confidence, cal, 0.5)
