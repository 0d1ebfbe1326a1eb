"""When what a memory tells happened: its own time words read against when it was written.

"On Saturday we adopted a kitten", written on Monday 16 February, happened on Saturday the 14th;
「昨日、健康診断で再検査になった」 written at 07:30 on 22 April (+09:00) on the 21st; "Flying to Oslo
on Friday" written on a Monday, on that week's Friday. The words are read by the question's time
grammar (retrieval.analysis.time.expressions), against the memory's `created_at` in its own UTC
offset, with the tense of the memory's words (retrieval.analysis.tense.told_in_the_past):

- a weekday told in the past is the last such day before the memory was written; one told in
  the present or future ("Flying … on Friday", 来週の月曜から) the next one after it;
- a date, month or season without a year told in the past is its latest occurrence begun by
  then; otherwise its next one not over (「5月9日に行く」 written in April is this May);
- relative days, weeks, months and years (yesterday, おととい, 3日前, last week, 先月, five years
  ago, 2019年に) count from the day written;
- a span: "from X to Y", X から Y まで, "tomorrow …, back on Friday" (a second expression
  told as a return or an end), 明日から三日間 (a start and a length). "X から" alone is X: the day
  something began (来週の月曜から夏休み is that Monday).

Whose dates are events: a memory of a personal kind (its memory_type or source_type says a
conversation, a chat, a diary: PERSONAL_KINDS) tells of its writer's life, and every kind above
is read in it. A memory of no such kind (a `semantic` note by default) is read only when it is
short (UNTYPED_MAX_CHARS: a note, a message) and its event counts from when it was written
(昨日, last week, on Saturday, 3年前, next month, on the 15th). A reference text's dates are
what it is about ("1961年4月12日、ガガーリンが…", "選挙の2日前" counting from the election), not
its events: on JSQuAD's Wikipedia paragraphs, read as events, they put the paragraphs naming a
question's year first (MRR@10 0.926 -> 0.909; read only where the paragraph also said 数日前
somewhere, or quoted a 私: 0.919).

Not events (no time read from them):
- habits: "every Saturday", "on Sundays", 毎週土曜日, 土曜日ごとに, 毎月15日;
- mentions that do not place what is told: a year naming a thing ("a 2019 Honda" is no atom of
  the grammar; 2019年式, 2019年型, 90年代), a season naming one (夏休み, 冬服, 秋祭り);
- "recently", "around now", 最近: they place nothing that the day written does not;
- words bounding an event on one side only ("before March", 3月より前): not when it happened.

Only the first expression is read (with the one it joins): a memory that tells of two times
tells mostly of the first. A memory longer than a passage (retrieval.text.passages) tells of
many and is given none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo

from retrieval.analysis.tense import told_in_the_past
from retrieval.analysis.time.atoms import Atom, en_number, kanji_to_int, scan
from retrieval.analysis.time.bounds import Bound
from retrieval.analysis.time.expressions import Expression, day_of_month, expressions
from retrieval.models import Granularity
from retrieval.text.passages import SPLIT_ABOVE

__all__ = [
    "EVENT_READER_VERSION",
    "PERSONAL_KINDS",
    "EventTime",
    "read_event",
    "told_by_its_kind",
]

# Stored with every event read from words (memories.event_read): a store read by an older
# version is read again by `retrieval read-events`. 0 is an event given by the caller.
EVENT_READER_VERSION = 1

# The longest text whose time words are read: a memory of one passage (a longer one tells of
# many times).
READ_MAX_CHARS = SPLIT_ABOVE

# A habit: "every"/"each" before the expression, 毎 right before it, ごと/毎 right after.
_EN_HABIT_BEFORE = re.compile(r"\b(?:every|each)\s+(?:other\s+)?$", re.IGNORECASE)
_JA_HABIT_BEFORE = re.compile(r"毎(?:週|月|年|日)?(?:の)?$")
_JA_HABIT_AFTER = re.compile(r"(?:日)?(?:ごと|毎|おき)")
# A year that names a thing (2019年式, 2019年型, 2019年製, 2019年モデル, 90年代).
_YEAR_NAMES_A_THING = re.compile(r"(?:式|型|製|モデル|代|物|産)")
# A season that names a thing (夏休み, 冬服, 秋祭り, 春物, 夏期講習 are things, not times).
_SEASON_NAMES_A_THING = re.compile(r"(?:休|服|祭|物|用|向け|バテ|期講習|季講習|限定)")
# A second expression told as a return or an end: "…, back on Friday", "until Friday",
# "returning Friday", 金曜に帰る / 金曜まで.
_EN_RETURN = re.compile(
    r"\b(?:back|return(?:ing)?|home|until|till|through|and then)\b[^.!?。]{0,12}$", re.IGNORECASE
)
_JA_RETURN_AFTER = re.compile(r"\s*(?:に|は)?\s*(?:帰|戻|まで)")
# A start and its length: 明日から三日間, "from Monday for three days".
_JA_LENGTH = re.compile(r"\s*(?:から)?\s*([0-9０-９一二三四五六七八九十]+)\s*日間")
_EN_LENGTH = re.compile(
    r"\s*,?\s*for\s+(\d+|two|three|four|five|six|seven|eight|nine|ten)\s+days\b", re.IGNORECASE
)
# Where the day N weeks back lies in the window the grammar gives "N weeks ago" ([d-3, d+4)).
_WEEK_AGO_CENTRE = timedelta(days=3)
# The longest text of no personal kind whose words may tell of its writer's life.
UNTYPED_MAX_CHARS = 400
# Words that make a bare four-digit number a year: in its own words ("in 2019") or before it.
_EN_YEAR_LEAD = re.compile(r"(?:in|In|IN)\s")
_EN_YEAR_BEFORE = re.compile(
    r"\b(?:since|during|until|till|from|by|through|year|back in|early|late|mid|summer|"
    r"winter|spring|autumn|fall|[A-Z][a-z]+)\s+$"
)
# The widest span read from a return or a length: a trip, a holiday.
_SPAN_MAX = timedelta(days=31)


@dataclass(frozen=True)
class EventTime:
    """When what a memory tells happened: [start, end) in the memory's offset (local midnights),
    and the words that said so."""

    start: datetime
    end: datetime
    words: str


def _kept(text: str, a: Atom) -> bool:
    """Whether an atom places an event (not a habit, not a thing named by a year or season)."""
    before, after = text[max(0, a.start - 16) : a.start], text[a.end : a.end + 6]
    if a.kind in ("recent", "nowish"):
        return False
    if a.kind in ("weekday", "weekend", "md", "day", "month", "week") and (
        _EN_HABIT_BEFORE.search(before)
        or _JA_HABIT_BEFORE.search(before)
        or _JA_HABIT_AFTER.match(after)
    ):
        return False
    if a.kind == "year" and (
        _YEAR_NAMES_A_THING.match(after) or not _placed_year(text[a.start : a.end], before)
    ):
        return False
    return not (a.kind == "season" and _SEASON_NAMES_A_THING.match(after))


def _day_of_month(text: str, created_at: datetime) -> EventTime | None:
    """A day of the month alone ("on the 15th", 15日に), by the memory's tense
    (expressions.day_of_month)."""
    got = day_of_month(text, created_at, past=told_in_the_past(text))
    if got is None or got.start is None or got.end is None:
        return None
    return EventTime(got.start, got.end, got.text or "")


# The kinds of memory that tell of their writer's life (a conversation's turns, a diary's
# entries, a chat's messages): memory_type or source_type, as writers name them.
PERSONAL_KINDS = frozenset(
    "episodic dialog dialogue conversation chat message diary journal event sms email".split()  # noqa: SIM905
)


def told_by_its_kind(memory_type: str | None, source_type: str | None) -> bool:
    """Whether a memory's kind says it tells of its writer's life (PERSONAL_KINDS)."""
    return bool({(memory_type or "").lower(), (source_type or "").lower()} & PERSONAL_KINDS)


def _relative(a: Atom) -> bool:
    """Whether an atom counts from when it is said (昨日, last week, on Saturday, 3年前, next
    month, 去年の夏), not a date that names itself (1868年, 5月9日, 春, in March)."""
    if a.kind in ("dayrel", "weekday", "weekend", "week", "ago", "few"):
        return True
    v = a.value
    if a.kind in ("month", "year", "fy") and isinstance(v, tuple):
        if v[0] in ("rel", "ago"):
            return True
        return a.kind == "month" and v[0] == "abs" and isinstance(v[1], tuple) and v[1][1] != "past"
    if a.kind in ("season", "holiday") and isinstance(v, tuple):
        return v[1] != "past"
    return False


def _counts_from_its_writing(first: Expression, atoms: list[Atom]) -> bool:
    """Whether a memory of no personal kind tells its event counting from when it was written:
    its first expression's head counts from now (昨日, last week, on Saturday, 3年前, next
    month). One whose first date names itself (1961年4月12日, 春, "in March 2019") is a
    reference text's, or may be: what it is about, not when its writer lived it ("1961年4月12日、
    ガガーリンが…" in a paragraph that also says 数日前 or quotes a 私)."""
    head = next((a for a in atoms if first.at[0] <= a.start < first.at[1]), None)
    return head is not None and _relative(head)


