"""What kind of answer a question asks for (a date, an amount of money), and whether a text gives
one: a chain seed -> memory answers the question when the memory gives that kind and the seed
does not (the deadline of the project the meeting named, however the deadline is worded)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from enum import StrEnum

from retrieval.text.nlp import Token, english_norm, normalize_text


class AnswerKind(StrEnum):
    DATE = "date"
    AMOUNT = "amount"


# Question words, by Sudachi normal form (いくら -> 幾ら) or English surface. A bare "when"
# (いつ) is not among them: every memory carries its own time, so "when did Caroline go to the
# support group" is answered by the memory of going, not by another that states a date; a
# stated date is asked for by naming it (締め切りはいつ, the deadline, 何日).
_ASKING_WORDS = {
    "幾ら": AnswerKind.AMOUNT,
    "いくら": AnswerKind.AMOUNT,
}
# Phrases that ask the same (何日, 何月, 何円, how much).
_ASKING_RE = (
    (re.compile(r"何(年|月|日|曜)|what date|what day", re.IGNORECASE), AnswerKind.DATE),
    (re.compile(r"何(円|万円|ドル)|how much|what price", re.IGNORECASE), AnswerKind.AMOUNT),
)

# Nouns that name a date or an amount when asked about (「締め切りを教えて」), matched on the
# focus's normal form or its ending (提出期限, 発売日, 参加費, 予算額): Sudachi folds 締切 and 〆切
# into 締め切り already.
_DATE_NOUNS = frozenset((
    "締め切り", "期限", "期日", "納期", "日程", "日付", "日取り", "日にち", "予定日", "デッドライン",
    "誕生日", "記念日", "deadline", "date", "due",
))  # fmt: skip
_DATE_ENDINGS = ("期限", "期日", "日程", "予定日", "開始日", "終了日", "発売日", "提出日", "納期")
_AMOUNT_NOUNS = frozenset((
    "予算", "費用", "価格", "値段", "金額", "料金", "代金", "経費", "コスト", "給料", "年収", "月収",
    "家賃", "売上", "売り上げ", "見積もり", "budget", "cost", "price", "fee", "salary",
))  # fmt: skip
_AMOUNT_ENDINGS = ("予算", "費用", "金額", "料金", "代金", "経費", "予算額", "費", "代", "額")


def asked_kind(text: str, toks: list[Token], focus: str | None) -> AnswerKind | None:
    """The kind of answer the question (`text`, its tokens and focus) asks for: by its question
    word (いくら, 何日, how much), else by the noun it asks about (締め切り, 予算); None otherwise."""
    for tok in toks:
        kind = _ASKING_WORDS.get(tok.norm) or _ASKING_WORDS.get(tok.surface.lower())
        if kind is not None:
            return kind
    for pattern, kind in _ASKING_RE:
        if pattern.search(text):
            return kind
    # An English question names what it asks anywhere ("the deadline for Aoba"): its last noun
    # is no focus, so its words are looked up as written.
    for tok in toks:
        word = tok.surface.lower()
        if word.isascii() and word in _DATE_NOUNS:
            return AnswerKind.DATE
        if word.isascii() and word in _AMOUNT_NOUNS:
            return AnswerKind.AMOUNT
    if focus is None:
        return None
    if focus in _DATE_NOUNS or focus.endswith(_DATE_ENDINGS):
        return AnswerKind.DATE
    if focus in _AMOUNT_NOUNS or (len(focus) > 1 and focus.endswith(_AMOUNT_ENDINGS)):
        return AnswerKind.AMOUNT
    return None


_KANJI_DIGITS = "〇一二三四五六七八九十"
# Each pattern opens with a lookahead on the characters its alternatives can start with: the
# same matches, but a position that cannot start one is passed over at once instead of being
# tried against every alternative (9x faster on text without a date: 4,000 characters 1.2 ->
# 0.09 ms).
_DATE_RE = re.compile(
    rf"(?=[\d{_KANJI_DIGITS}明大昭平令月火水木金土日JFMASOND])"
    rf"(?:(?:[0-9{_KANJI_DIGITS}]{{1,4}}年)?[0-9{_KANJI_DIGITS}]{{1,3}}月[0-9{_KANJI_DIGITS}]{{1,3}}日"
    rf"|[0-9{_KANJI_DIGITS}]{{3,4}}年|(?:明治|大正|昭和|平成|令和)[0-9元{_KANJI_DIGITS}]{{1,3}}年"
    r"|[0-9]{1,2}世紀"
    r"|\d{4}[-/]\d{1,2}[-/]\d{1,2}"
    r"|\d{1,2}/\d{1,2}(?!\d)"
    r"|(?<![0-9])\d{1,2}日(?![間])"
    r"|[月火水木金土日]曜"
    r"|(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.? \d{1,2}\b)",
)
_AMOUNT_RE = re.compile(
    rf"(?=[0-9$¥€£{_KANJI_DIGITS}百千万億])"
    r"(?:[0-9][0-9,.]*\s*(?:万|億|千)?\s*(?:円|ドル|ユーロ|元|ウォン)"
    r"|[$¥€£]\s*[0-9]"
    rf"|[{_KANJI_DIGITS}百千万億]+円"
    r"|[0-9][0-9,.]*\s*(?:dollars|yen|euros?)\b)",
    re.IGNORECASE,
)
_PATTERNS = {AnswerKind.DATE: _DATE_RE, AnswerKind.AMOUNT: _AMOUNT_RE}


def gives(kind: AnswerKind, text: str) -> bool:
    """Whether the text states an answer of this kind (a date, a sum of money)."""
    return _PATTERNS[kind].search(normalize_text(text[:SCAN_CHARS])) is not None


# A memory states its answer early; the hop sources return up to 200 memories of up to 100k
# characters each, and this runs on every one of them per request.
SCAN_CHARS = 4000


def mentions(kind: AnswerKind, text: str, most: int = 2) -> int:
    """How many answers of this kind the text's first SCAN_CHARS state, counted up to `most`."""
    found = 0
    for _ in _PATTERNS[kind].finditer(normalize_text(text[:SCAN_CHARS])):
        found += 1
        if found >= most:
            break
    return found


