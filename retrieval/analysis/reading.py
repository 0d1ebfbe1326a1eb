"""Reading a question against a memory, for the confidence (retrieval.rank.confidence): what
kind of answer the question asks for and whether the memory states one (`asked`, `states`), and
whose turn the memory is against whom the question asks about (`who`, `whose`).

- `who`: +1 when the memory is said by the person (or side: the user, the assistant) the
  question asks about, -1 when said by another and naming none of them ("What did Caroline
  realize after her charity race?" against Melanie's turn), 0 when neither can be told;
  ABOUT_OTHER when said by the person named but of "you" (only of "you": "Maria: Congrats on
  the promotion! How do you feel?" for what Maria was promoted to; or the words asked about
  after a "you": "Joanna: Wow, your new hair color looks amazing!", `whose`), -1 too when it
  names them but holds those words after an "I" ("Nate: Joanna, I took my turtles to the
  beach"); None where it does not apply (a question about no one, a memory that says
  nobody's);
- `asked` / `states`: a date, an amount (retrieval.analysis.answers), a frequency or a number
  asked, and whether a text states one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from retrieval.analysis.answers import AnswerKind, gives, topic_words
from retrieval.analysis.speaker import EN_I, EN_WE, EN_YOU, USER, labelled, turn_speaker
from retrieval.models import QueryIntent
from retrieval.text.name_keys import latin_keys
from retrieval.text.nlp import english_norm

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
# English first and second persons (retrieval.analysis.speaker), read by the whole-turn check
# below and by `whose`.
_ME = f"{EN_I}|{EN_WE}"
_YOU = EN_YOU
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
    said = labelled(content)  # a user's or assistant's label: turn_speaker's above
    if said is None:
        return None
    label, body = said
    keys = set(latin_keys(label)) if label.isascii() else set()
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
