"""Time expressions in Japanese and English, resolved against `now` in a time zone.

Two steps. The scanner (`retrieval.analysis.timeatoms`) finds atoms — a year (2025年, 令和5年, 去年,
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
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from retrieval.analysis import calendar_ja as cal
from retrieval.analysis.timeatoms import LIFE_STAGES, Atom, kanji_to_int, scan
from retrieval.models import TIME_MAX, TIME_MIN, Granularity, TimeRange, time_in_bounds

__all__ = ["LIFE_STAGES", "TimeParse", "kanji_to_int", "parse_time", "strip_spans"]

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

_REL_NAMES = {
    "year": {0: "this_year", -1: "last_year", -2: "year_before_last", 1: "next_year"},
    "month": {0: "this_month", -1: "last_month", -2: "month_before_last", 1: "next_month"},
    "week": {
        0: "this_week",
        -1: "last_week",
        -2: "week_before_last",
        1: "next_week",
        2: "week_after_next",
    },
    "day": {
        0: "today",
        -1: "yesterday",
        -2: "day_before_yesterday",
        1: "tomorrow",
        2: "day_after_tomorrow",
    },
}


@dataclass
class TimeParse:
    range: TimeRange | None = None
    hints: list[str] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class _Window:
    start: date
    end: date
    granularity: Granularity
    relative: str | None = None


class _Ctx:
    def __init__(self, now: datetime, tz: ZoneInfo, recent_days: int) -> None:
        self.tz = tz
        self.now = now.astimezone(tz)
        self.today = self.now.date()
        self.recent_days = recent_days

    def at(self, d: date) -> datetime:
        return datetime.combine(d, time(0), tzinfo=self.tz)


def _month_start(y: int, m: int) -> date:
    return date(y + (m - 1) // 12, (m - 1) % 12 + 1, 1)


def _months_back(d: date, n: float) -> date:
    whole = int(n)
    first = _month_start(d.year, d.month - whole)
    last_day = (_month_start(first.year, first.month + 1) - timedelta(days=1)).day
    out = first.replace(day=min(d.day, last_day))
    return out - timedelta(days=15) if n - whole >= 0.5 else out


def _occurrence(
    c: _Ctx, fn: Callable[[int], tuple[date, date] | None], mode: str | int
) -> tuple[date, date] | None:
    """The span (a function of the year) that `mode` means: 'past' the latest begun by today,
    'last' the latest over before today, 'next' the first after today, 'this' this year's,
    a number that year's."""
    y = c.today.year
    if isinstance(mode, int):
        return fn(mode)
    if mode == "this":
        return fn(y)
    years = range(y + 1, y - 3, -1) if mode in ("past", "last") else range(y - 1, y + 3)
    for yy in years:
        got = fn(yy)
        if got is None:
            continue
        if mode == "past" and got[0] <= c.today:
            return got
        if mode == "last" and got[1] <= c.today:
            return got
        if mode == "next" and got[0] > c.today:
            return got
    return None


def _year_of(c: _Ctx, a: Atom) -> tuple[int, tuple[date, date], str | None]:
    """Year atom -> (gregorian year, its days, relative name)."""
    kind, v = a.value
    if kind == "era":
        got = cal.era_year(v[0], v[1])
        if got is None:
            raise ValueError("no such era year")
        return got[0].year, got, None
    if kind == "rel":
        y = c.today.year + v
        return y, (date(y, 1, 1), date(y + 1, 1, 1)), _REL_NAMES["year"].get(v)
    if kind == "ago":
        y = c.today.year - v
        return y, (date(y, 1, 1), date(y + 1, 1, 1)), f"{v}_years_ago"
    return v, (date(v, 1, 1), date(v + 1, 1, 1)), None


def _part(first: date, end: date, which: str) -> tuple[date, date]:
    """A part of the month (or other span) [first, end)."""
    n = (end - first).days
    if which in ("early", "上旬"):
        return first, first + timedelta(days=min(10, n))
    if which in ("mid", "中旬"):
        return first + timedelta(days=10), first + timedelta(days=min(20, n))
    if which in ("late", "下旬"):
        return first + timedelta(days=20), end
    if which == "begin":
        return first, first + timedelta(days=min(7, n))
    if which == "end":
        return end - timedelta(days=min(7, n)), end
    return first, end


def _year_part(y: int, which: str) -> tuple[date, date]:
    """年末 (the second half of December) or 年明け (the first half of January) of year y."""
    return (
        (date(y, 12, 16), date(y + 1, 1, 1)) if which == "end" else (date(y, 1, 1), date(y, 1, 16))
    )


