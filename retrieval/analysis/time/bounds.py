"""Windows open on one side, and from–to ranges: the words around a time expression that turn
its window into a bound.

    9月以降, 2月から, 今年になってから, 先週以来        from the window's first day on
    7月まで(に), 2023年以前                           up to the window's last day
    2024年より前                                      up to the day before it begins
    2024年より後                                      from the day after it ends
    since X, X so far, X onwards, from X on          from X's first day on
    after X, later than X                            from the day after X ends
    until X, till X, up to X                         up to X's last day
    before X, prior to X, earlier than X             up to the day before X begins
    6月から8月まで, 6月〜8月, from May to August,      from the first's first day to the
    between May and August                           second's last

The Japanese forms include X (以降, 以前, から, まで), English "after" and "before" exclude it.
An open edge is None: no far end is invented. Only words right next to an expression count
("駅から" is not a time; "the photos from March" stays March).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from retrieval.models import Granularity, TimeRange


class Bound(StrEnum):
    FROM = "from"  # X and after
    AFTER = "after"  # after X
    UNTIL = "until"  # X and before
    BEFORE = "before"  # before X


# Right after a Japanese expression (に入って / になって may come between: 今年になってから).
_JA_AFTER = re.compile(
    r"\s*(?:に(?:入|はい)って|になって)?(以降|以後|以来|から|より後|より前|以前|まで)"
)
_JA_KINDS = {
    "以降": Bound.FROM,
    "以後": Bound.FROM,
    "以来": Bound.FROM,
    "から": Bound.FROM,
    "より後": Bound.AFTER,
    "より前": Bound.BEFORE,
    "以前": Bound.UNTIL,
    "まで": Bound.UNTIL,
}
# Right before an English expression (its own "the" may or may not be part of it).
_EN_BEFORE = re.compile(
    r"\b(since|after|later than|before|prior to|earlier than|until|till|up to|up until|"
    r"so far(?: in)?|from|between)\s+(?:the\s+)?$",
    re.IGNORECASE,
)
_EN_KINDS = {
    "since": Bound.FROM,
    "so far": Bound.FROM,
    "so far in": Bound.FROM,
    "after": Bound.AFTER,
    "later than": Bound.AFTER,
    "before": Bound.BEFORE,
    "prior to": Bound.BEFORE,
    "earlier than": Bound.BEFORE,
    "until": Bound.UNTIL,
    "till": Bound.UNTIL,
    "up to": Bound.UNTIL,
    "up until": Bound.UNTIL,
}
# A unit of time right before the bound's word: "two weeks before X" counts from X.
_UNIT_BEFORE = re.compile(
    r"\b(?:days?|weeks?|weekends?|months?|years?|nights?|mornings?|evenings?|"
    r"hours?|Sunday|Monday|Tuesday|Wednesday|Thursday|Friday|Saturday)\s*$",
    re.IGNORECASE,
)
# Right after an English expression.
_EN_AFTER = re.compile(
    r"\s*,?\s*(so far|to date|onwards?|and (?:after|later|since)|or later|"
    r"and (?:before|earlier)|or earlier|on)\b",
    re.IGNORECASE,
)
# Between the two ends of a range ("from" / "between" before the first for the English words).
_JA_BETWEEN = re.compile(r"\s*(?:から|〜|～|~|－|—|–)\s*$")
_EN_BETWEEN = re.compile(r"\s*(?:to|until|till|through|and|-|–|—)\s*(?:the\s+)?$", re.IGNORECASE)
_JA_RANGE_END = re.compile(r"\s*(?:まで|にかけて|の間)")


@dataclass(frozen=True)
class Marked:
    """What the words around one expression make of it: a bound (or None), and the character
    span of those words (time words, not keywords)."""

    bound: Bound | None
    span: tuple[int, int] | None = None


def marked(text: str, start: int, end: int) -> Marked:
    """The bound the words next to text[start:end] give it."""
    m = _JA_AFTER.match(text, end)
    if m:
        return Marked(_JA_KINDS[m.group(1)], (end, m.end()))
    before = _EN_BEFORE.search(text[max(0, start - 24) : start])
    after = _EN_AFTER.match(text, end)
    tail = after.group(1).lower() if after else None
    if before is not None:
        lead = start - len(before.group(0))
        if _UNIT_BEFORE.search(text[:lead]):
            return Marked(None)  # "the week before August 3": a time counted from X, not a bound
        word = before.group(1).lower()
        if word == "from":  # "from X" alone is X ("the photos from March"); "from X on" is not
            if after is not None and tail in ("on", "onward", "onwards"):
                return Marked(Bound.FROM, (lead, after.end()))
            return Marked(None)
        if word in _EN_KINDS:
            return Marked(_EN_KINDS[word], (lead, start))
    if after is not None and tail and tail != "on":
        kind = Bound.UNTIL if ("before" in tail or "earlier" in tail) else Bound.FROM
        return Marked(kind, (end, after.end()))
    return Marked(None)


def joined(text: str, first: tuple[int, int], second: tuple[int, int]) -> tuple[int, int] | None:
    """The span of the words that make [first] and [second] one range (6月から8月まで, from May
    to August, between May and August), or None."""
    gap = text[first[1] : second[0]]
    if _JA_BETWEEN.fullmatch(gap) and (
        "から" in gap or not re.search(r"[A-Za-z]", text[first[0] : first[1]])
    ):
        end = _JA_RANGE_END.match(text, second[1])
        return first[1], end.end() if end else second[0]
    lead = _EN_BEFORE.search(text[max(0, first[0] - 24) : first[0]])
    opener = lead.group(1).lower() if lead else None
    if lead is not None and opener in ("from", "between") and _EN_BETWEEN.fullmatch(gap):
        if (opener == "between") != bool(re.fullmatch(r"\s*and\s*", gap, re.IGNORECASE)):
            return None
        return first[0] - len(lead.group(0)), second[0]
    if re.fullmatch(r"\s*(?:-|–|—|through)\s*", gap, re.IGNORECASE):
        return first[1], second[0]
    return None


def bounded(rng: TimeRange, bound: Bound | None, text: str) -> TimeRange:
    """The window `bound` makes of rng: open on one side (None), named by the words."""
    if bound is None:
        return rng
    span = Granularity.SPAN
    if bound is Bound.FROM:
        return TimeRange(rng.start, None, None, text, span)
    if bound is Bound.AFTER:
        return TimeRange(rng.end, None, None, text, span)
    if bound is Bound.UNTIL:
        return TimeRange(None, rng.end, None, text, span)
    return TimeRange(None, rng.start, None, text, span)


def spanning(first: TimeRange, last: TimeRange, text: str) -> TimeRange | None:
    """From the first window's start to the last's end (None if they run backwards)."""
    if first.start is None or last.end is None or last.end <= first.start:
        return None
    return TimeRange(first.start, last.end, None, text, Granularity.SPAN)


# A time counted from an expression: "the week before 9 June", "the weekend of 24 June", "the
# weekend after 3 June", "two weekends before 17 July", "two weeks before 11 August", "3 days
# after X"; 6月9日の前の週, 7月17日の前の週末, 8月11日の2週間前, Xの3日前, Xの翌週.
_EN_COUNTED = re.compile(
    r"\b(?:the\s+|a\s+)?(?:(?P<one>week|weekend)|(?P<n>\d+|one|two|three|four|five|six|seven)"
    r"\s+(?P<unit>days?|weeks?|weekends?))\s+(?P<dir>before|after|of)\s+(?:the\s+)?$",
    re.IGNORECASE,
)
_JA_COUNTED = re.compile(
    r"の(?:(?P<side>前|次|翌)の(?P<one>週末|週)|翌(?P<next>週末|週)|"
    r"(?P<n>[0-9０-９一二三四五六七]+)(?P<unit>日|週間)(?P<dir>前|後))"
)


@dataclass(frozen=True)
class Counted:
    """A time counted from an expression: `unit` week (the seven days before or after it, or
    the week it is in), weekend (the Saturday and Sunday before, after, or of it), weeks or days
    (that many before or after it); `n` how many; `side` before, after or of; the words' span."""

    unit: str
    n: int
    side: str
    span: tuple[int, int]


