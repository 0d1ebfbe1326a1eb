"""Time expressions in Japanese and English, resolved against `now` in a time zone.

Two steps. The scanner (`retrieval.analysis.time.atoms`) finds atoms — a year (2025年, 令和5年, 去年,
3年前), a fiscal year, a month (先月, 10月, October), a week, a weekday, a part of a month or
year (下旬, 月末, 年明け, early), a day (昨日, 3日前, 11/3), a season, a holiday, a fuzzy marker
(頃, about) — each anywhere in the text. The composer here joins atoms that stand next to each
other (only の, spaces or commas between) into one expression: 去年 + の + 海の日, 先月 + 下旬,
先週 + の + 金曜日, 3年前 + の + 春, early + October. Any combination of kinds that makes sense
composes, not only the sentences someone wrote a rule for.

Windows are half-open [start, end) in local time; weeks are ISO weeks (Monday first). A date
without a year is its most recent occurrence that has begun (today included); 来年の, 今度の,
next … look forward. A window that cannot be held (3000年前) is dropped, the words kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo

from retrieval.analysis.time.atoms import LIFE_STAGES, Atom, kanji_to_int, scan
from retrieval.analysis.time.bounds import (
    Bound,
    Counted,
    Marked,
    bounded,
    counted_back,
    joined,
    marked,
    nth_week,
    spanning,
)
from retrieval.analysis.time.windows import Ctx, Window, compose
from retrieval.models import TIME_MAX, TIME_MIN, Granularity, TimeRange, time_in_bounds

__all__ = [
    "LIFE_STAGES",
    "Expression",
    "TimeParse",
    "expressions",
    "day_of_month",
    "kanji_to_int",
    "parse_time",
    "strip_spans",
]

G = Granularity

# Fuzzy edge per granularity: 先週頃 reaches three days past the week on either side.
FUZZ = {
    G.DAY: 1,
    G.WEEK: 3,
    G.MONTH: 7,
    G.PART_OF_MONTH: 4,
    G.SEASON: 15,
    G.YEAR: 30,
    G.FISCAL_YEAR: 30,
    G.HOLIDAY: 2,
    G.SPAN: 3,
}

# Which atom kinds may follow which inside one expression.
_NEXT = {
    "year": {"month", "season", "holiday", "nowish", "part", "yearpart", "md"},
    "fy": {"part"},
    "month": {"day", "part"},
    "week": {"weekday", "part", "weekend"},
    "part_en": {"month", "year", "week", "fy"},
}


@dataclass
class TimeParse:
    range: TimeRange | None = None
    hints: list[str] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)


def _groups(atoms: list[Atom], text: str) -> list[list[Atom]]:
    """Atoms that stand together (only の, 、, spaces or 'of' between) form one expression."""
    out: list[list[Atom]] = []
    for a in atoms:
        if out:
            prev = out[-1][-1]
            gap = text[prev.end : a.start]
            joinable = a.kind in _NEXT.get(prev.kind, set()) or prev.kind == "fuzzy_pre"
            if (a.kind == "fuzzy" or joinable) and re.fullmatch(r"[\sの、,]*(?:of\s+)?", gap, re.I):
                out[-1].append(a)
                continue
        out.append([a])
    return out


def _to_range(c: Ctx, w: Window, text: str, fuzzy: bool) -> TimeRange | None:
    start, end = max(c.at(w.start), TIME_MIN), min(c.at(w.end), TIME_MAX)
    if start >= end:
        return None
    if not fuzzy:
        return TimeRange(start, end, w.relative, text, w.granularity)
    m = timedelta(days=FUZZ[w.granularity])
    return TimeRange(
        start,
        end,
        w.relative,
        text,
        w.granularity,
        max(start - m, TIME_MIN),
        min(end + m, TIME_MAX),
    )


_YEAR_HINT_RE = re.compile(r"(?<![0-9])(\d{4})年|\b(?:in )?(\d{4})\b")


@dataclass(frozen=True)
class _Found:
    """One expression of the question: its atoms, its words (with those that bound it) and its
    window; `bound` opens it on one side (9月以降), `to` the atoms of a range's end (6月から8月)."""

    core: list[Atom]
    fuzzy: bool
    text: str
    range: TimeRange
    bound: Bound | None = None
    to: list[Atom] | None = None
    # [start, end) of its words in the text, and of the words that bound or join it
    at: tuple[int, int] = (0, 0)


def _resolve(
    c: Ctx, core: list[Atom], text: str, fuzzy: bool
) -> tuple[Window | None, TimeRange | None]:
    """The atoms' window and its range (None, None for a date not to hold)."""
    try:
        w = compose(c, core)
        return w, _to_range(c, w, text, fuzzy) if w is not None else None
    except (ValueError, OverflowError):  # 2025年2月30日, 3000年前: a date, but not one to hold
        return None, None


