"""The scanner of time expressions: atoms (a year, a month, a weekday, a holiday …) in text.

Each atom is found by one pattern of the table below, most specific first; an atom never
overlaps one found before it (一昨日 is not 昨日, 今年度 is not 今年). `retrieval.analysis.time.expressions`
composes neighbouring atoms into windows.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from typing import Any

from retrieval.analysis.time.calendar_ja import ERA_LETTERS, HOLIDAY_NAMES

LIFE_STAGES = (
    "子供の頃",
    "子どもの頃",
    "幼少期",
    "幼い頃",
    "小学生の頃",
    "小学校の頃",
    "中学生の頃",
    "中学の頃",
    "中学時代",
    "高校生の頃",
    "高校の頃",
    "高校時代",
    "大学生の頃",
    "大学の頃",
    "大学時代",
    "学生時代",
    "院生の頃",
    "新人の頃",
    "新卒の頃",
    "社会人になった頃",
    "前職の頃",
    "前の会社",
    "when i was a child",
    "in high school",
    "in college",
    "at university",
    "as a student",
)

_KANJI_DIGITS = {
    "〇": 0,
    "零": 0,
    "一": 1,
    "二": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}
_KANJI_UNITS = {"十": 10, "百": 100, "千": 1000}
NUM = r"(?:[0-9]+|[〇一二三四五六七八九十百千]+)"

_EN_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "a couple of": 2,
    "couple of": 2,
}
_EN_NUM = (
    r"(?:\d+|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|(?:a )?couple of)"
)
_EN_MONTHS = {
    m: i + 1
    for i, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sept", "sep"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ]
    )
    for m in names
}
_EN_MONTH = r"(?P<mon>" + "|".join(sorted(_EN_MONTHS, key=len, reverse=True)) + r")"
_WEEKDAYS_JA = "月火水木金土日"
_EN_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_EN_SEASONS = {"spring": "春", "summer": "夏", "autumn": "秋", "fall": "秋", "winter": "冬"}
_MODE_EN = {
    "last": "last",
    "past": "last",
    "previous": "last",
    "this": "this",
    "next": "next",
    "coming": "next",
}


def kanji_to_int(s: str) -> int:
    """Parse ASCII digits or kanji numerals (〇-九, 十, 百, 千: 十日, 二十三, 百五十)."""
    if s.isdigit():
        return int(s)
    total, current = 0, 0
    for ch in s:
        if ch in _KANJI_UNITS:
            total += (current or 1) * _KANJI_UNITS[ch]
            current = 0
        else:
            current = current * 10 + _KANJI_DIGITS[ch]
    return total + current


@dataclass(frozen=True)
class Atom:
    kind: str
    start: int
    end: int
    value: Any


Builder = Callable[[re.Match[str]], Any]


def _n(m: re.Match[str], g: str = "n") -> int:
    return kanji_to_int(m[g])


def en_number(word: str) -> int:
    """An English count in digits or words (3, three, a couple of)."""
    w = word.lower().strip()
    return int(w) if w.isdigit() else _EN_NUMBERS[w]


def _era(m: re.Match[str]) -> tuple[str, Any]:
    era = m["era"] if m["era"] else ERA_LETTERS[m["el"].upper()]
    n = 1 if m["en"] == "元" else kanji_to_int(m["en"])
    return "era", (era, n)


def _date(m: re.Match[str]) -> date:
    return date(int(m["y"]), int(m["mo"]), int(m["d"]))


def _month_abs(m: re.Match[str], mode: str = "past") -> tuple[str, Any]:
    mo = _n(m, "mo")
    if not 1 <= mo <= 12:
        raise ValueError("no such month")
    return "abs", (mo, mode)


def _en_month(m: re.Match[str]) -> tuple[str, Any] | date | None:
    word = m["mon"].lower()
    mo = _EN_MONTHS[word]
    before = m.string[max(0, m.start() - 12) : m.start()].lower()
    day = m["d"] or m["d0"]
    cue = (  # a day before a lower-case "may" is no cue: "we 2 may go"
        m["mod"]
        or m["d"]
        or m["y"]
        or re.search(r"(in|of|early|mid|late|end of|beginning of|start of)\W*$", before)
    )
    if (
        word in ("may", "mar", "march", "jan", "dec", "oct", "sept", "sep", "jun", "aug")
        and not cue
        and m["mon"].islower()
    ):
        return None  # "may", "march": a verb more often than a month
    if m["y"] and day:
        return date(int(m["y"]), mo, int(day))
    if day:
        return ("md", (mo, int(day)))
    if m["y"]:
        return "ym", (int(m["y"]), mo)
    return "abs", (mo, _MODE_EN.get((m["mod"] or "").lower(), "past"))


_HOLIDAY_JA = "|".join(sorted((k for k in HOLIDAY_NAMES if not k.isascii()), key=len, reverse=True))
_HOLIDAY_EN = "|".join(
    re.escape(k) for k in sorted((k for k in HOLIDAY_NAMES if k.isascii()), key=len, reverse=True)
)

# (kind, pattern, value builder); the first table row that matches a stretch of text owns it.
_TABLE: list[tuple[str, str, Builder]] = [
    ("date", r"(?<![0-9])(?P<y>\d{4})[-/年.](?P<mo>\d{1,2})[-/月.](?P<d>\d{1,2})日?", _date),
    (
        "fy",
        r"(?:(?P<y>(?<![0-9])\d{4})|(?P<era>令和|平成|昭和|大正|明治)(?P<en>元|"
        + NUM
        + r")|(?<![A-Za-z])(?P<el>[RHSrhs])(?P<eln>\d{1,2}))年度",
        lambda m: ("abs", int(m["y"]) if m["y"] else _fy_of_era(m)),
    ),
    (
        "fy",
        r"(?P<w>前々年度|再来年度|今年度|本年度|前年度|昨年度|来年度|翌年度)",
        lambda m: (
            "rel",
            {
                "前々年度": -2,
                "再来年度": 2,
                "今年度": 0,
                "本年度": 0,
                "前年度": -1,
                "昨年度": -1,
                "来年度": 1,
                "翌年度": 1,
            }[m["w"]],
        ),
    ),
    (
        "fy",
        r"(?i)\b(?:FY|fiscal year|fiscal)\s?'?(?P<y>\d{4}|\d{2})\b",
        lambda m: ("abs", int(m["y"]) if len(m["y"]) == 4 else 2000 + int(m["y"])),
    ),
    (
        "fy",
        r"(?i)\b(?P<w>this|last|next|previous) fiscal year\b",
        lambda m: ("rel", {"this": 0, "last": -1, "previous": -1, "next": 1}[m["w"].lower()]),
    ),
    (
        "holiday",
        r"(?P<mo>" + NUM + r")月の(?:大型)?連休",
        lambda m: (f"{_n(m, 'mo')}月の連休", "past"),
    ),
    ("holiday", r"(?P<h>" + _HOLIDAY_JA + r")", lambda m: (HOLIDAY_NAMES[m["h"]], "past")),
    (
        "holiday",
        r"(?i)(?<![A-Za-z])(?:(?P<mod>last|this|next)\s+)?(?P<h>" + _HOLIDAY_EN + r")(?![A-Za-z])",
        lambda m: (HOLIDAY_NAMES[m["h"].lower()], _MODE_EN.get((m["mod"] or "").lower(), "past")),
    ),
    ("fypart", r"年度末", lambda m: "end"),
    ("fypart", r"年度(?:初め|始め|はじめ)", lambda m: "begin"),
    ("dayrel", r"一昨日|おととい|おとつい|(?i:the day before yesterday)", lambda m: -2),
    ("dayrel", r"明後日|あさって|(?i:the day after tomorrow)", lambda m: 2),
    ("dayrel", r"昨日|きのう|昨夜|昨晩|(?i:\byesterday\b|\blast night\b)", lambda m: -1),
    (
        "dayrel",
        r"今日|本日|きょう|今朝|今夜|今晩|(?i:\btoday\b|\btonight\b|\bthis (?:morning|afternoon|evening)\b)",
        lambda m: 0,
    ),
    ("dayrel", r"明日|あした|(?i:\btomorrow\b)", lambda m: 1),
    (
        "year",
        r"(?P<w>一昨年|おととし|再来年|去年|昨年|今年|本年|来年)(?!度)",
        lambda m: (
            "rel",
            {
                "一昨年": -2,
                "おととし": -2,
                "再来年": 2,
                "去年": -1,
                "昨年": -1,
                "今年": 0,
                "本年": 0,
                "来年": 1,
            }[m["w"]],
        ),
    ),
    ("year", r"(?i)\bthe year before last\b", lambda m: ("rel", -2)),
    (
        "year",
        r"(?i)\b(?P<w>this|last|next) year\b",
        lambda m: ("rel", {"this": 0, "last": -1, "next": 1}[m["w"].lower()]),
    ),
    (
        "year",
        r"(?:(?P<era>令和|平成|昭和|大正|明治)|(?<![A-Za-z])(?P<el>[RHS]))(?P<en>元|"
        + NUM
        + r")年(?!度|代|間|生|前|後|ぶり)",
        _era,
    ),
    (
        "year",
        r"(?<![0-9])(?P<y>\d{4})年(?!代|間|生|度|前|後|ぶり|目)",
        lambda m: ("abs", int(m["y"])),
    ),
    ("ago", r"(?P<n>" + NUM + r")年半前", lambda m: ("month", 12 * _n(m) + 6)),
    ("ago", r"半年前|(?i:\bhalf a year ago\b)", lambda m: ("month", 6)),
    ("ago", r"(?i)\b(?P<n>a|one) year and a half ago\b", lambda m: ("month", 18)),
    (
        "ago",
        r"(?P<n>" + NUM + r")\s*(?:か|カ|ヶ|ケ|ヵ|箇)月(?P<h>半)?前",
        lambda m: ("month", _n(m) + (0.5 if m["h"] else 0)),
    ),
    ("year", r"(?P<n>" + NUM + r")\s*年前", lambda m: ("ago", _n(m))),
    ("ago", r"(?P<n>" + NUM + r")\s*週間?前", lambda m: ("week", _n(m))),
    ("ago", r"(?P<n>" + NUM + r")\s*日前", lambda m: ("day", _n(m))),
    (
        "ago",
        r"(?i)\b(?P<n>" + _EN_NUM + r")\s+(?P<u>day|week|month)s?\s+ago\b",
        lambda m: (m["u"].lower(), en_number(m["n"])),
    ),
    (
        "year",
        r"(?i)\b(?P<n>" + _EN_NUM + r")\s+years?\s+ago\b",
        lambda m: ("ago", en_number(m["n"])),
    ),
    ("few", r"数日前|(?i:\ba few days ago\b)", lambda m: (0, 5, "few_days_ago")),
    ("few", r"数週間前|(?i:\ba few weeks ago\b)", lambda m: (10, 35, "few_weeks_ago")),
    (
        "few",
        r"数(?:か|カ|ヶ|ケ)月前|(?i:\ba few months ago\b)",
        lambda m: (45, 150, "few_months_ago"),
    ),
    (
        "weekday",
        # A habit (毎週土曜日, 隔週の日曜) names no day to search in.
        r"(?<!毎週)(?<!毎週の)(?<!隔週)(?<!隔週の)(?<!毎)"
        r"(?P<mod>この前の|こないだの|この間の|前の|直近の|今度の|次の)?(?P<wd>["
        + _WEEKDAYS_JA
        + r"])曜(?:日)?(?!ごと|毎)",
        lambda m: (
            _WEEKDAYS_JA.index(m["wd"]),
            {"今度の": "next", "次の": "next"}.get(m["mod"] or "", "last" if m["mod"] else "past"),
        ),
    ),
    (
        "weekday",
        # A habit ("on Sundays", "every Sunday") names no day to search in.
        r"(?i)(?<!every )(?<!each )\b(?:(?P<mod>last|this|next|past|coming|on)\s+)?(?P<wd>"
        + "|".join(_EN_WEEKDAYS)
        + r")\b",
        lambda m: (
            _EN_WEEKDAYS.index(m["wd"].lower()),
            _MODE_EN.get((m["mod"] or "").lower(), "past"),
        ),
    ),
    ("week", r"先々週|(?i:\bthe week before last\b)", lambda m: -2),
    ("week", r"再来週|(?i:\bthe week after next\b)", lambda m: 2),
    ("week", r"先週|(?i:\blast week\b)", lambda m: -1),
    ("week", r"今週|(?i:\bthis week\b)", lambda m: 0),
    ("week", r"来週|(?i:\bnext week\b)", lambda m: 1),
    (
        "weekend",
        r"週末|(?i:\b(?:(?P<mod>last|this|next) |the )?weekend\b)",
        # "the weekend" alone: the latest (or, told of what is to come, the next)
        lambda m: _MODE_EN.get((m["mod"] or "").lower(), "bare"),
    ),
    ("month", r"先々月|(?i:\bthe month before last\b)", lambda m: ("rel", -2)),
    ("month", r"再来月", lambda m: ("rel", 2)),
    ("month", r"先月|(?i:\blast month\b)", lambda m: ("rel", -1)),
    ("month", r"今月|(?i:\bthis month\b)", lambda m: ("rel", 0)),
    ("month", r"来月|(?i:\bnext month\b)", lambda m: ("rel", 1)),
    ("month", r"(?<![0-9])(?P<mo>" + NUM + r")月(?!曜|額|間|給|謝|刊|号|収|賦|々)", _month_abs),
    (
        "month",
        r"(?i)\b(?:(?P<mod>last|this|next|in)\s+)?"
        # 9 November 2022, the 9th of November: the day before the month, as British English
        # and LoCoMo's session dates write it.
        # (LoCoMo's answers also run them together: 24June, 2022.)
        + r"(?:(?:the\s+)?(?P<d0>\d{1,2})(?:st|nd|rd|th)?\s*(?:of\s+)?)?"
        + _EN_MONTH
        + r"\.?(?:\s+(?P<d>\d{1,2})(?:st|nd|rd|th)?)?(?:,?\s+(?:of\s+)?(?P<y>\d{4}))?\b",
        _en_month,
    ),
    (
        "part_en",
        r"(?i)\b(?:(?P<w>early|mid|late)[\s-]+|(?:the )?(?P<x>beginning|start|end|middle) of (?:the )?)",
        lambda m: (
            m["w"]
            or {"beginning": "begin", "start": "begin", "end": "end", "middle": "mid"}[m["x"]]
        ).lower(),
    ),
    ("yearpart", r"年末|年の瀬|年の暮れ", lambda m: "end"),
    ("yearpart", r"年明け|年始|年初|年の初め|年のはじめ", lambda m: "begin"),
    ("part", r"上旬|初旬", lambda m: "上旬"),
    ("part", r"中旬|半ば", lambda m: "中旬"),
    ("part", r"下旬", lambda m: "下旬"),
    ("part", r"月初め|月初|月頭|月のはじめ|月の初め", lambda m: "month_begin"),
    ("part", r"月末|月の終わり|月の末", lambda m: "month_end"),
    ("part", r"末|暮れ|終わり", lambda m: "end"),
    ("part", r"初め(?!て)|頭(?=に|の|から)", lambda m: "begin"),
    (
        "day",
        r"(?<![0-9])(?P<d>" + NUM + r")日(?!間|前|後|目|本|曜|中|分|付|連続|おき|ぶり)",
        lambda m: _n(m, "d") if 1 <= _n(m, "d") <= 31 else None,
    ),
    (
        "md",
        r"(?<![0-9/.-])(?P<mo>\d{1,2})/(?P<d>\d{1,2})(?![0-9/])",
        lambda m: (int(m["mo"]), int(m["d"])),
    ),
    (
        "month",
        r"(?<![0-9])(?P<y>\d{4})[-/](?P<mo>\d{1,2})(?![0-9/-])",
        lambda m: ("ym", (int(m["y"]), int(m["mo"]))),
    ),
    (
        "season",
        r"(?<![一-龯])(?P<s>[春夏秋冬])(?=休み|場|先|頃|ごろ|以[降後前来]|から|まで|より|[にのはもをごく、。,.\s]|$)",
        lambda m: (m["s"], "past"),
    ),
    (
        "season",
        r"(?i)\b(?:(?P<mod>last|this|next|in the|the)\s+)?(?P<s>spring|summer|autumn|fall|winter)"
        r"(?:\s+(?:of\s+)?(?P<y>\d{4}))?\b",
        lambda m: _en_season(m),
    ),
    ("year", r"(?i)\b(?:in|of|during) (?P<y>\d{4})\b", lambda m: ("abs", int(m["y"]))),
    (  # a year after a bound's word (since 2025, before 2023) or ending a range (2020 to 2023):
        # the year alone; the bound's words are read by retrieval.analysis.time.bounds
        "year",
        r"(?i)(?:"
        + "|".join(
            f"(?<={w} )"
            for w in (
                "since",
                "before",
                "after",
                "until",
                "till",
                "from",
                "through",
                "between",
                "prior to",
            )
        )
        + r"|(?<=\d{4} to )|(?<=\d{4} and ))(?P<y>(?:19|20|21)\d\d)\b",
        lambda m: ("abs", int(m["y"])),
    ),
    (
        "nowish",
        r"今頃|今ごろ|この時期|同じ頃|同じ時期|(?i:\bthis time of (?:the )?year\b|\baround this time\b)",
        lambda m: True,
    ),
    (
        "recent",
        r"最近|近頃|この頃|このごろ|先日|この前|こないだ|この間"
        r"|(?i:\brecently\b|\blately\b|\bthese days\b|\bthe other day\b)",
        lambda m: True,
    ),
    ("fuzzy", r"頃|ごろ|くらい|ぐらい|前後|あたり|辺り|(?i:\bor so\b)", lambda m: True),
    (
        "fuzzy_pre",
        r"約|およそ|おおよそ|大体|だいたい|(?i:\b(?:around|about|approximately|roughly|circa|sometime around)\b)",
        lambda m: True,
    ),
]


def _fy_of_era(m: re.Match[str]) -> int:
    if m["era"]:
        era, n = m["era"], m["en"]
    else:
        era, n = ERA_LETTERS[m["el"].upper()], m["eln"]
    from retrieval.analysis.time.calendar_ja import era_year

    span = era_year(era, 1 if n == "元" else kanji_to_int(n))
    if span is None:
        raise ValueError("no such era year")
    return span[0].year


def _en_season(m: re.Match[str]) -> Any:
    word = m["s"].lower()
    mod = (m["mod"] or "").lower()
    if word == "fall" and not (mod in ("last", "this", "next", "in the") or m["y"]):
        return None  # "fall" the verb, "the fall of Rome"
    mode: Any = int(m["y"]) if m["y"] else _MODE_EN.get(mod, "past")
    return _EN_SEASONS[word], mode


_COMPILED = [(kind, re.compile(p), fn) for kind, p, fn in _TABLE]


# A run of numerals longer than any number a time expression holds. The patterns start a number
# anywhere, so inside a run of n digits each start reads the rest of it: n² steps (a query of
# 4,000 digits took 2.6 s). Such runs are masked, same length, before the scan: linear.
_LONG_NUMERAL_RUN = re.compile(r"[0-9〇一二三四五六七八九十百千]{13,}")


def scan(text: str) -> list[Atom]:
    """Every atom of text, in text order; a stretch of text belongs to one atom at most."""
    text = _LONG_NUMERAL_RUN.sub(lambda m: "_" * len(m.group()), text)
    taken = bytearray(len(text))  # 1 where an atom already holds the character
    atoms: list[Atom] = []
    for kind, pattern, build in _COMPILED:
        for m in pattern.finditer(text):
            s, e = m.span()
            if s == e or any(taken[s:e]):
                continue
            try:
                value = build(m)
            except (ValueError, KeyError, OverflowError):
                value = None
            if value is None:
                continue
            if kind == "month" and isinstance(value, date):
                kind_, value_ = "date", value
            elif kind == "month" and isinstance(value, tuple) and value[0] == "md":
                kind_, value_ = "md", value[1]
            else:
                kind_, value_ = kind, value
            taken[s:e] = b"\x01" * (e - s)
            atoms.append(Atom(kind_, s, e, value_))
    atoms.sort(key=lambda a: a.start)
    return atoms
