"""How sure the answer is: each result's `confidence` that it answers the question, and whether
anything does.

A result's signals, read against the question (`Signals`):
- `verifier`: the logit of the verifier (retrieval.rank.verifier), which reads the question
  against the memory: the first result (VERIFIED);
- `coverage`: the share of the question's words the memory holds, each weighted by its IDF in
  the namespace (the keyword leg's term statistics): a word no memory of the namespace holds
  ("hamster" where only a cat was mentioned) weighs the most;
- `unmatched`: the largest IDF among the question's words the memory lacks, as a share of the
  largest there can be: 1.0 when the question turns on a word no memory holds;
- `unseen`: 1 when the memory lacks a word of the question that no memory of the namespace
  holds ("table" of "table tennis" where only tennis was mentioned), else 0;
- `asks`: 1 when the memory asks what the question asks (a sentence of it that asks holds one
  of the question's words: "assistant: When do you play tennis?" for "When do I play tennis?"),
  which its reply answers, not it;
- `who`: +1 when the memory is said by the person (or side: the user, the assistant) the
  question asks about, -1 when said by another and naming none of them ("What did Caroline
  realize after her charity race?" against Melanie's turn), 0 when neither can be told;
  ABOUT_OTHER when said by the person named but of "you" (only of "you": "Maria: Congrats on
  the promotion! How do you feel?" for what Maria was promoted to; or the words asked about
  after a "you": "Joanna: Wow, your new hair color looks amazing!", `whose`), -1 too when it
  names them but holds those words after an "I" ("Nate: Joanna, I took my turtles to the
  beach"); absent where it does not apply (a question about no one, a memory that says
  nobody's);
- `kind`: -1 when the question asks for a kind of answer (a date, an amount, a frequency, a
  number) that the memory does not state, +1 when it does, 0 when it asks for none;
- `score`: the result's score.

The map from the signals to `confidence` is a logistic regression fitted on the dev sets' train
split (scripts/verifier/fit.py writes `retrieval/data/verifier/confidence.json`: its
coefficients, the figures on the held-out split, and the thresholds). A result the verifier did
not read is mapped without it (`unread`), one below the first COVERED without the words it holds
either (`tail`), and one whose speaker does not apply by the same fitted without `who`
(`*_whoever`). `relevance: high` means a confidence of at least `high` (the file's;
docs/api.md), and the answer's `answered` says whether the first result's confidence reaches
`answers`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from retrieval.analysis.answers import AnswerKind, asks_any, gives, topic_words
from retrieval.analysis.speaker import SPEAKER_LABEL, USER, turn_speaker
from retrieval.models import Answered, QueryIntent, Relevance, ScoredResult, unit
from retrieval.rank.verifier import MODEL_DIR, Verifier, memory_window
from retrieval.text.name_keys import latin_keys
from retrieval.text.nlp import english_norm

# The verifier reads the first result and, up to VERIFIED in all, each next one whose score is
# at least CLOSE times the first's (a near tie), one pair a run: a LoCoMo pair costs ~3.6 ms here
# on one thread, a batch of two 9.4 and of three 14.9 (padded). Reading the near tie too cost
# the 10k bench ~1.8 ms more a request (paired, docs/confidence.md): the first only, for now.
VERIFIED = 1
CLOSE = 0.95
# The words held (coverage, unmatched) are read of the first COVERED results (Sudachi on each,
# ~0.2 ms); the results below them are mapped from who said them, the kind and the score.
COVERED = 3

# Where the confidence reorders (promote): the surest of the first PROMOTE_AMONG passes the first
# when its confidence is PROMOTE_MARGIN higher and its score at least PROMOTE_CLOSE of the first's.
# On the answerable LoCoMo questions (MRR@10, the maps' conversations conv-26/30/41 and the
# held-out conv-42): 0.629 -> 0.649, 0.555 -> 0.573, 0.577 -> 0.594 (docs/confidence.md).
PROMOTE_AMONG = 3
PROMOTE_CLOSE = 0.8
PROMOTE_MARGIN = 0.1
# The suffix of a map fitted without `who` in confidence.json ("unread_whoever").
WHOEVER = "_whoever"
SIGNALS = ("verifier", "coverage", "unmatched", "unseen", "asks", "who", "kind", "score")

# Frequency and count questions, and what states one (beside answers.py's dates and amounts).
_ASKS_FREQUENCY = re.compile(
    r"how often|how frequently|頻度|何回|どのくらいの(?:ペース|間隔)", re.I
)
_ASKS_NUMBER = re.compile(r"how many|何人|何個|何匹|何台|何冊|何本|いくつ", re.I)
_GIVES_FREQUENCY = re.compile(
    r"every (?:day|week|month|morning|night|other|weekend|\w+day)|daily|weekly|monthly|"
    r"once|twice|times? (?:a|per|each) |\b(?:usually|regularly|always|often)\b|"
    r"\b(?:mon|tues|wednes|thurs|fri|satur|sun)days?\s+(?:mornings|afternoons|evenings|nights)\b|"
    r"\bon\s+(?:mon|tues|wednes|thurs|fri|satur|sun)days\b|\bweekends\b|"
    r"毎日|毎週|毎月|毎朝|毎晩|週に|月に|日に|回|いつも",
    re.I,
)
_GIVES_NUMBER = re.compile(
    r"\d|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|dozen|several|a few)\b|"
    r"[一二三四五六七八九十百千万]",
    re.I,
)


# A turn by the person asked about that speaks only of "you" is about whom they speak to.
ABOUT_OTHER = 0.5
# English first and second persons, read by the whole-turn check below and by `whose`.
_ME = r"i|i'm|i've|i'd|i'll|me|my|mine|myself|we|we're|we've|we'd|our|ours|us"
_YOU = r"you|your|yours|you're|you've|yourself"
_FIRST_PERSON = re.compile(rf"\b(?:{_ME})\b|私|僕|俺|わたし|あたし|うち(?:の|は|も|で)", re.I)
_SECOND_PERSON = re.compile(rf"\b(?:{_YOU})\b|あなた|君の|きみ", re.I)


def asked(intent: QueryIntent) -> str | None:
    """The kind of answer the question asks for: a date or an amount (retrieval.analysis.
    answers), a frequency, a number; None otherwise."""
    if intent.asks:
        return intent.asks
    if _ASKS_FREQUENCY.search(intent.query):
        return "frequency"
    if _ASKS_NUMBER.search(intent.query):
        return "number"
    return None


def states(kind: str, text: str) -> bool:
    """Whether the text states an answer of that kind."""
    if kind == "frequency":
        return _GIVES_FREQUENCY.search(text) is not None
    if kind == "number":
        return _GIVES_NUMBER.search(text) is not None
    return gives(AnswerKind(kind), text)


def who(intent: QueryIntent, content: str, metadata: Mapping[str, object] | None) -> float | None:
    """+1 said by whom the question asks about, -1 by someone else, 0 when it cannot be told
    (see the module); None when it does not apply: the question asks about no one, or the
    memory says nobody's."""
    side = turn_speaker(content, metadata)
    if side is not None:
        # A Japanese question drops its subject: naming no one, it asks about the asker
        # (「テニスはいつしている？」 is the user's tennis, not the assistant's).
        implied = USER if intent.language == "ja" and not intent.names else None
        asked_side = intent.speaker or implied
        return None if asked_side is None else (1.0 if side == asked_side else -1.0)
    if not intent.names:
        return None
    m = SPEAKER_LABEL.match(content)  # a user's or assistant's label: turn_speaker's above
    if m is None:
        return None
    label = m.group(1).strip()
    keys = set(latin_keys(label)) if label.isascii() else set()
    body = content[m.end() :]
    # Whose the words asked about are in the turn (`whose`): "your new hair color" is the one
    # spoken to's. Read only where it decides.
    topic = topic_words(intent.keywords, [n.text for n in intent.names])
    for name in intent.names:
        if name.text.lower() == label.lower() or keys & set(name.keys):
            # Said by them, but of the one spoken to ("Maria: Congrats on the promotion! How
            # do you feel?", "Joanna: Wow, your new hair color looks amazing!"): not as surely
            # theirs.
            only_you = _SECOND_PERSON.search(body) and not _FIRST_PERSON.search(body)
            if only_you or whose(body, topic) == "you":
                return ABOUT_OTHER
            return 1.0
    if any(n.text.lower() in body.lower() for n in intent.names):
        # Named, but the words asked about are the speaker's own ("Joanna: Nate, I took my
        # turtles to the beach"): someone else's.
        return -1.0 if whose(body, topic) == "me" else 0.0
    return -1.0