def counted_back(text: str, start: int, end: int) -> Counted | None:
    """The time the words next to text[start:end] count from it, if any."""
    from retrieval.analysis.time.atoms import en_number, kanji_to_int

    m = _JA_COUNTED.match(text, end)
    if m:
        if m["one"] or m["next"]:
            one = m["one"] or m["next"]
            side = "before" if m["side"] == "前" else "after"
            return Counted("weekend" if one == "週末" else "week", 1, side, (end, m.end()))
        unit = "days" if m["unit"] == "日" else "weeks"
        side = "before" if m["dir"] == "前" else "after"
        return Counted(unit, kanji_to_int(m["n"]), side, (end, m.end()))
    m = _EN_COUNTED.search(text[max(0, start - 40) : start])
    if m is None:
        return None
    lead, side = start - len(m.group(0)), m["dir"].lower()
    if m["one"]:
        return Counted(m["one"].lower(), 1, side, (lead, start))
    if side == "of":
        return None
    count = en_number(m["n"])
    unit = m["unit"].lower().rstrip("s") + "s"
    return Counted(unit, count, side, (lead, start))


# The nth week of a month: "the second week of November", 11月の第2週 (days 8-14; the last
# week: its last seven days).
_EN_NTH_WEEK = re.compile(
    r"\b(?:the\s+)?(first|second|third|fourth|last|1st|2nd|3rd|4th)\s+week\s+of\s+$",
    re.IGNORECASE,
)
_JA_NTH_WEEK = re.compile(r"の?第([1-4１-４一二三四])週")
_NTH = {"first": 1, "second": 2, "third": 3, "fourth": 4, "1st": 1, "2nd": 2, "3rd": 3,
        "4th": 4, "last": -1}  # fmt: skip


def nth_week(text: str, start: int, end: int) -> tuple[int, tuple[int, int]] | None:
    """Which week of the month next to text[start:end] the words name (-1: its last), and
    their span."""
    from retrieval.analysis.time.atoms import kanji_to_int

    m = _JA_NTH_WEEK.match(text, end)
    if m:
        return kanji_to_int(m.group(1)), (end, m.end())
    m = _EN_NTH_WEEK.search(text[max(0, start - 24) : start])
    if m is None:
        return None
    return _NTH[m.group(1).lower()], (start - len(m.group(0)), start)
