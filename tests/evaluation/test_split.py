"""The harness's per-category figures are checked against the whole run's."""

from __future__ import annotations

import logging

import pytest

from retrieval.evaluation import harness
from retrieval.evaluation.harness import _split, _split_checked, score

QRELS = {"a": {"a1": 1}, "b": {"b1": 1}, "c": {"c1": 1}}
RUN = {"a": {"a1": 2.0, "x": 1.0}, "b": {"x": 2.0, "b1": 1.0}, "c": {"x": 1.0}}
LABEL = {"a": "one", "b": "one", "c": "two"}


def test_groups_that_add_up_are_returned_as_computed():
    whole = {"n_queries": 3, **score(QRELS, RUN)}
    groups = _split_checked(QRELS, RUN, LABEL, whole)
    assert groups == _split(QRELS, RUN, LABEL)
    assert groups["one"]["mrr@10"] == 0.75 and groups["two"]["mrr@10"] == 0.0


def test_groups_that_do_not_add_up_are_computed_again_and_said(monkeypatch, caplog):
    whole = {"n_queries": 3, **score(QRELS, RUN)}
    good = _split(QRELS, RUN, LABEL)
    wrong = {**good, "one": {**good["one"], "mrr@10": 0.0}}
    answers = iter([wrong, good])
    monkeypatch.setattr(harness, "_split", lambda *a: next(answers))
    with caplog.at_level(logging.WARNING, logger=harness.__name__):
        assert _split_checked(QRELS, RUN, LABEL, whole) == good
    assert "do not add up" in caplog.text

    monkeypatch.setattr(harness, "_split", lambda *a: wrong)
    with pytest.raises(RuntimeError, match="three tries"):
        _split_checked(QRELS, RUN, LABEL, whole)
