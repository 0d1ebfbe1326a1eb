"""How one time expression's window follows from its atoms: the composers, one per kind of first
atom (a year, a month, a week, a day, a season, a holiday ...), resolved against `now` in a time
zone. Windows are half-open [start, end) in local days; weeks are ISO weeks (Monday first). A
date without a year is its most recent occurrence that has begun (today included); 来年の,
今度の, next … look forward."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, tzinfo

from retrieval.analysis.time import calendar_ja as cal
from retrieval.analysis.time.atoms import Atom
from retrieval.models import Granularity

__all__ = ["Ctx", "Window", "compose"]

G = Granularity

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
class Window:
    start: date
    end: date
    granularity: Granularity
    relative: str | None = None


class Ctx:
    """What an expression is resolved against: now, in the calendar of tz; `past`: the words
    around it tell of the past (a bare weekday is then the last one before today); `ahead`:
    they tell of what is to come (a memory's "on Friday" said in the present or future: a bare
    weekday is the next one after today, a date or month without a year its next occurrence
    not over)."""

    def __init__(
        self,
        now: datetime,
        tz: tzinfo,
        recent_days: int,
        past: bool = False,
        *,
        ahead: bool = False,
    ) -> None:
        self.tz = tz
        self.now = now.astimezone(tz)
        self.today = self.now.date()
        self.recent_days = recent_days
        self.past = past
        self.ahead = ahead and not past

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
    c: Ctx, fn: Callable[[int], tuple[date, date] | None], mode: str | int
) -> tuple[date, date] | None:
    """The span (a function of the year) that `mode` means: 'past' the latest begun by today,
    'last' the latest over before today, 'next' the first after today, 'this' this year's,
    a number that year's."""
    y = c.today.year
    if isinstance(mode, int):
        return fn(mode)
    if mode == "this":
        return fn(y)
    if mode == "past" and c.ahead:
        # told of what is to come: the first occurrence not over (today's included)
        for yy in range(y - 1, y + 3):
            got = fn(yy)
            if got is not None and got[1] > c.today:
                return got
        return None
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


def _year_of(c: Ctx, a: Atom) -> tuple[int, tuple[date, date], str | None]:
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


def _weekday(c: Ctx, wd: int, mode: str, week: int | None = None) -> date:
    monday = c.today - timedelta(days=c.today.weekday())
    if week is not None:
        return monday + timedelta(weeks=week, days=wd)
    if mode == "this":
        return monday + timedelta(days=wd)
    back = (c.today.weekday() - wd) % 7
    if mode == "last" or (mode == "past" and c.past):
        # last Friday / この前の金曜日, and "Did I win on Saturday?" asked on a Saturday: the one
        # before today
        return c.today - timedelta(days=back or 7)
    if mode == "next" or (mode == "past" and c.ahead):
        return c.today + timedelta(days=((wd - c.today.weekday()) % 7) or 7)
    return c.today - timedelta(days=back)  # 金曜日に, "on Friday": the latest, today included


def _day(d: date, rel: str | None = None) -> Window:
    return Window(d, d + timedelta(days=1), G.DAY, rel)


def compose(c: Ctx, atoms: list[Atom]) -> Window | None:
    """The window of one expression (atoms that stand together), or None."""
    compose = _COMPOSERS.get(atoms[0].kind)
    return compose(c, atoms) if compose else None


def _from_part_en(c: Ctx, atoms: list[Atom]) -> Window | None:
    """early October, the end of last year"""
    head = atoms[0]
    inner = compose(c, atoms[1:]) if len(atoms) > 1 else None
    if inner is None:
        return None
    if inner.granularity == G.YEAR and head.value in ("begin", "end"):
        s, e = _year_part(inner.start.year, head.value)
        return Window(s, e, G.PART_OF_MONTH, inner.relative and f"{inner.relative}_{head.value}")
    s, e = _part(inner.start, inner.end, head.value)
    return Window(s, e, G.PART_OF_MONTH, inner.relative and f"{inner.relative}_{head.value}")