def _range_of(c: Ctx, f: _Found) -> TimeRange | None:
    """The window of an expression with what bounds it, resolved against c."""
    _, rng = _resolve(c, f.core, f.text, f.fuzzy and f.bound is None and f.to is None)
    if rng is None:
        return None
    if f.to is not None:
        if _yearless(f.to) and rng.start is not None:
            # 7月22日から9月10日: the end's first occurrence from the start on, not this year's.
            # Read from the eve of the start's month a year on, when that month has not begun
            # again: 8月11日から8月15日 ends this August, not the next (a month begun counts).
            s = rng.start.astimezone(c.tz)
            eve = datetime(s.year + 1, s.month, 1, tzinfo=c.tz) - timedelta(days=1)
            c = Ctx(eve, c.tz, c.recent_days)
        _, last = _resolve(c, f.to, f.text, False)
        return spanning(rng, last, f.text) if last is not None else None
    return bounded(rng, f.bound, f.text)


def _yearless(atoms: list[Atom]) -> bool:
    """A month, date, season or holiday without a year (its latest occurrence is meant)."""
    head = atoms[0]
    if head.kind == "md":
        return True
    if head.kind == "month":
        return head.value[0] == "abs" and head.value[1][1] == "past"
    return head.kind in ("season", "holiday") and head.value[1] == "past"


def _bind(
    c: Ctx,
    exprs: list[tuple[list[Atom], bool, int, int]],
    text: str,
    spans: list[tuple[int, int]],
) -> list[_Found]:
    """The expressions with the words that bound them (9月以降, since May) or join two into a
    range (6月から8月まで, from May to August); those words' spans are added to `spans`."""
    found: list[_Found] = []
    i = 0
    while i < len(exprs):
        core, fuzzy, s, e = exprs[i]
        if i + 1 < len(exprs):
            nxt, _, s2, e2 = exprs[i + 1]
            join = joined(text, (s, e), (s2, e2))
            if join is not None:
                ws, we = min(s, join[0]), max(e2, join[1])
                f = _Found(core, False, text[ws:we], TimeRange(None, None), to=nxt, at=(ws, we))
                rng = _range_of(c, f)
                if rng is not None:
                    spans.append(join)
                    found.append(replace(f, range=rng))
                    i += 2
                    continue
        mark = marked(text, s, e)
        if (
            mark.span
            and mark.span[0] < s
            and i > 0
            and not text[exprs[i - 1][3] : mark.span[0]].strip()
        ):
            mark = Marked(None)  # "the Sunday before October 25": an anchor, not a bound
        ws, we = (min(s, mark.span[0]), max(e, mark.span[1])) if mark.span else (s, e)
        f = _Found(core, fuzzy, text[ws:we], TimeRange(None, None), bound=mark.bound, at=(ws, we))
        rng = _range_of(c, f)
        if rng is not None and mark.bound is None:
            got = _counted(c, text, s, e, rng)
            if got is not None:
                rng, words = got
                ws, we = min(ws, words[0]), max(we, words[1])
                f = replace(f, text=text[ws:we], at=(ws, we))
                spans.append(words)
                # "the weekend before 17 July": its words are this window's, not one of their own
                found = [x for x in found if not (ws <= x.at[0] and x.at[1] <= we)]
        if rng is not None:
            if mark.span:
                spans.append(mark.span)
            found.append(replace(f, range=rng))
        i += 1
    return found


def _counted_days(x: date, back: Counted) -> tuple[date, date]:
    """The days [lo, hi) a time counted from day x names (bounds.Counted)."""
    day = timedelta(days=1)
    after = back.side == "after"
    if back.unit in ("weekend", "weekends"):
        if back.side == "of" and x.weekday() >= 5:  # the weekend it is in
            sat = x - timedelta(days=x.weekday() - 5)
        elif after or back.side == "of":  # the first Saturday after it
            sat = x + timedelta(days=((5 - x.weekday()) % 7) or 7)
        else:  # the last Sunday before it ends the weekend
            sun = x - timedelta(days=((x.weekday() - 6) % 7) or 7)
            sat = sun - day
        sat += timedelta(weeks=(back.n - 1) * (1 if after else -1))
        return sat, sat + 2 * day
    if back.unit == "week":
        if back.side == "of":  # the week (Monday first) it is in
            monday = x - timedelta(days=x.weekday())
            return monday, monday + 7 * day
        return (x + day, x + 8 * day) if after else (x - 7 * day, x)
    sign = 1 if after else -1
    if back.unit == "weeks":  # "two weeks before X": the week around X - 14 days
        mid = x + sign * timedelta(weeks=back.n)
        return mid - 3 * day, mid + 4 * day
    d = x + sign * timedelta(days=back.n)
    return d, d + day