def _weekday(c: _Ctx, wd: int, mode: str, week: int | None = None) -> date:
    monday = c.today - timedelta(days=c.today.weekday())
    if week is not None:
        return monday + timedelta(weeks=week, days=wd)
    if mode == "this":
        return monday + timedelta(days=wd)
    back = (c.today.weekday() - wd) % 7
    if mode == "last":  # last Friday / この前の金曜日: before today
        return c.today - timedelta(days=back or 7)
    if mode == "next":
        return c.today + timedelta(days=((wd - c.today.weekday()) % 7) or 7)
    return c.today - timedelta(days=back)  # 金曜日に: the latest, today included


def _day(d: date, rel: str | None = None) -> _Window:
    return _Window(d, d + timedelta(days=1), G.DAY, rel)


def _compose(c: _Ctx, atoms: list[Atom]) -> _Window | None:
    """The window of one expression (atoms that stand together), or None."""
    compose = _COMPOSERS.get(atoms[0].kind)
    return compose(c, atoms) if compose else None


def _from_part_en(c: _Ctx, atoms: list[Atom]) -> _Window | None:
    """early October, the end of last year"""
    head = atoms[0]
    inner = _compose(c, atoms[1:]) if len(atoms) > 1 else None
    if inner is None:
        return None
    if inner.granularity == G.YEAR and head.value in ("begin", "end"):
        s, e = _year_part(inner.start.year, head.value)
        return _Window(s, e, G.PART_OF_MONTH, inner.relative and f"{inner.relative}_{head.value}")
    s, e = _part(inner.start, inner.end, head.value)
    return _Window(s, e, G.PART_OF_MONTH, inner.relative and f"{inner.relative}_{head.value}")


def _from_year(c: _Ctx, atoms: list[Atom]) -> _Window | None:
    head = atoms[0]
    y, (ys, ye), rel = _year_of(c, head)
    if len(atoms) == 1:
        return _Window(ys, ye, G.YEAR, rel)
    nxt = atoms[1]
    if nxt.kind == "month":
        return _month_window(c, atoms[1:], year=y)
    if nxt.kind == "md":
        mo, d = nxt.value
        return _day(date(y, mo, d))
    if nxt.kind == "season":
        s, e = cal.season(y, nxt.value[0])
        return _Window(s, e, G.SEASON, rel and f"{rel}_{nxt.value[0]}")
    if nxt.kind == "holiday":
        got = cal.holiday_span(nxt.value[0], y)
        return _Window(got[0], got[1], G.HOLIDAY, nxt.value[0]) if got else None
    if nxt.kind == "nowish":
        d = (
            c.today.replace(year=y)
            if not (c.today.month == 2 and c.today.day == 29)
            else date(y, 2, 28)
        )
        return _Window(
            d - timedelta(days=7), d + timedelta(days=8), G.SPAN, rel and f"{rel}_this_time"
        )
    if nxt.kind in ("part", "yearpart") and nxt.value in ("end", "begin"):
        s, e = _year_part(y, nxt.value)
        return _Window(s, e, G.PART_OF_MONTH, rel and f"{rel}_{nxt.value}")
    return _Window(ys, ye, G.YEAR, rel)


def _from_fy(c: _Ctx, atoms: list[Atom]) -> _Window | None:
    head = atoms[0]
    kind, v = head.value
    fy = cal.fiscal_year_of(c.today) + v if kind == "rel" else v
    s, e = cal.fiscal_year(fy)
    rel = (
        {0: "this_fiscal_year", -1: "last_fiscal_year", 1: "next_fiscal_year"}.get(v)
        if kind == "rel"
        else None
    )
    if len(atoms) > 1 and atoms[1].value in ("end", "begin"):
        m = date(fy + 1, 3, 1) if atoms[1].value == "end" else date(fy, 4, 1)
        return _Window(
            m, _month_start(m.year, m.month + 1), G.MONTH, rel and f"{rel}_{atoms[1].value}"
        )
    return _Window(s, e, G.FISCAL_YEAR, rel)


def _from_fypart(c: _Ctx, atoms: list[Atom]) -> _Window | None:
    head = atoms[0]
    fy = cal.fiscal_year_of(c.today)
    m = date(fy + 1, 3, 1) if head.value == "end" else date(fy, 4, 1)
    if m > c.today:
        m = m.replace(year=m.year - 1)
    return _Window(m, _month_start(m.year, m.month + 1), G.MONTH, f"fiscal_year_{head.value}")


def _from_yearpart(c: _Ctx, atoms: list[Atom]) -> _Window | None:
    head = atoms[0]
    y = (
        c.today.year
        if (head.value == "begin" or c.today >= date(c.today.year, 12, 16))
        else c.today.year - 1
    )
    s, e = _year_part(y, head.value)
    return _Window(s, e, G.PART_OF_MONTH, f"year_{head.value}")


def _from_month(c: _Ctx, atoms: list[Atom]) -> _Window | None:
    return _month_window(c, atoms, year=None)