# `whose` also reads "you'd", "you'll" and "yourselves"; the whole-turn check never did, and the
# maps were fitted on both as they are.
_PERSON = re.compile(rf"\b(?:(?P<me>{_ME})|(?P<you>{_YOU}|you'd|you'll|yourselves))\b", re.I)
WHOSE_CHARS = 1000
_SENTENCE = re.compile(r"[^.!?。！？\n]+[.!?。！？\n]*")
_LATIN_WORD = re.compile(r"[A-Za-z][A-Za-z0-9'-]*")


def whose(body: str, words: Sequence[str]) -> str | None:
    """Whose the words are where an English turn holds them: "you" when every one the turn
    holds follows a second person nearest ("your new hair color", "you would be getting a third
    turtle") and "me" when one follows a first person ("I took my turtles"), within its
    sentence; None when none is held after a person."""
    wanted = {w for w in words if w.isascii()}
    if not wanted:
        return None
    # A word is stemmed only when it opens as a wanted stem does (a stem keeps its word's first
    # letters); a turn is read to WHOSE_CHARS (0.25 ms at most; a chat turn is far shorter).
    openings = {w[:3] for w in wanted}
    mine = yours = 0
    for s in _SENTENCE.finditer(body[:WHOSE_CHARS]):
        sentence = s.group(0)
        marks = [(p.start(), p.lastgroup) for p in _PERSON.finditer(sentence)]
        if not marks:
            continue
        for w in _LATIN_WORD.finditer(sentence):
            word = w.group(0)
            if word[:3].lower() not in openings or english_norm(word) not in wanted:
                continue
            before = [g for at, g in marks if at < w.start()]
            if before:
                mine += before[-1] == "me"
                yours += before[-1] == "you"
    return "me" if mine else "you" if yours else None


