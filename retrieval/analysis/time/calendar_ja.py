"""The Japanese calendar the time expressions need: eras, fiscal years, holidays, seasons.

National holidays come from the kept `holidays` library (they move: 海の日 is the third Monday
of July, and the law changes them); the customary periods (正月, お盆, ゴールデンウィーク …)
are defined here, each as a span of days in a given year.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import date, timedelta

# Era -> (first day, first day of the next era). Year N of an era is Gregorian year
# first.year + N - 1, clipped to the era's own days (昭和64年 is 1989-01-01..07 only).
ERAS: dict[str, tuple[date, date | None]] = {
    "令和": (date(2019, 5, 1), None),
    "平成": (date(1989, 1, 8), date(2019, 5, 1)),
    "昭和": (date(1926, 12, 25), date(1989, 1, 8)),
    "大正": (date(1912, 7, 30), date(1926, 12, 25)),
    "明治": (date(1868, 1, 25), date(1912, 7, 30)),
}
ERA_LETTERS = {"R": "令和", "H": "平成", "S": "昭和", "T": "大正", "M": "明治"}


def era_year(era: str, n: int) -> tuple[date, date] | None:
    """[start, end) of year n of an era; the whole Gregorian year when n runs past the era
    (plans written before an era ended still say 平成32年), None for n < 1."""
    if n < 1:
        return None
    first, nxt = ERAS[era]
    y = first.year + n - 1
    start, end = date(y, 1, 1), date(y + 1, 1, 1)
    clipped = (max(start, first), min(end, nxt) if nxt else end)
    return clipped if clipped[0] < clipped[1] else (start, end)


def fiscal_year_of(d: date) -> int:
    """The Japanese fiscal year (April-March) that d falls in, named by its first year."""
    return d.year if d.month >= 4 else d.year - 1


def fiscal_year(fy: int) -> tuple[date, date]:
    return date(fy, 4, 1), date(fy + 1, 4, 1)


# Season -> (first month, months); winter runs into the next year.
SEASONS = {"春": (3, 3), "夏": (6, 3), "秋": (9, 3), "冬": (12, 3)}


def season(y: int, name: str) -> tuple[date, date]:
    first, n = SEASONS[name]
    start = date(y, first, 1)
    m = first - 1 + n
    return start, date(y + m // 12, m % 12 + 1, 1)


@functools.lru_cache(maxsize=512)
def national_holidays(year: int) -> dict[date, str]:
    """Japan's national holidays of a year, by their Japanese names."""
    import holidays

    return dict(holidays.country_holidays("JP", years=year, language="ja").items())


def is_day_off(d: date) -> bool:
    return d.weekday() >= 5 or d in national_holidays(d.year)


def run_of_days_off(first: date, last: date) -> tuple[date, date]:
    """[first, last] widened over the days off (weekends, holidays) that touch it."""
    while is_day_off(first - timedelta(days=1)):
        first -= timedelta(days=1)
    while is_day_off(last + timedelta(days=1)):
        last += timedelta(days=1)
    return first, last + timedelta(days=1)


def _named_holiday(*names: str) -> Callable[[int], tuple[date, date] | None]:
    def span(y: int) -> tuple[date, date] | None:
        for d, n in sorted(national_holidays(y).items()):
            if n in names:
                return d, d + timedelta(days=1)
        return None

    return span


def _fixed(m1: int, d1: int, days: int) -> Callable[[int], tuple[date, date] | None]:
    def span(y: int) -> tuple[date, date] | None:
        start = date(y, m1, d1)
        return start, start + timedelta(days=days)

    return span


def _golden_week(y: int) -> tuple[date, date]:
    return run_of_days_off(date(y, 4, 29), date(y, 5, 5))


def _silver_week(y: int) -> tuple[date, date] | None:
    keiro = _named_holiday("敬老の日")(y)
    shubun = _named_holiday("秋分の日")(y)
    if keiro is None:
        return None
    last = max(keiro[0], shubun[0]) if shubun and (shubun[0] - keiro[0]).days <= 3 else keiro[0]
    return run_of_days_off(keiro[0], last)


def _longest_days_off_in(month: int) -> Callable[[int], tuple[date, date] | None]:
    """A month's 連休: its longest run of three or more days off (5月 -> ゴールデンウィーク)."""

    def span(y: int) -> tuple[date, date] | None:
        d, best, run = date(y, month, 1), None, None
        while d.month == month:
            if is_day_off(d):
                run = (run[0], d) if run else (d, d)
                if best is None or (run[1] - run[0]) > (best[1] - best[0]):
                    best = run
            else:
                run = None
            d += timedelta(days=1)
        if best is None or (best[1] - best[0]).days < 2:
            return None
        return run_of_days_off(*best)

    return span