def _counted(
    c: Ctx, text: str, s: int, e: int, rng: TimeRange
) -> tuple[TimeRange, tuple[int, int]] | None:
    """The window words next to an expression count from it ("the week before 16 November",
    7月17日の前の週末, "the second week of November", 11月の第2週) and their span, or None."""
    if rng.start is None or rng.end is None:
        return None
    first, end = rng.start.astimezone(c.tz).date(), rng.end.astimezone(c.tz).date()
    nth = nth_week(text, s, e) if rng.granularity is G.MONTH else None
    if nth is not None:
        n, span = nth
        lo = end - timedelta(days=7) if n < 0 else first + timedelta(days=7 * (n - 1))
        words = (min(s, span[0]), max(e, span[1]))
        return TimeRange(
            c.at(lo), c.at(lo + timedelta(days=7)), None, text[words[0] : words[1]], G.WEEK
        ), span
    back = counted_back(text, s, e)
    if back is not None:
        lo, hi = _counted_days(first, back)
        gran = G.DAY if back.unit in ("days", "weekend", "weekends") else G.WEEK
        words = (min(s, back.span[0]), max(e, back.span[1]))
        return TimeRange(c.at(lo), c.at(hi), None, text[words[0] : words[1]], gran), back.span
    return None


# How far `now` moves to tell an expression that counts from it (先週, recently) from one that
# names its own date (2023年6月3日): a whole number of 400-year cycles would keep weekdays and
# leap days, but ten years and a day is enough to move any relative window.
_PROBE = timedelta(days=3653)


def _anchored(
    found: list[_Found], now: datetime, zone: ZoneInfo, recent_days: int
) -> TimeRange | None:
    """The question's window: its first expression's, unless it holds both words that count
    from now (recently, last Friday, 先週) and a stated date (on 3 June 2023, 2023年6月3日).
    Then the date is the moment those words count from, and the window runs from what they
    name to the end of the date: "what did Joanna finish last Friday on 23 January 2022" is
    about the 21st and was told on the 23rd."""
    if not found:
        return None
    probe = Ctx(now + _PROBE, zone, recent_days) if time_in_bounds(now + _PROBE) else None
    if probe is None:
        return found[0].range
    relative = stated = None
    for f in found:
        if _range_of(probe, f) == f.range:
            stated = stated or f
        else:
            relative = relative or f
    if relative is None or stated is None or stated.range.end is None:
        return found[0].range
    anchor = stated.range.end - timedelta(microseconds=1)
    counted = _range_of(Ctx(anchor, zone, recent_days), replace(relative, fuzzy=False))
    if counted is None or counted.start is None or counted.end is None:
        return stated.range
    start = min(counted.start, stated.range.start or counted.start)
    end = max(counted.end, stated.range.end)
    first, last = sorted((relative, stated), key=lambda f: found.index(f))
    return TimeRange(start, end, None, f"{first.text} … {last.text}", G.SPAN)


@dataclass(frozen=True)
class Expression:
    """One time expression of a text as read: its window (open on a side when bounded), its
    words and where they are, the bound its neighbours give it (9月以降, since May), whether it
    joins two ends (6月から8月まで) and the kinds of its atoms."""

    range: TimeRange
    text: str
    at: tuple[int, int]
    bound: Bound | None
    joined: bool
    kinds: tuple[str, ...]
    # The window of its own words, before a bound opens it or a join extends it
    own: TimeRange | None = None


def _read(
    text: str, c: Ctx, atoms: list[Atom] | None = None
) -> tuple[list[_Found], list[tuple[int, int]]]:
    """The expressions of text (of `atoms`, when given: the scan's, perhaps filtered) resolved
    against c, and the character spans of every time word found."""
    spans: list[tuple[int, int]] = []
    exprs: list[tuple[list[Atom], bool, int, int]] = []
    for group in _groups(scan(text) if atoms is None else atoms, text):
        core = [a for a in group if a.kind not in ("fuzzy", "fuzzy_pre")]
        fuzzy = len(core) < len(group) or any(a.kind == "nowish" for a in core)
        s, e = group[0].start, group[-1].end
        if not core:
            continue
        w, rng = _resolve(c, core, text[s:e], fuzzy)
        if w is None and core[0].kind in ("part", "day", "part_en"):
            continue  # 初め, 末, 3日 alone: not a time expression
        spans.append((s, e))
        if rng is not None:
            exprs.append((core, fuzzy, s, e))
    return _bind(c, exprs, text, spans), spans


