"""The twin questions the confidence is measured on (scripts/verifier/twins.py): a twin differs
from its original by the one word swapped, in whatever form the question holds it."""

from __future__ import annotations

import json

import pytest

from tests.helpers import script_module


def _twins():
    return script_module("twins")


@pytest.mark.parametrize(
    ("question", "swap", "expected"),
    [
        ("What is my cat's name?", ("cat", "hamster"), "What is my hamster's name?"),
        # Before: "turtles" stayed, and the twin was its original labelled unanswerable.
        (
            "How many turtles does Nate have?",
            ("turtle", "guinea pig"),
            "How many guinea pigs does Nate have?",
        ),
        ("Turtles or dogs?", ("turtle", "hamster"), "Hamsters or dogs?"),
        ("Which films does she like?", ("film", "postcard"), "Which postcards does she like?"),
        ("Cakes for birthdays?", ("birthday", "anniversary"), "Cakes for anniversaries?"),
        ("Did he feed his turtles?", ("turtle", "goldfish"), "Did he feed his goldfish?"),
        ("ジムでのトレーニングはいつ？", ("ジム", "プール"), "プールでのトレーニングはいつ？"),
    ],
)
def test_the_word_is_swapped_in_its_form(question, swap, expected):
    assert _twins()._reworded(question, swap, 0) == expected


def test_every_twin_differs_from_its_original_by_its_word(tmp_path):
    t = _twins()
    (tmp_path / "memories.jsonl").write_text(
        "\n".join(json.dumps(m) for m in [
            {"namespace": "n", "id": "m1", "content": "Nate: My turtles love the beach."},
            {"namespace": "n", "id": "m2", "content": "Nate: I play the guitar on Sundays."},
        ]) + "\n"
    )  # fmt: skip
    (tmp_path / "queries.jsonl").write_text(
        "\n".join(json.dumps(q) for q in [
            {"qid": "q1", "query": "Where do Nate's turtles like to go?", "namespace": "n",
             "relevant": ["m1"]},
            {"qid": "q2", "query": "When does Nate play the guitar?", "namespace": "n",
             "relevant": ["m2"]},
        ]) + "\n"
    )  # fmt: skip
    made = t.twins([tmp_path])
    pairs: dict[str, dict[str, dict]] = {}
    for r in made:
        pairs.setdefault(r["pair"], {})[r["qid"].rsplit("-", 1)[1]] = r
    assert len(pairs) == 2
    for p in pairs.values():
        orig, twin = p["orig"], p["twin"]
        assert orig["answerable"] and not twin["answerable"]
        assert orig["query"] != twin["query"]
        old, new = twin["swap"]
        assert old.lower() in orig["query"].lower() and new.lower() not in orig["query"].lower()