def coverage(
    keywords: Sequence[str], memory_terms: set[str], idf: Mapping[str, float], unseen: float
) -> tuple[float, float]:
    """The IDF-weighted share of the question's words the memory holds, a word the namespace
    never holds weighing `unseen` (the largest IDF it could have); and the largest IDF among
    those it lacks, as a share of `unseen` (1.0: a word no memory holds, as "hamster" where
    only a cat was mentioned). (1.0, 0.0) without keywords."""
    words = list(dict.fromkeys(k.lower() for k in keywords))
    if not words:
        return 1.0, 0.0
    weights = [idf.get(k, unseen) for k in words]
    total = sum(weights)
    held = sum(w for k, w in zip(words, weights, strict=True) if k in memory_terms)
    lacked = [w for k, w in zip(words, weights, strict=True) if k not in memory_terms]
    return held / total, min(max(lacked, default=0.0) / unseen, 1.0)


@dataclass(frozen=True)
class Map:
    """A logistic map from signals to a probability."""

    weights: Mapping[str, float]
    intercept: float

    def __call__(self, signals: Mapping[str, float]) -> float:
        z = self.intercept + sum(w * signals.get(k, 0.0) for k, w in self.weights.items())
        return 1.0 / (1.0 + math.exp(-max(min(z, 40.0), -40.0)))


@dataclass(frozen=True)
class Calibration:
    """The fitted maps and thresholds (`confidence.json`)."""

    read: Map  # with the verifier's logit
    unread: Map  # without it
    tail: Map  # without it and the words held (below the first COVERED)
    high: float  # `relevance: high` from this confidence up
    answers: float  # the answer says `answered` from this confidence of its first result up
    # The same three fitted without `who`, for a result whose speaker does not apply (a
    # question about no one, a memory that says nobody's): `who` 0 means "cannot be told" where
    # the maps were fitted, and would mark down every memory of a store without speakers.
    whoever: Mapping[str, Map]

    @classmethod
    def load(cls, path: Path = MODEL_DIR / "confidence.json") -> Calibration:
        raw = json.loads(path.read_text())

        def m(name: str) -> Map:
            return Map(raw[name]["weights"], raw[name]["intercept"])

        return cls(
            read=m("read"),
            unread=m("unread"),
            tail=m("tail"),
            high=float(raw["thresholds"]["high"]),
            answers=float(raw["thresholds"]["answers"]),
            # A file fitted before these maps (fit.py writes them): the maps with `who`.
            whoever={
                k: m(k + WHOEVER if k + WHOEVER in raw else k) for k in ("read", "unread", "tail")
            },
        )

    def map_for(self, signals: Mapping[str, float]) -> Map:
        """The map for a result's signals: with the verifier's logit, with the words held, or
        neither; without `who` where it does not apply."""
        name = "read" if "verifier" in signals else "unread" if "coverage" in signals else "tail"
        if "who" not in signals:
            return self.whoever[name]
        return {"read": self.read, "unread": self.unread, "tail": self.tail}[name]