# A sentence that asks: a run of text between sentence ends that ends on ? or ？, or the text's
# last one when it ends on か / かな / の (a Japanese question without a mark). Each match starts
# where a run starts (the lookbehind): unanchored, the search tried every character of a run
# that asks nothing and read on to its end each time, ~1.7 ms a 1,700-character turn, 0.05
# anchored, with the same matches (tests/analysis/test_answers.py compares them).
_ASKING_SENTENCE_RE = re.compile(
    r"(?:^|(?<=[。！？!?.\n]))[^。！？!?.\n]*(?:[?？]|(?:か|かな|の)[。！!]?\s*$)"
)
_LATIN_WORD_RE = re.compile(r"[A-Za-z][A-Za-z0-9'-]*")


def asks_about(text: str, keywords: Sequence[str], names: Sequence[str] = ()) -> bool:
    """Whether a question the text asks is about what the query asks: one of its asking
    sentences holds one of the query's keywords that is not a name. A reply answers the question
    its memory replies to; it answers the query only when that question is the query's ("How
    often do you work out?" for "How often does John work out with his family?"), not when the
    turn before merely ends on "What about you, John?" — in a conversation most turns do. A
    query with nothing but names to compare keeps every asking turn."""
    wanted = topic_words(keywords, names)
    return asks_any(text, wanted) if wanted else True


def topic_words(keywords: Sequence[str], names: Sequence[str] = ()) -> list[str]:
    """The query's keywords that are not (part of) one of its names: what a question asks about."""
    name_words = {english_norm(w) for n in names for w in _LATIN_WORD_RE.findall(n)}
    return [k for k in keywords if k not in name_words and not any(k in n for n in names)]


def asks_any(text: str, words: Sequence[str]) -> bool:
    """Whether one of the sentences the text asks holds one of the words."""
    asked = [m.group(0) for m in _ASKING_SENTENCE_RE.finditer(normalize_text(text[:SCAN_CHARS]))]
    if not asked:
        return False
    for sentence in asked:
        stems = {english_norm(w) for w in _LATIN_WORD_RE.findall(sentence)}
        low = sentence.lower()
        for k in words:
            if k in stems if k.isascii() else k in low:
                return True
    return False