def _from_week(c: _Ctx, atoms: list[Atom]) -> _Window | None:
    head = atoms[0]
    kinds = [a.kind for a in atoms]
    monday = c.today - timedelta(days=c.today.weekday()) + timedelta(weeks=head.value)
    rel = _REL_NAMES["week"].get(head.value)
    if "weekday" in kinds[1:2]:
        d = _weekday(c, atoms[1].value[0], "week", week=head.value)
        return _day(d, rel and f"{rel}_{d.strftime('%A').lower()}")
    if kinds[1:2] in (["part"], ["weekend"]):
        return _Window(
            monday + timedelta(days=5), monday + timedelta(days=7), G.DAY, rel and f"{rel}end"
        )
    return _Window(monday, monday + timedelta(days=7), G.WEEK, rel)


def _from_weekend(c: _Ctx, atoms: list[Atom]) -> _Window | None:
    head = atoms[0]
    sat = _weekday(c, 5, head.value or "past")
    if head.value is None and c.today.weekday() == 6:
        sat = c.today - timedelta(days=1)
    return _Window(sat, sat + timedelta(days=2), G.DAY, "weekend")


def _from_weekday(c: _Ctx, atoms: list[Atom]) -> _Window | None:
    head = atoms[0]
    wd, mode = head.value
    return _day(_weekday(c, wd, mode))


def _from_dayrel(c: _Ctx, atoms: list[Atom]) -> _Window | None:
    head = atoms[0]
    return _day(c.today + timedelta(days=head.value), _REL_NAMES["day"].get(head.value))


def _from_date(c: _Ctx, atoms: list[Atom]) -> _Window | None:
    head = atoms[0]
    return _day(head.value)


def _from_md(c: _Ctx, atoms: list[Atom]) -> _Window | None:
    head = atoms[0]
    mo, d = head.value
    got = _occurrence(c, lambda y: (date(y, mo, d), date(y, mo, d) + timedelta(days=1)), "past")
    return _Window(got[0], got[1], G.DAY) if got else None


def _from_ago(c: _Ctx, atoms: list[Atom]) -> _Window | None:
    head = atoms[0]
    unit, n = head.value
    if unit == "day":
        return _day(c.today - timedelta(days=n), f"{n}_days_ago")
    if unit == "week":
        d = c.today - timedelta(weeks=n)
        return _Window(d - timedelta(days=3), d + timedelta(days=4), G.WEEK, f"{n}_weeks_ago")
    d = _months_back(c.today, n)
    return _Window(d - timedelta(days=15), d + timedelta(days=16), G.MONTH, f"{n:g}_months_ago")


def _from_few(c: _Ctx, atoms: list[Atom]) -> _Window | None:
    head = atoms[0]
    lo, hi, rel = head.value
    return _Window(c.today - timedelta(days=hi), c.today - timedelta(days=lo), G.SPAN, rel)


def _from_season(c: _Ctx, atoms: list[Atom]) -> _Window | None:
    head = atoms[0]
    name, mode = head.value
    got = _occurrence(c, lambda y: cal.season(y, name), mode)
    return (
        _Window(got[0], got[1], G.SEASON, None if isinstance(mode, int) else f"{mode}_{name}")
        if got
        else None
    )


def _from_holiday(c: _Ctx, atoms: list[Atom]) -> _Window | None:
    head = atoms[0]
    key, mode = head.value
    got = _occurrence(c, lambda y: cal.holiday_span(key, y), mode)
    return _Window(got[0], got[1], G.HOLIDAY, key) if got else None


def _from_nowish(c: _Ctx, atoms: list[Atom]) -> _Window | None:
    return _Window(c.today - timedelta(days=7), c.today + timedelta(days=1), G.SPAN, "around_now")


def _from_recent(c: _Ctx, atoms: list[Atom]) -> _Window | None:
    return _Window(
        c.today - timedelta(days=c.recent_days), c.today + timedelta(days=1), G.SPAN, "recent"
    )


def _from_part(c: _Ctx, atoms: list[Atom]) -> _Window | None:
    head = atoms[0]
    if head.value not in ("上旬", "中旬", "下旬", "month_begin", "month_end"):
        return None
    which = {"month_begin": "begin", "month_end": "end"}.get(head.value, head.value)
    first = c.today.replace(day=1)
    s, e = _part(first, _month_start(first.year, first.month + 1), which)
    if s > c.today:  # 下旬 said on the 5th: last month's
        first = _month_start(first.year, first.month - 1)
        s, e = _part(first, _month_start(first.year, first.month + 1), which)
    return _Window(s, e, G.PART_OF_MONTH)