def signals_of(
    intent: QueryIntent,
    results: Sequence[ScoredResult],
    terms: Callable[[str], list[str]],
    idf: Mapping[str, float],
    unseen: float,
    verifier: Verifier | None,
) -> list[dict[str, float]]:
    """Each result's signals (the verifier's only for those it reads)."""
    kind = asked(intent)
    # A written date is asked of the memory's time, not its words (QueryIntent.time_terms).
    asked_words = [k for k in intent.keywords if k not in intent.time_terms]
    # What a memory that asks back would ask about: the question's words but its people's names
    # (every turn of a chat may end on "What about you, John?").
    topic = topic_words(intent.keywords, [n.text for n in intent.names])
    out: list[dict[str, float]] = []
    texts = []
    for r in results:
        c = r.candidate
        text = c.content[r.highlight[0] : r.highlight[1]] if r.highlight else c.content
        label = SPEAKER_LABEL.match(c.content)
        if r.highlight and r.highlight[0] > 0 and label:
            text = label.group(0) + text
        window = memory_window(intent.query, text)
        texts.append(window)
        sig = {
            "score": unit(r.score),
            "kind": 0.0 if kind is None else (1.0 if states(kind, window) else -1.0),
        }
        said = who(intent, c.content, c.metadata)
        if said is not None:  # otherwise mapped by a map that does not read it (WHOEVER)
            sig["who"] = said
        if len(out) < COVERED:
            held = set(terms(window))
            if r.chain:
                # It replies to the question a seed asks: the words it turns on are the seed's
                # (「近くのカフェに決まったよ。」 for 「ヒスイの集まりはどこでやる？」).
                held |= set(terms(memory_window(intent.query, r.chain)))
            sig["coverage"], sig["unmatched"] = coverage(asked_words, held, idf, unseen)
            sig["unseen"] = 1.0 if sig["unmatched"] >= 1.0 else 0.0
            sig["asks"] = 1.0 if topic and asks_any(c.content, topic) else 0.0
        out.append(sig)
    if verifier is not None and results:
        first = results[0].score
        read = [0]
        for i in range(1, min(len(results), VERIFIED)):
            if results[i].score >= CLOSE * first:
                read.append(i)
        for i in read:  # each alone: a padded batch costs more than its pairs one by one
            out[i]["verifier"] = float(verifier.read(intent.query, [texts[i]])[0])
    return out


def assess(
    results: Sequence[ScoredResult],
    sigs: Sequence[Mapping[str, float]],
    calibration: Calibration,
) -> tuple[list[ScoredResult], Answered]:
    """The results, each with its confidence (in its signals too) and its label (`high` from
    the calibration's threshold; a window's labels stay); and whether anything answers."""
    out = []
    for r, s in zip(results, sigs, strict=True):
        conf = calibration.map_for(s)(s)
        relevance = r.relevance
        if relevance in (Relevance.HIGH, Relevance.MEDIUM):
            relevance = Relevance.HIGH if conf >= calibration.high else Relevance.MEDIUM
        signals = {**r.signals, **{f"confidence_{k}": v for k, v in s.items()}}
        out.append(replace(r, confidence=conf, relevance=relevance, signals=signals))
    if not out:
        return out, Answered(False, 0.0, calibration.answers)
    out = promote(out)
    first = out[0].confidence or 0.0
    return out, Answered(first >= calibration.answers, first, calibration.answers)


def promote(results: list[ScoredResult]) -> list[ScoredResult]:
    """The results, the surest of the first PROMOTE_AMONG put first when it is clearly surer
    than the first (PROMOTE_MARGIN) and not far below it by score (PROMOTE_CLOSE): "When do I
    play tennis?" puts the user's "I play tennis on Sundays" before the assistant asking "When
    do you play tennis?". It takes the first's score (a tie: the score never rises down the
    list) and its reason says so."""
    head = results[:PROMOTE_AMONG]
    if len(head) < 2:
        return results
    best = max(range(len(head)), key=lambda i: head[i].confidence or 0.0)
    first, surer = head[0], head[best]
    if (
        best == 0
        or surer.score < PROMOTE_CLOSE * first.score
        or (surer.confidence or 0.0) < (first.confidence or 0.0) + PROMOTE_MARGIN
    ):
        return results
    why = (
        f"put first by its confidence ({surer.confidence:.2f} against "
        f"{first.confidence or 0.0:.2f} for {first.candidate.external_id or first.candidate.id})"
    )
    lifted = replace(
        surer,
        score=first.score,
        reason=f"{surer.reason}; {why}" if surer.reason else why,
        signals={**surer.signals, "confidence_promoted": 1.0},
    )
    return [lifted, *results[:best], *results[best + 1 :]]
