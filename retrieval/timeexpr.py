"""Time expressions in Japanese and English, resolved against `now` in a time zone.

Ranges are half-open [start, end) in local time. Weeks are ISO weeks (Monday first). A year
alone or a life stage (高校の頃) is also kept as a hint, for expressions that cannot be dated.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from retrieval.models import TIME_MAX, TIME_MIN, TimeRange, time_in_bounds

_KANJI_DIGITS = {"〇": 0, "一": 1, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}

_EN_MONTHS = {
    m: i + 1
    for i, names in enumerate(
        [
            ("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"),
            ("may",), ("june", "jun"), ("july", "jul"), ("august", "aug"),
            ("september", "sep", "sept"), ("october", "oct"), ("november", "nov"),
            ("december", "dec"),
        ]
    )
    for m in names
}
_EN_MONTH_RE = "|".join(sorted(_EN_MONTHS, key=len, reverse=True))

# Season -> (first month, number of months); winter runs into the next year.
_SEASONS = {"春": (3, 3), "夏": (6, 3), "秋": (9, 3), "冬": (12, 3),
            "spring": (3, 3), "summer": (6, 3), "autumn": (9, 3), "fall": (9, 3), "winter": (12, 3)}

LIFE_STAGES = (
    "子供の頃", "子どもの頃", "幼少期", "幼い頃", "小学生の頃", "小学校の頃", "中学生の頃", "中学の頃",
    "中学時代", "高校生の頃", "高校の頃", "高校時代", "大学生の頃", "大学の頃", "大学時代", "学生時代",
    "院生の頃", "新人の頃", "新卒の頃", "社会人になった頃", "前職の頃", "前の会社",
    "when i was a child", "in high school", "in college", "at university", "as a student",
)


def kanji_to_int(s: str) -> int:
    """Parse ASCII digits or simple kanji numerals (一〜九十九)."""
    if s.isdigit():
        return int(s)
    if "十" in s:
        tens, _, ones = s.partition("十")
        return (_KANJI_DIGITS.get(tens, 1) if tens else 1) * 10 + (_KANJI_DIGITS.get(ones, 0) if ones else 0)
    value = 0
    for ch in s:
        value = value * 10 + _KANJI_DIGITS[ch]
    return value


@dataclass
class TimeParse:
    range: TimeRange | None = None
    hints: list[str] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)


class _Ctx:
    def __init__(self, now: datetime, tz: ZoneInfo, recent_days: int) -> None:
        self.tz = tz
        self.now = now.astimezone(tz)
        self.today = self.now.date()
        self.recent_days = recent_days

    def at(self, d: date) -> datetime:
        return datetime.combine(d, time(0), tzinfo=self.tz)

    def days(self, start: date, end_exclusive: date, relative: str | None, text: str) -> TimeRange:
        return TimeRange(self.at(start), self.at(end_exclusive), relative, text)


def _month_start(y: int, m: int) -> date:
    y += (m - 1) // 12
    m = (m - 1) % 12 + 1
    return date(y, m, 1)


def _add_months(d: date, n: int) -> date:
    return _month_start(d.year, d.month + n)


def _month_range(c: _Ctx, y: int, m: int, rel: str | None, text: str) -> TimeRange:
    return c.days(_month_start(y, m), _month_start(y, m + 1), rel, text)


def _year_range(c: _Ctx, y: int, rel: str | None, text: str) -> TimeRange:
    return c.days(date(y, 1, 1), date(y + 1, 1, 1), rel, text)


def _week_range(c: _Ctx, offset: int, rel: str, text: str) -> TimeRange:
    monday = c.today - timedelta(days=c.today.weekday()) + timedelta(weeks=offset)
    return c.days(monday, monday + timedelta(days=7), rel, text)


def _latest_month(c: _Ctx, m: int) -> int:
    """Year of the latest month m that is not in the future."""
    return c.today.year if m <= c.today.month else c.today.year - 1


def _season(c: _Ctx, y: int, name: str, text: str) -> TimeRange:
    first, n = _SEASONS[name]
    start = _month_start(y, first)
    return c.days(start, _add_months(start, n), None, text)


def _ago(c: _Ctx, n: int, unit: str, text: str) -> TimeRange:
    """N units ago: that day; about that week (±3 days); about that month (±15 days); that year."""
    if unit in ("日", "day"):
        d = c.today - timedelta(days=n)
        return c.days(d, d + timedelta(days=1), f"{n}_days_ago", text)
    if unit in ("週", "週間", "week"):
        d = c.today - timedelta(weeks=n)
        return c.days(d - timedelta(days=3), d + timedelta(days=4), f"{n}_weeks_ago", text)
    if unit in ("か月", "ヶ月", "ヵ月", "カ月", "ケ月", "箇月", "month"):
        d = _add_months(c.today, -n).replace(day=min(c.today.day, 28))
        return c.days(d - timedelta(days=15), d + timedelta(days=16), f"{n}_months_ago", text)
    y = c.today.year - n
    return _year_range(c, y, f"{n}_years_ago", text)


def _recent(c: _Ctx, text: str) -> TimeRange:
    return c.days(c.today - timedelta(days=c.recent_days), c.today + timedelta(days=1), "recent", text)


_REL_YEAR = {"今年": 0, "本年": 0, "去年": -1, "昨年": -1, "一昨年": -2, "おととし": -2, "来年": 1,
             "this year": 0, "last year": -1, "next year": 1}

Handler = Callable[[_Ctx, re.Match[str]], TimeRange | None]


def _rel_year(c: _Ctx, word: str) -> int:
    return c.today.year + _REL_YEAR[word.lower()]


def _ymd(c: _Ctx, m: re.Match[str]) -> TimeRange | None:
    try:
        d = date(int(m["y"]), int(m["mo"]), int(m["d"]))
    except ValueError:
        return None
    return c.days(d, d + timedelta(days=1), None, m.group(0))


def _rel_year_month_day(c: _Ctx, m: re.Match[str]) -> TimeRange | None:
    y = _rel_year(c, m["ry"])
    mo = kanji_to_int(m["mo"])
    if not 1 <= mo <= 12:
        return None
    if m["d"]:
        try:
            d = date(y, mo, kanji_to_int(m["d"]))
        except ValueError:
            return None
        return c.days(d, d + timedelta(days=1), None, m.group(0))
    return _month_range(c, y, mo, None, m.group(0))


def _abs_year_month(c: _Ctx, m: re.Match[str]) -> TimeRange | None:
    mo = int(m["mo"])
    return _month_range(c, int(m["y"]), mo, None, m.group(0)) if 1 <= mo <= 12 else None


def _month_day(c: _Ctx, m: re.Match[str]) -> TimeRange | None:
    mo, dd = kanji_to_int(m["mo"]), kanji_to_int(m["d"])
    try:
        d = date(c.today.year, mo, dd)
        if d > c.today:
            d = date(c.today.year - 1, mo, dd)
    except ValueError:
        return None
    return c.days(d, d + timedelta(days=1), None, m.group(0))


def _month_only(c: _Ctx, m: re.Match[str]) -> TimeRange | None:
    mo = kanji_to_int(m["mo"])
    return _month_range(c, _latest_month(c, mo), mo, None, m.group(0)) if 1 <= mo <= 12 else None


def _en_month_year(c: _Ctx, m: re.Match[str]) -> TimeRange | None:
    mo = _EN_MONTHS[m["mon"].lower()]
    y = int(m["y"]) if m["y"] else _latest_month(c, mo)
    return _month_range(c, y, mo, None, m.group(0))


def _en_last_month_name(c: _Ctx, m: re.Match[str]) -> TimeRange | None:
    mo = _EN_MONTHS[m["mon"].lower()]
    y = c.today.year if mo < c.today.month else c.today.year - 1
    return _month_range(c, y, mo, None, m.group(0))


def _season_abs(c: _Ctx, m: re.Match[str]) -> TimeRange | None:
    return _season(c, int(m["y"]), m["s"].lower(), m.group(0))


def _season_rel(c: _Ctx, m: re.Match[str]) -> TimeRange | None:
    return _season(c, _rel_year(c, m["ry"]), m["s"].lower(), m.group(0))


def _en_last_season(c: _Ctx, m: re.Match[str]) -> TimeRange | None:
    name = m["s"].lower()
    first, _ = _SEASONS[name]
    y = c.today.year if _month_start(c.today.year, first + 3) <= c.today else c.today.year - 1
    return _season(c, y, name, m.group(0))


def _ago_match(c: _Ctx, m: re.Match[str]) -> TimeRange | None:
    unit = m["u"].lower().rstrip("s")
    return _ago(c, kanji_to_int(m["n"]) if m["n"] not in ("a", "an", "one") else 1, unit, m.group(0))


def _few_days(c: _Ctx, m: re.Match[str]) -> TimeRange | None:
    return c.days(c.today - timedelta(days=5), c.today, "few_days_ago", m.group(0))


def _year_only(c: _Ctx, m: re.Match[str]) -> TimeRange | None:
    y = int(m["y"])
    return _year_range(c, y, None, m.group(0)) if 1900 <= y <= 2200 else None


def _named(days_from: int, days_to: int, rel: str) -> Handler:
    def h(c: _Ctx, m: re.Match[str]) -> TimeRange:
        return c.days(c.today + timedelta(days=days_from), c.today + timedelta(days=days_to), rel, m.group(0))

    return h


def _week(offset: int, rel: str) -> Handler:
    return lambda c, m: _week_range(c, offset, rel, m.group(0))


def _month_rel(offset: int, rel: str) -> Handler:
    def h(c: _Ctx, m: re.Match[str]) -> TimeRange:
        s = _add_months(c.today, offset)
        return c.days(s, _add_months(s, 1), rel, m.group(0))

    return h


def _year_rel(c: _Ctx, m: re.Match[str]) -> TimeRange:
    word = m.group(0).lower()
    offset = _REL_YEAR[word]
    rel = {0: "this_year", -1: "last_year", -2: "year_before_last", 1: "next_year"}[offset]
    return _year_range(c, c.today.year + offset, rel, m.group(0))


_REL_YEAR_RE = r"(?P<ry>今年|本年|一昨年|おととし|去年|昨年|来年)"
_SEASON_JA = r"(?P<s>春|夏|秋|冬)"

# Most specific first; the first that matches gives the range.
_RULES: list[tuple[re.Pattern[str], Handler]] = [
    (re.compile(r"(?P<y>\d{4})[-/年.](?P<mo>\d{1,2})[-/月.](?P<d>\d{1,2})日?"), _ymd),
    (re.compile(_REL_YEAR_RE + r"の?" + r"(?P<mo>[0-9]{1,2}|[一二三四五六七八九十]+)月(?:(?P<d>[0-9]{1,2}|[一二三四五六七八九十]+)日)?"), _rel_year_month_day),
    (re.compile(r"(?P<y>\d{4})年(?P<mo>\d{1,2})月"), _abs_year_month),
    (re.compile(r"(?P<y>\d{4})[-/](?P<mo>\d{1,2})(?![0-9/-])"), _abs_year_month),
    (re.compile(r"(?P<y>\d{4})年の?" + _SEASON_JA), _season_abs),
    (re.compile(_REL_YEAR_RE + r"の?" + _SEASON_JA), _season_rel),
    (re.compile(r"(?i)(?P<s>spring|summer|autumn|fall|winter)(?: of)? (?P<y>\d{4})"), _season_abs),
    (re.compile(r"(?i)(?P<ry>this year|last year)'?s? (?P<s>spring|summer|autumn|fall|winter)"), _season_rel),
    (re.compile(r"(?i)last (?P<s>spring|summer|autumn|fall|winter)"), _en_last_season),
    (re.compile(r"(?i)\b(?P<mon>" + _EN_MONTH_RE + r")\.? (?:of )?(?P<y>\d{4})\b"), _en_month_year),
    (re.compile(r"(?i)\blast (?P<mon>" + _EN_MONTH_RE + r")\b"), _en_last_month_name),
    (re.compile(r"(?i)\bin (?P<mon>" + _EN_MONTH_RE + r")\b(?P<y>)"), _en_month_year),
    (re.compile(r"(?P<mo>[0-9]{1,2}|[一二三四五六七八九十]+)月(?P<d>[0-9]{1,2}|[一二三四五六七八九十]+)日"), _month_day),
    (re.compile(r"一昨日|おととい|the day before yesterday", re.I), _named(-2, -1, "day_before_yesterday")),
    (re.compile(r"昨日|きのう|昨夜|昨晩|\byesterday\b|\blast night\b", re.I), _named(-1, 0, "yesterday")),
    (re.compile(r"今日|本日|きょう|今朝|今夜|今晩|\btoday\b|\btonight\b|\bthis morning\b", re.I), _named(0, 1, "today")),
    (re.compile(r"先々週|\bthe week before last\b", re.I), _week(-2, "week_before_last")),
    (re.compile(r"先週|\blast week\b", re.I), _week(-1, "last_week")),
    (re.compile(r"今週|\bthis week\b", re.I), _week(0, "this_week")),
    (re.compile(r"来週|\bnext week\b", re.I), _week(1, "next_week")),
    (re.compile(r"先々月", re.I), _month_rel(-2, "month_before_last")),
    (re.compile(r"先月|\blast month\b", re.I), _month_rel(-1, "last_month")),
    (re.compile(r"今月|\bthis month\b", re.I), _month_rel(0, "this_month")),
    (re.compile(r"来月|\bnext month\b", re.I), _month_rel(1, "next_month")),
    (re.compile(r"(?P<n>[0-9]+|[一二三四五六七八九十]+)\s*(?P<u>日|週間|週|か月|ヶ月|ヵ月|カ月|ケ月|箇月|年)前"), _ago_match),
    (re.compile(r"(?i)\b(?P<n>[0-9]+|a|an|one)\s+(?P<u>days?|weeks?|months?|years?)\s+ago\b"), _ago_match),
    (re.compile(r"数日前|\ba few days ago\b", re.I), _few_days),
    (re.compile(r"一昨年|おととし|去年|昨年|今年|本年|来年|\blast year\b|\bthis year\b|\bnext year\b", re.I), _year_rel),
    (re.compile(r"(?P<mo>[0-9]{1,2}|[一二三四五六七八九十]+)月(?!曜|額|間|末)"), _month_only),
    (re.compile(r"(?<![0-9])(?P<y>\d{4})年(?!代|間|生|度)"), _year_only),
    (re.compile(r"(?i)\bin (?P<y>\d{4})\b"), _year_only),
    (re.compile(r"最近|近頃|この頃|このごろ|先日|この前|\brecently\b|\blately\b|\bthese days\b", re.I),
     lambda c, m: _recent(c, m.group(0))),
]

_YEAR_HINT_RE = re.compile(r"(?<![0-9])(\d{4})年|\b(?:in )?(\d{4})\b")


def parse_time(text: str, now: datetime, tz: str | ZoneInfo = "Asia/Tokyo", recent_days: int = 14) -> TimeParse:
    """Find the first time expression in text; return its range, hints and character spans."""
    zone = tz if isinstance(tz, ZoneInfo) else ZoneInfo(tz)
    if now.tzinfo is None:
        now = now.replace(tzinfo=zone)
    out = TimeParse()
    if not time_in_bounds(now):  # nothing relative can be resolved against such a now
        return out
    ctx = _Ctx(now, zone, recent_days)
    for pattern, handler in _RULES:
        for m in pattern.finditer(text):
            if any(s <= m.start() < e or s < m.end() <= e for s, e in out.spans):
                continue
            held, rng = _resolve(handler, ctx, m)
            if not held:
                # A date past what can be held (3000年前, 1899年1月) is still a date: its words
                # must not be read again as a shorter expression (1月 of this year).
                out.spans.append((m.start(), m.end()))
            if rng is None:
                continue
            out.spans.append((m.start(), m.end()))
            if out.range is None:
                out.range = rng
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


def _resolve(handler: Handler, ctx: _Ctx, m: re.Match[str]) -> tuple[bool, TimeRange | None]:
    """(held, range): the handler's range clamped to [TIME_MIN, TIME_MAX). held is False for
    a date that exists but cannot be held (3000年前, 99999999週間前, 9999-12-31): the query is
    then answered without a window. A handler's own None (2025年2月30日) is held, no range."""
    try:
        rng = handler(ctx, m)
    except (ValueError, OverflowError):
        return False, None
    if rng is None:
        return True, None
    start = max(rng.start, TIME_MIN) if rng.start is not None else None
    end = min(rng.end, TIME_MAX) if rng.end is not None else None
    if start is not None and end is not None and start >= end:
        return False, None
    return True, TimeRange(start, end, rng.relative, rng.text)


def strip_spans(text: str, spans: list[tuple[int, int]]) -> str:
    """Text with the given spans blanked (time words must not become keywords)."""
    chars = list(text)
    for s, e in spans:
        for i in range(s, e):
            chars[i] = " "
    return "".join(chars)