def _placed_year(words: str, before: str) -> bool:
    """Whether a year atom places an event: written with 年 (2019年に, 令和元年), as a year
    counted back (five years ago, 去年), or a bare number after a word that makes it a time
    (in 2019, since 2019, back in 2019); not "a limit of 2000 tokens"."""
    if not words.isascii() or not any(ch.isdigit() for ch in words):
        return True  # 2019年, 令和5年, 去年, "last year", "five years ago"
    if re.search(r"\b(?:years?|ago)\b", words, re.IGNORECASE):
        return True
    return bool(_EN_YEAR_LEAD.match(words) or _EN_YEAR_BEFORE.search(before))


def _length_days(text: str, end: int) -> int | None:
    """The length told right after a start (明日から三日間, "from Monday for three days")."""
    m = _JA_LENGTH.match(text, end) or _EN_LENGTH.match(text, end)
    if m is None:
        return None
    n = m.group(1)
    try:
        days = en_number(n) if n.isascii() else kanji_to_int(n)
    except (KeyError, ValueError):
        return None
    return days if 0 < days <= _SPAN_MAX.days else None


def _returns(text: str, first: Expression, second: Expression) -> bool:
    """Whether the second expression ends what the first began ("tomorrow …, back on Friday")."""
    return bool(
        _EN_RETURN.search(text[first.at[1] : second.at[0]])
        or _JA_RETURN_AFTER.match(text, second.at[1])
    )