# Holiday or customary period -> its span in year y ([start, end), end may fall in y + 1).
HOLIDAYS: dict[str, Callable[[int], tuple[date, date] | None]] = {
    "元日": _fixed(1, 1, 1),
    "正月": _fixed(1, 1, 7),  # 松の内
    "三が日": _fixed(1, 1, 3),
    "年末年始": _fixed(12, 29, 6),
    "大晦日": _fixed(12, 31, 1),
    "ゴールデンウィーク": _golden_week,
    "シルバーウィーク": _silver_week,
    "お盆": _fixed(8, 13, 4),
    "クリスマス": _fixed(12, 24, 2),
    "クリスマスイブ": _fixed(12, 24, 1),
    "バレンタインデー": _fixed(2, 14, 1),
    "ホワイトデー": _fixed(3, 14, 1),
    "ハロウィン": _fixed(10, 31, 1),
    "七夕": _fixed(7, 7, 1),
    "節分": _fixed(2, 3, 1),
    "ひな祭り": _fixed(3, 3, 1),
    "成人の日": _named_holiday("成人の日"),
    "建国記念の日": _named_holiday("建国記念の日"),
    "天皇誕生日": _named_holiday("天皇誕生日"),
    "春分の日": _named_holiday("春分の日"),
    "昭和の日": _named_holiday("昭和の日", "みどりの日"),
    "憲法記念日": _named_holiday("憲法記念日"),
    "みどりの日": _named_holiday("みどりの日"),
    "こどもの日": _named_holiday("こどもの日"),
    "海の日": _named_holiday("海の日"),
    "山の日": _named_holiday("山の日"),
    "敬老の日": _named_holiday("敬老の日"),
    "秋分の日": _named_holiday("秋分の日"),
    "スポーツの日": _named_holiday("スポーツの日", "体育の日"),
    "文化の日": _named_holiday("文化の日"),
    "勤労感謝の日": _named_holiday("勤労感謝の日"),
}
for _m in range(1, 13):
    HOLIDAYS[f"{_m}月の連休"] = _longest_days_off_in(_m)

# How people write them -> the key above (Japanese and English).
HOLIDAY_NAMES: dict[str, str] = {
    "お正月": "正月",
    "正月": "正月",
    "三が日": "三が日",
    "元日": "元日",
    "元旦": "元日",
    "年末年始": "年末年始",
    "大晦日": "大晦日",
    "大みそか": "大晦日",
    "ゴールデンウィーク": "ゴールデンウィーク",
    "ゴールデンウイーク": "ゴールデンウィーク",
    "黄金週間": "ゴールデンウィーク",
    "シルバーウィーク": "シルバーウィーク",
    "シルバーウイーク": "シルバーウィーク",
    "お盆休み": "お盆",
    "盆休み": "お盆",
    "お盆": "お盆",
    "旧盆": "お盆",
    "クリスマスイブ": "クリスマスイブ",
    "クリスマスイヴ": "クリスマスイブ",
    "クリスマス": "クリスマス",
    "バレンタインデー": "バレンタインデー",
    "バレンタイン": "バレンタインデー",
    "ホワイトデー": "ホワイトデー",
    "ハロウィン": "ハロウィン",
    "ハロウィーン": "ハロウィン",
    "七夕": "七夕",
    "節分": "節分",
    "ひな祭り": "ひな祭り",
    "ひなまつり": "ひな祭り",
    "桃の節句": "ひな祭り",
    "成人の日": "成人の日",
    "建国記念の日": "建国記念の日",
    "建国記念日": "建国記念の日",
    "天皇誕生日": "天皇誕生日",
    "春分の日": "春分の日",
    "昭和の日": "昭和の日",
    "憲法記念日": "憲法記念日",
    "みどりの日": "みどりの日",
    "こどもの日": "こどもの日",
    "子供の日": "こどもの日",
    "子どもの日": "こどもの日",
    "海の日": "海の日",
    "山の日": "山の日",
    "敬老の日": "敬老の日",
    "秋分の日": "秋分の日",
    "スポーツの日": "スポーツの日",
    "体育の日": "スポーツの日",
    "文化の日": "文化の日",
    "勤労感謝の日": "勤労感謝の日",
    "gw": "ゴールデンウィーク",
    "christmas eve": "クリスマスイブ",
    "christmas": "クリスマス",
    "xmas": "クリスマス",
    "new year's eve": "大晦日",
    "new years eve": "大晦日",
    "new year's day": "元日",
    "new years day": "元日",
    "new year's": "正月",
    "new year holidays": "正月",
    "golden week": "ゴールデンウィーク",
    "silver week": "シルバーウィーク",
    "obon": "お盆",
    "valentine's day": "バレンタインデー",
    "valentines day": "バレンタインデー",
    "halloween": "ハロウィン",
    "culture day": "文化の日",
    "marine day": "海の日",
    "children's day": "こどもの日",
    "coming of age day": "成人の日",
}


def holiday_span(key: str, y: int) -> tuple[date, date] | None:
    """The holiday's [start, end) in year y, or None when it did not exist that year."""
    try:
        return HOLIDAYS[key](y)
    except (KeyError, ValueError, OverflowError, NotImplementedError):
        return None