def expressions(
    text: str,
    now: datetime,
    tz: tzinfo,
    *,
    past: bool = False,
    ahead: bool = False,
    atoms: list[Atom] | None = None,
) -> list[Expression]:
    """Every time expression of text that resolves, in text order, against `now` in tz (see
    Ctx for `past` and `ahead`); `atoms`: the scan's atoms to read (default: all of them)."""
    if not time_in_bounds(now):
        return []
    c = Ctx(now, tz, 14, past, ahead=ahead)
    found, _ = _read(text, c, atoms)
    return [
        Expression(
            f.range,
            f.text,
            f.at,
            f.bound,
            f.to is not None,
            tuple(a.kind for a in f.core),
            _resolve(c, f.core, f.text, False)[1],
        )
        for f in found
    ]


# A day of the month alone: "on the 15th" (not "the 15th of …": the grammar reads the month;
# "of every month" is a habit), 15日に (not 15日間, not 3月15日).
_EN_DAY_OF_MONTH = re.compile(r"\b[Tt]he\s+(\d{1,2})(?:st|nd|rd|th)\b(?!\s+of\b)")
_JA_DAY_OF_MONTH = re.compile(r"(?<![0-9０-９月年週])([0-9０-９]{1,2})日(?=に|は|の|、)")


def _ahead(text: str) -> bool:
    """Whether a question asks of what is to come (what's on the 15th?, 15日の予定は？): a
    day of the month alone is then the next one; else the latest."""
    return bool(re.search(r"\b(?:will|going to|plan|planned|scheduled)\b|予定|から何を", text))


def day_of_month(text: str, now: datetime, *, past: bool) -> TimeRange | None:
    """The day a day of the month alone names ("on the 15th", 15日に), in now's calendar:
    told in the past, the latest such day by today (today included); otherwise the next one
    from today. None when the text names none."""
    m = _EN_DAY_OF_MONTH.search(text) or _JA_DAY_OF_MONTH.search(text)
    if m is None:
        return None
    day, today = kanji_to_int(m.group(1)), now.date()
    month = today.replace(day=1)
    step = -1 if past else 1
    for _ in range(13):  # the nearest month that has the day, backwards or forwards
        try:
            d = month.replace(day=day)
        except ValueError:
            d = None
        if d is not None and (d <= today if past else d >= today):
            start = datetime.combine(d, datetime.min.time(), tzinfo=now.tzinfo)
            return TimeRange(start, start + timedelta(days=1), None, m.group(0).strip(), G.DAY)
        k = month.month - 1 + step
        month = month.replace(year=month.year + k // 12, month=k % 12 + 1)
    return None


def parse_time(
    text: str,
    now: datetime,
    tz: str | ZoneInfo = "Asia/Tokyo",
    recent_days: int = 14,
    *,
    past: bool = False,
) -> TimeParse:
    """Find the time expressions in text; the first that resolves gives the range. Also the
    character spans of every expression found (time words are not keywords) and hints
    (a year alone, a life stage such as 高校の頃) for what cannot be dated. `past`: the text
    tells of the past (retrieval.analysis.tense.told_in_the_past): a bare weekday is then the
    last one before today."""
    zone = tz if isinstance(tz, ZoneInfo) else ZoneInfo(tz)
    if now.tzinfo is None:
        now = now.replace(tzinfo=zone)
    out = TimeParse()
    if not time_in_bounds(now):  # nothing relative can be resolved against such a now
        return out
    found, out.spans = _read(text, Ctx(now, zone, recent_days, past))
    out.range = _anchored(found, now, zone, recent_days)
    if out.range is None and not found:  # "What did I buy on the 28th?", 15日に何をした？
        local = now.astimezone(zone)
        out.range = day_of_month(text, local, past=not _ahead(text))
    low = text.lower()
    for stage in LIFE_STAGES:
        i = low.find(stage)
        if i >= 0:
            out.hints.append(stage)
            out.spans.append((i, i + len(stage)))
    for m in _YEAR_HINT_RE.finditer(text):
        y = m.group(1) or m.group(2)
        if y and 1900 <= int(y) <= 2200 and y not in out.hints:
            out.hints.append(y)
    return out


def strip_spans(text: str, spans: list[tuple[int, int]]) -> str:
    """Text with the given spans blanked (time words must not become keywords)."""
    chars = list(text)
    for s, e in spans:
        for i in range(s, e):
            chars[i] = " "
    return "".join(chars)
