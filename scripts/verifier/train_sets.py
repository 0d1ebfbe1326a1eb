"""The reader's pairs from the training sets of ../shared/train (SQuAD 2.0, FriendsQA, LongMemEval-S).

Used by scripts/verifier/pairs.py (`--train ../shared/train`); each function adds (question,
memory, label) pairs to a Builder. Every set is split by whole units, a fixed share `dev` (the
reader's pair figures per kind of negative; never trained on): SQuAD by article, FriendsQA by
scene, LongMemEval by question. Kinds, and the noise each carries:

- SQuAD 2.0 (CC BY-SA 4.0): `evidence` (1) the answer's sentence; `plausible` (0) the sentence
  of a written unanswerable question's `plausible_answers` span (the careless reader's answer:
  on topic, the right words, and it does not answer); `paragraph` (0) the paragraph's other
  sentences, ranked by BM25 against the question, without the answer's text (a sentence that
  restates the answer is left out; one that answers in other words is a rare false negative).
- FriendsQA (Apache 2.0): `evidence` (1) the answer's utterance, `Speaker Name: words`;
  `scene` (0) the scene's other utterances by BM25, without the answer's text (dialogue often
  says a thing twice: a restatement in other words is noise); `who` (0) a question naming one of
  the scene's speakers asked of another against the first's utterance, when that utterance
  names neither (noisy: the other may have said the same).
- LongMemEval-S, questions no check uses (MIT): `evidence` (1) the turns marked `has_answer`,
  `role: content`; `session` (0) the answer session's other turns by BM25 (the conversation's
  own near-misses; an assistant's turn that repeats the user's fact is noise, so a turn holding
  the answer's words is left out); `near` (0) the other sessions' turns by BM25.
- All three: `swap` (0) the question with the rarest word its evidence holds replaced by a word
  of another set's vocabulary, against the same evidence (a swapped word that the evidence
  holds anyway is dropped).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Protocol

# The share of each set's units held out as `dev` (every n-th).
DEV_EVERY = 8
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
_NAME = re.compile(r"\b[A-Z][a-z]+\b")


class Ranks(Protocol):
    def top(self, query: str, k: int) -> list[dict]: ...


class Sink(Protocol):
    """What the builders write to (pairs.Builder)."""

    rng: object

    def add(self, split: str, kind: str, group: str, q: str, memory: str, label: int) -> None: ...

    def swap(self, split: str, group: str, q: str, evidence: str, rank: Ranks) -> None: ...

    def ranker(self, docs: list[dict]) -> Ranks: ...

    def holds_answer(self, answer: object, text: str) -> bool: ...


def _load(path: Path) -> object:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f) if path.name.endswith(".json.gz") else [json.loads(x) for x in f]


def sentences(text: str) -> list[tuple[int, str]]:
    """(start offset, sentence) of a paragraph."""
    out, at = [], 0
    for part in _SENTENCE.split(text):
        start = text.index(part, at)
        out.append((start, part))
        at = start + len(part)
    return out


def sentence_at(spans: list[tuple[int, str]], offset: int) -> int:
    """The index of the sentence holding character `offset`."""
    best = 0
    for i, (start, _) in enumerate(spans):
        if start <= offset:
            best = i
    return best


def split_for(i: int) -> str:
    return "dev" if i % DEV_EVERY == DEV_EVERY - 1 else "train"


def squad_answer(qa: dict, spans: list[tuple[int, str]]) -> tuple[int, set[str]] | None:
    """An answerable question's sentence (its index in `spans`) and the answer's texts; None
    when the answer runs over two sentences."""
    i = sentence_at(spans, qa["answers"][0]["answer_start"])
    texts = {x["text"] for x in qa["answers"] if x["text"]}
    return (i, texts) if all(t in spans[i][1] for t in texts) else None


def squad(b: Sink, path: Path) -> None:
    data = _load(path)["data"]  # type: ignore[index]
    for a, art in enumerate(data):
        split, group = split_for(a), f"squad-{a}"
        for para in art["paragraphs"]:
            spans = sentences(para["context"])
            docs = [{"id": str(i), "content": s} for i, (_, s) in enumerate(spans)]
            rank = b.ranker(docs)
            for qa in para["qas"]:
                q = qa["question"].strip()
                if qa.get("is_impossible"):
                    for p in qa.get("plausible_answers", [])[:1]:
                        i = sentence_at(spans, p["answer_start"])
                        b.add(split, "plausible", group, q, spans[i][1], 0)
                    continue
                got = squad_answer(qa, spans)
                if got is None:
                    continue
                i, texts = got
                b.add(split, "evidence", group, q, spans[i][1], 1)
                others = [
                    d for d in rank.top(q, 6)
                    if d["id"] != str(i) and not any(t in d["content"] for t in texts)
                ]  # fmt: skip
                for d in others[:2]:
                    b.add(split, "paragraph", group, q, d["content"], 0)
                b.swap(split, group, q, spans[i][1], rank)


def friends_texts(scene: dict) -> list[str]:
    """A scene's utterances as memories: `Speaker Name: words`."""
    return [
        f"{', '.join(t['speakers']) or 'Someone'}: {t['utterance'].strip()}"
        for t in scene["utterances:"]
    ]


