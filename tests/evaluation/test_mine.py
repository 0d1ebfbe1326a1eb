"""The service's near-misses on the training sets (scripts/verifier/mine.py): each unit in its own
namespace with the split train_sets gives it, the evidence and the answer's text never taken as a
near-miss."""

from __future__ import annotations

import gzip
import json

from tests.helpers import script_module


def _mine():
    return script_module("mine")


def _gz(path, obj, lines=False):
    with gzip.open(path, "wt", encoding="utf-8") as f:
        if lines:
            f.writelines(json.dumps(x) + "\n" for x in obj)
        else:
            json.dump(obj, f)
    return path


def test_squad_units_keep_their_split_and_skip_the_answer_sentence(tmp_path):
    context = "Paris is the capital of France. It lies on the Seine. Lyon is another city."
    qas = [
        {"question": "What is the capital of France?", "is_impossible": False,
         "answers": [{"text": "Paris", "answer_start": 0}]},
        {"question": "What is the capital of Peru?", "is_impossible": True,
         "plausible_answers": [{"text": "Paris", "answer_start": 0}]},
    ]  # fmt: skip
    data = {"data": [{"paragraphs": [{"context": context, "qas": qas}]} for _ in range(8)]}
    memories, questions = _mine().squad(_gz(tmp_path / "s.json.gz", data))
    assert len(memories) == 8 * 3
    assert {m["namespace"] for m in memories} == {f"squad-{a}" for a in range(8)}
    first = [q for q in questions if q["namespace"] == "squad-0"]
    assert [q["kind"] for q in first] == ["service", "service_none"]
    assert first[0]["skip"] == ["p0s0"] and first[0]["texts"] == ["Paris"]
    assert first[1]["skip"] == ["p0s0"]  # the plausible answer's sentence is its own kind
    # One article in eight is held out, as train_sets holds it out.
    assert {q["split"] for q in questions if q["namespace"] == "squad-7"} == {"dev"}
    assert {q["split"] for q in first} == {"train"}


def test_friends_and_longmemeval_units(tmp_path):
    scene = {
        "utterances:": [
            {"speakers": ["Ross Geller"], "utterance": "I bought a monkey."},
            {"speakers": ["Rachel Green"], "utterance": "Where did you get it?"},
        ],
        "qas": [{"question": "What did Ross buy?", "answers": [
            {"answer_text": "a monkey", "utterance_id": 0, "is_speaker": False}]}],
    }  # fmt: skip
    m = _mine()
    fr = _gz(tmp_path / "f.json.gz", {"data": [{"paragraphs": [scene]}]})
    memories, questions = m.friends([fr])
    assert memories[0]["content"] == "Ross Geller: I bought a monkey."
    assert questions == [{"namespace": "friends-0", "split": "train", "query": "What did Ross buy?",
                          "kind": "service", "skip": ["0"], "texts": ["a monkey"]}]  # fmt: skip
    lme = [{
        "qid": "q1", "question": "Which phone did I buy?", "answer": "Pixel 8",
        "question_date": "2023/05/30 (Tue) 10:18",
        "sessions": [{"id": "s1", "date": "2023/05/28 (Sun) 18:12", "answer_session": True,
                      "turns": [{"role": "user", "content": "I bought a Pixel 8.",
                                 "has_answer": True},
                                {"role": "assistant", "content": "Nice phone!"},
                                {"role": "user", "content": "Any cases for it?"}]}],
    }]  # fmt: skip
    memories, questions = m.longmemeval(_gz(tmp_path / "l.jsonl.gz", lme, lines=True))
    # The assistant's turns are left out unless they hold the evidence.
    assert [x["content"] for x in memories] == [
        "user: I bought a Pixel 8.",
        "user: Any cases for it?",
    ]
    assert memories[0]["created_at"] == "2023-05-28T18:12:00+00:00"
    assert questions[0]["skip"] == ["0:0"] and questions[0]["now"] == "2023-05-30T10:18:00+00:00"


def test_a_near_miss_is_neither_the_evidence_nor_holds_the_answer():
    m = _mine()
    q = {"skip": ["e1"], "texts": ["a monkey"]}
    assert not m.near_miss(q, "Ross: I bought a monkey.", "e9")
    assert not m.near_miss(q, "anything", "e1")
    assert m.near_miss(q, "Rachel: Where did you get it?", "e2")
    lme = {"skip": [], "texts": [], "answer": "Pixel 8"}
    assert not m.near_miss(lme, "user: my pixel broke", "x")
    assert m.near_miss(lme, "user: my phone broke", "x")