def read_event(text: str, created_at: datetime, *, personal: bool = False) -> EventTime | None:
    """When what `text` tells happened, read against `created_at` (aware: its offset is the
    calendar read in), or None when its words place nothing (see the module's doc);
    `personal`: the memory is one of its writer's life by its kind (told: `told_by_its_kind`),
    whose dates that name themselves are its events even with no "I" in it."""
    if created_at.tzinfo is None:
        raise ValueError("created_at must carry its UTC offset")
    if len(text) > (READ_MAX_CHARS if personal else UNTYPED_MAX_CHARS):
        return None
    atoms = [a for a in scan(text) if _kept(text, a)]
    if not atoms:
        return _day_of_month(text, created_at)
    zone: tzinfo = created_at.tzinfo
    found = expressions(
        text, created_at, zone, past=told_in_the_past(text), ahead=True, atoms=atoms
    )
    found = [f for f in found if f.bound not in (Bound.AFTER, Bound.BEFORE)]
    if not found:
        return _day_of_month(text, created_at)
    first = found[0]
    if not personal and not _counts_from_its_writing(first, atoms):
        return None
    # 来週の月曜から, "until Friday": the day it began or ended (the words' own window)
    rng = first.own if first.bound is not None else first.range
    if rng is None or rng.start is None or rng.end is None:
        return None
    start, end = rng.start, rng.end
    if first.kinds == ("ago",) and rng.granularity is Granularity.WEEK and first.bound is None:
        # "two weeks ago", 2週間前: told of one thing, the day that many weeks back (the
        # question's window around it is a week wide: retrieval.analysis.time.windows)
        start = start + _WEEK_AGO_CENTRE
        end = start + timedelta(days=1)
    length = _length_days(text, first.at[1])
    if length is not None and not first.joined:
        end = start + timedelta(days=length)
    elif len(found) > 1 and not first.joined and _returns(text, first, found[1]):
        last = found[1].range.end
        if last is not None and start < last <= start + _SPAN_MAX:
            end = last
    words = text[first.at[0] : first.at[1]]
    return EventTime(start, end, words)