def friends(b: Sink, paths: list[Path]) -> None:
    n = 0
    for path in paths:
        for ep in _load(path)["data"]:  # type: ignore[index]
            for scene in ep["paragraphs"]:
                split, group = split_for(n), f"friends-{n}"
                n += 1
                turns = scene["utterances:"]
                texts = friends_texts(scene)
                docs = [{"id": str(i), "content": t} for i, t in enumerate(texts)]
                rank = b.ranker(docs)
                speakers = sorted(
                    {
                        w
                        for t in turns
                        for s in t["speakers"]
                        if (w := s.split()[0]).isalpha() and len(w) > 2
                    }
                )
                for qa in scene["qas"]:
                    friends_question(b, split, group, qa, texts, rank, speakers)


def friends_answer(qa: dict, utterances: int) -> tuple[list[int], set[str]]:
    """A question's answer utterances (their indices) and the answer's own words (not a
    speaker's name; longer than two characters)."""
    answers = qa["answers"]
    ev = sorted({a["utterance_id"] for a in answers if 0 <= a["utterance_id"] < utterances})
    said = {a["answer_text"].strip(" .") for a in answers if not a["is_speaker"]}
    return ev, {s for s in said if len(s) > 2}


def friends_question(
    b: Sink, split: str, group: str, qa: dict, texts: list[str], rank: Ranks, speakers: list[str]
) -> None:
    q = qa["question"].strip()
    ev, said = friends_answer(qa, len(texts))
    if not ev:
        return
    for i in ev[:2]:
        b.add(split, "evidence", group, q, texts[i], 1)
    others = [
        d for d in rank.top(q, 10)
        if int(d["id"]) not in ev and not any(s in d["content"] for s in said)
        and len(d["content"]) > 25
    ]  # fmt: skip
    for d in others[:3]:
        b.add(split, "scene", group, q, d["content"], 0)
    first = texts[ev[0]]
    b.swap(split, group, q, first, rank)
    named = [w for w in _NAME.findall(q) if w in speakers]
    if len(named) == 1 and first.startswith(named[0]):
        other = [s for s in speakers if s != named[0] and s not in first]
        if other:
            new = b.rng.choice(other)  # type: ignore[attr-defined]
            b.add(split, "who", group, re.sub(rf"\b{named[0]}\b", new, q), first, 0)


def lme_text(turn: dict) -> str:
    """A LongMemEval turn as a memory: `role: content`."""
    return f"{turn['role']}: {turn['content']}"


def longmemeval(b: Sink, path: Path) -> None:
    rows = _load(path)
    for n, r in enumerate(rows):  # type: ignore[arg-type]
        split, group = split_for(n), f"lmetrain-{r['qid']}"
        q = r["question"]
        turns = [
            (s["answer_session"], t.get("has_answer", False), lme_text(t))
            for s in r["sessions"]
            for t in s["turns"]
        ]
        docs = [
            {"id": str(i), "content": text, "answer_session": a, "has": h}
            for i, (a, h, text) in enumerate(turns)
        ]
        rank = b.ranker(docs)
        ev = [d for d in docs if d["has"]]
        if not ev:
            continue
        for d in ev[:3]:
            b.add(split, "evidence", group, q, d["content"], 1)
        top = [
            d for d in rank.top(q, 30)
            if not d["has"] and not b.holds_answer(r.get("answer"), d["content"])
        ]  # fmt: skip
        for d in [d for d in top if d["answer_session"]][:3]:
            b.add(split, "session", group, q, d["content"], 0)
        for d in [d for d in top if not d["answer_session"]][:2]:
            b.add(split, "near", group, q, d["content"], 0)
        b.swap(split, group, q, ev[0]["content"], rank)


def build(b: Sink, root: Path) -> None:
    squad(b, root / "squad2_dev_half.json.gz")
    friends(b, [root / "friendsqa_dev.json.gz", root / "friendsqa_tst.json.gz"])
    longmemeval(b, root / "longmemeval_train.jsonl.gz")