def _from_year(c: Ctx, atoms: list[Atom]) -> Window | None:
    head = atoms[0]
    y, (ys, ye), rel = _year_of(c, head)
    if len(atoms) == 1:
        return Window(ys, ye, G.YEAR, rel)
    nxt = atoms[1]
    if nxt.kind == "month":
        return _month_window(c, atoms[1:], year=y)
    if nxt.kind == "md":
        mo, d = nxt.value
        return _day(date(y, mo, d))
    if nxt.kind == "season":
        s, e = cal.season(y, nxt.value[0])
        return Window(s, e, G.SEASON, rel and f"{rel}_{nxt.value[0]}")
    if nxt.kind == "holiday":
        got = cal.holiday_span(nxt.value[0], y)
        return Window(got[0], got[1], G.HOLIDAY, nxt.value[0]) if got else None
    if nxt.kind == "nowish":
        d = (
            c.today.replace(year=y)
            if not (c.today.month == 2 and c.today.day == 29)
            else date(y, 2, 28)
        )
        return Window(
            d - timedelta(days=7), d + timedelta(days=8), G.SPAN, rel and f"{rel}_this_time"
        )
    if nxt.kind in ("part", "yearpart") and nxt.value in ("end", "begin"):
        s, e = _year_part(y, nxt.value)
        return Window(s, e, G.PART_OF_MONTH, rel and f"{rel}_{nxt.value}")
    return Window(ys, ye, G.YEAR, rel)


def _from_fy(c: Ctx, atoms: list[Atom]) -> Window | None:
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
        return Window(
            m, _month_start(m.year, m.month + 1), G.MONTH, rel and f"{rel}_{atoms[1].value}"
        )
    return Window(s, e, G.FISCAL_YEAR, rel)


def _from_fypart(c: Ctx, atoms: list[Atom]) -> Window | None:
    head = atoms[0]
    fy = cal.fiscal_year_of(c.today)
    m = date(fy + 1, 3, 1) if head.value == "end" else date(fy, 4, 1)
    if m > c.today:
        m = m.replace(year=m.year - 1)
    return Window(m, _month_start(m.year, m.month + 1), G.MONTH, f"fiscal_year_{head.value}")


def _from_yearpart(c: Ctx, atoms: list[Atom]) -> Window | None:
    head = atoms[0]
    y = (
        c.today.year
        if (head.value == "begin" or c.today >= date(c.today.year, 12, 16))
        else c.today.year - 1
    )
    s, e = _year_part(y, head.value)
    return Window(s, e, G.PART_OF_MONTH, f"year_{head.value}")


def _from_month(c: Ctx, atoms: list[Atom]) -> Window | None:
    return _month_window(c, atoms, year=None)


def _from_week(c: Ctx, atoms: list[Atom]) -> Window | None:
    head = atoms[0]
    kinds = [a.kind for a in atoms]
    monday = c.today - timedelta(days=c.today.weekday()) + timedelta(weeks=head.value)
    rel = _REL_NAMES["week"].get(head.value)
    if "weekday" in kinds[1:2]:
        d = _weekday(c, atoms[1].value[0], "week", week=head.value)
        return _day(d, rel and f"{rel}_{d.strftime('%A').lower()}")
    if kinds[1:2] in (["part"], ["weekend"]):
        return Window(
            monday + timedelta(days=5), monday + timedelta(days=7), G.DAY, rel and f"{rel}end"
        )
    return Window(monday, monday + timedelta(days=7), G.WEEK, rel)


def _from_weekend(c: Ctx, atoms: list[Atom]) -> Window | None:
    head = atoms[0]
    bare = head.value in (None, "bare")
    sat = _weekday(c, 5, "past" if bare else head.value)
    if bare and c.today.weekday() == 6 and not c.ahead:
        sat = c.today - timedelta(days=1)
    return Window(sat, sat + timedelta(days=2), G.DAY, "weekend")