# How an expression's window follows from its first atom's kind.
_COMPOSERS: dict[str, Callable[[_Ctx, list[Atom]], _Window | None]] = {
    "part_en": _from_part_en,
    "year": _from_year,
    "fy": _from_fy,
    "fypart": _from_fypart,
    "yearpart": _from_yearpart,
    "month": _from_month,
    "week": _from_week,
    "weekend": _from_weekend,
    "weekday": _from_weekday,
    "dayrel": _from_dayrel,
    "date": _from_date,
    "md": _from_md,
    "ago": _from_ago,
    "few": _from_few,
    "season": _from_season,
    "holiday": _from_holiday,
    "nowish": _from_nowish,
    "recent": _from_recent,
    "part": _from_part,
}


def _month_window(c: _Ctx, atoms: list[Atom], *, year: int | None) -> _Window | None:
    head = atoms[0]
    kind, v = head.value
    rel = None
    if kind == "ym":
        first = date(v[0], v[1], 1)
    elif kind == "rel":
        first = _month_start(c.today.year, c.today.month + v)
        rel = _REL_NAMES["month"].get(v)
    else:
        mo, mode = v
        if year is not None:
            first = date(year, mo, 1)
        else:
            got = _occurrence(c, lambda y: (date(y, mo, 1), _month_start(y, mo + 1)), mode)
            if got is None:
                return None
            first = got[0]
    end = _month_start(first.year, first.month + 1)
    if len(atoms) > 1 and atoms[1].kind == "day":
        try:
            return _day(first.replace(day=atoms[1].value))
        except ValueError:  # 2月30日: no such day; the month is still meant
            return _Window(first, end, G.MONTH, rel)
    if len(atoms) > 1 and atoms[1].kind == "part":
        which = {"month_begin": "begin", "month_end": "end"}.get(atoms[1].value, atoms[1].value)
        s, e = _part(first, end, which)
        return _Window(s, e, G.PART_OF_MONTH, rel and f"{rel}_{which}")
    return _Window(first, end, G.MONTH, rel)


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


def _to_range(c: _Ctx, w: _Window, text: str, fuzzy: bool) -> TimeRange | None:
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
    core: list[Atom]
    fuzzy: bool
    text: str
    range: TimeRange


def _resolve(
    c: _Ctx, core: list[Atom], text: str, fuzzy: bool
) -> tuple[_Window | None, TimeRange | None]:
    """The atoms' window and its range (None, None for a date not to hold)."""
    try:
        w = _compose(c, core)
        return w, _to_range(c, w, text, fuzzy) if w is not None else None
    except (ValueError, OverflowError):  # 2025年2月30日, 3000年前: a date, but not one to hold
        return None, None


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
    probe = _Ctx(now + _PROBE, zone, recent_days) if time_in_bounds(now + _PROBE) else None
    if probe is None:
        return found[0].range
    relative = stated = None
    for f in found:
        if _resolve(probe, f.core, f.text, f.fuzzy)[1] == f.range:
            stated = stated or f
        else:
            relative = relative or f
    if relative is None or stated is None or stated.range.end is None:
        return found[0].range
    anchor = stated.range.end - timedelta(microseconds=1)
    _, counted = _resolve(_Ctx(anchor, zone, recent_days), relative.core, relative.text, False)
    if counted is None or counted.start is None or counted.end is None:
        return stated.range
    start = min(counted.start, stated.range.start or counted.start)
    end = max(counted.end, stated.range.end)
    first, last = sorted((relative, stated), key=lambda f: found.index(f))
    return TimeRange(start, end, None, f"{first.text} … {last.text}", G.SPAN)


def parse_time(
    text: str, now: datetime, tz: str | ZoneInfo = "Asia/Tokyo", recent_days: int = 14
) -> TimeParse:
    """Find the time expressions in text; the first that resolves gives the range. Also the
    character spans of every expression found (time words are not keywords) and hints
    (a year alone, a life stage such as 高校の頃) for what cannot be dated."""
    zone = tz if isinstance(tz, ZoneInfo) else ZoneInfo(tz)
    if now.tzinfo is None:
        now = now.replace(tzinfo=zone)
    out = TimeParse()
    if not time_in_bounds(now):  # nothing relative can be resolved against such a now
        return out
    c = _Ctx(now, zone, recent_days)
    found: list[_Found] = []
    for group in _groups(scan(text), text):
        core = [a for a in group if a.kind not in ("fuzzy", "fuzzy_pre")]
        fuzzy = len(core) < len(group) or any(a.kind == "nowish" for a in core)
        s, e = group[0].start, group[-1].end
        if not core:
            continue
        w, rng = _resolve(c, core, text[s:e], fuzzy)
        if w is None and core[0].kind in ("part", "day", "part_en"):
            continue  # 初め, 末, 3日 alone: not a time expression
        out.spans.append((s, e))
        if rng is not None:
            found.append(_Found(core, fuzzy, text[s:e], rng))
    out.range = _anchored(found, now, zone, recent_days)
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