def _from_weekday(c: Ctx, atoms: list[Atom]) -> Window | None:
    head = atoms[0]
    wd, mode = head.value
    return _day(_weekday(c, wd, mode))


def _from_dayrel(c: Ctx, atoms: list[Atom]) -> Window | None:
    head = atoms[0]
    return _day(c.today + timedelta(days=head.value), _REL_NAMES["day"].get(head.value))


def _from_date(c: Ctx, atoms: list[Atom]) -> Window | None:
    head = atoms[0]
    return _day(head.value)


def _from_md(c: Ctx, atoms: list[Atom]) -> Window | None:
    head = atoms[0]
    mo, d = head.value
    got = _occurrence(c, lambda y: (date(y, mo, d), date(y, mo, d) + timedelta(days=1)), "past")
    return Window(got[0], got[1], G.DAY) if got else None


def _from_ago(c: Ctx, atoms: list[Atom]) -> Window | None:
    head = atoms[0]
    unit, n = head.value
    if unit == "day":
        return _day(c.today - timedelta(days=n), f"{n}_days_ago")
    if unit == "week":
        d = c.today - timedelta(weeks=n)
        return Window(d - timedelta(days=3), d + timedelta(days=4), G.WEEK, f"{n}_weeks_ago")
    d = _months_back(c.today, n)
    return Window(d - timedelta(days=15), d + timedelta(days=16), G.MONTH, f"{n:g}_months_ago")


def _from_few(c: Ctx, atoms: list[Atom]) -> Window | None:
    head = atoms[0]
    lo, hi, rel = head.value
    return Window(c.today - timedelta(days=hi), c.today - timedelta(days=lo), G.SPAN, rel)


def _from_season(c: Ctx, atoms: list[Atom]) -> Window | None:
    head = atoms[0]
    name, mode = head.value
    got = _occurrence(c, lambda y: cal.season(y, name), mode)
    return (
        Window(got[0], got[1], G.SEASON, None if isinstance(mode, int) else f"{mode}_{name}")
        if got
        else None
    )


def _from_holiday(c: Ctx, atoms: list[Atom]) -> Window | None:
    head = atoms[0]
    key, mode = head.value
    got = _occurrence(c, lambda y: cal.holiday_span(key, y), mode)
    return Window(got[0], got[1], G.HOLIDAY, key) if got else None


def _from_nowish(c: Ctx, atoms: list[Atom]) -> Window | None:
    return Window(c.today - timedelta(days=7), c.today + timedelta(days=1), G.SPAN, "around_now")


def _from_recent(c: Ctx, atoms: list[Atom]) -> Window | None:
    return Window(
        c.today - timedelta(days=c.recent_days), c.today + timedelta(days=1), G.SPAN, "recent"
    )


def _from_part(c: Ctx, atoms: list[Atom]) -> Window | None:
    head = atoms[0]
    if head.value not in ("上旬", "中旬", "下旬", "month_begin", "month_end"):
        return None
    which = {"month_begin": "begin", "month_end": "end"}.get(head.value, head.value)
    first = c.today.replace(day=1)
    s, e = _part(first, _month_start(first.year, first.month + 1), which)
    if s > c.today:  # 下旬 said on the 5th: last month's
        first = _month_start(first.year, first.month - 1)
        s, e = _part(first, _month_start(first.year, first.month + 1), which)
    return Window(s, e, G.PART_OF_MONTH)


# How an expression's window follows from its first atom's kind.
_COMPOSERS: dict[str, Callable[[Ctx, list[Atom]], Window | None]] = {
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


def _month_window(c: Ctx, atoms: list[Atom], *, year: int | None) -> Window | None:
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
            return Window(first, end, G.MONTH, rel)
    if len(atoms) > 1 and atoms[1].kind == "part":
        which = {"month_begin": "begin", "month_end": "end"}.get(atoms[1].value, atoms[1].value)
        s, e = _part(first, end, which)
        return Window(s, e, G.PART_OF_MONTH, rel and f"{rel}_{which}")
    return Window(first, end, G.MONTH, rel)
