"""Time expressions, Japanese and English, resolved against a fixed now (a Sunday)."""

import json
from datetime import date, datetime, timedelta
from pathlib import Path

import pytest

from retrieval.analysis.time.expressions import kanji_to_int, parse_time, strip_spans
from retrieval.models import Granularity
from tests.helpers import covers, dev_case_ok, shared_file

NOW = datetime.fromisoformat("2026-11-22T12:00:00+09:00")


def days(text: str, recent_days: int = 14):
    r = parse_time(text, NOW, "Asia/Tokyo", recent_days).range
    assert r is not None, text
    return r.start.date(), r.end.date(), r.relative


@pytest.mark.parametrize(
    "text,start,end,relative",
    [
        ("今日の予定", date(2026, 11, 22), date(2026, 11, 23), "today"),
        ("昨日の会議", date(2026, 11, 21), date(2026, 11, 22), "yesterday"),
        ("一昨日の打ち合わせ", date(2026, 11, 20), date(2026, 11, 21), "day_before_yesterday"),
        ("おとといの話", date(2026, 11, 20), date(2026, 11, 21), "day_before_yesterday"),
        ("3日前に読んだ", date(2026, 11, 19), date(2026, 11, 20), "3_days_ago"),
        ("三日前の夕飯", date(2026, 11, 19), date(2026, 11, 20), "3_days_ago"),
        ("今週やったこと", date(2026, 11, 16), date(2026, 11, 23), "this_week"),
        ("先週のIntent", date(2026, 11, 9), date(2026, 11, 16), "last_week"),
        ("来週の予定", date(2026, 11, 23), date(2026, 11, 30), "next_week"),
        ("先々週の件", date(2026, 11, 2), date(2026, 11, 9), "week_before_last"),
        ("今月の振り返り", date(2026, 11, 1), date(2026, 12, 1), "this_month"),
        ("先月の支出", date(2026, 10, 1), date(2026, 11, 1), "last_month"),
        ("今年の目標", date(2026, 1, 1), date(2027, 1, 1), "this_year"),
        ("去年の旅行", date(2025, 1, 1), date(2026, 1, 1), "last_year"),
        ("昨年の旅行", date(2025, 1, 1), date(2026, 1, 1), "last_year"),
        ("2025年1月の記憶", date(2025, 1, 1), date(2025, 2, 1), None),
        ("2024年2月29日", date(2024, 2, 29), date(2024, 3, 1), None),
        ("2025-03-04の件", date(2025, 3, 4), date(2025, 3, 5), None),
        ("2024年の夏", date(2024, 6, 1), date(2024, 9, 1), None),
        ("2022年の冬休み", date(2022, 12, 1), date(2023, 3, 1), None),
        ("昨年の4月に引っ越した", date(2025, 4, 1), date(2025, 5, 1), None),
        ("3月の会議", date(2026, 3, 1), date(2026, 4, 1), None),
        ("12月の会議", date(2025, 12, 1), date(2026, 1, 1), None),
        ("today", date(2026, 11, 22), date(2026, 11, 23), "today"),
        ("notes from yesterday", date(2026, 11, 21), date(2026, 11, 22), "yesterday"),
        ("what did I do last week", date(2026, 11, 9), date(2026, 11, 16), "last_week"),
        ("5 days ago", date(2026, 11, 17), date(2026, 11, 18), "5_days_ago"),
        ("in March 2025", date(2025, 3, 1), date(2025, 4, 1), None),
        ("last month", date(2026, 10, 1), date(2026, 11, 1), "last_month"),
        ("summer of 2024", date(2024, 6, 1), date(2024, 9, 1), None),
    ],
)
def test_ranges(text, start, end, relative):
    assert days(text) == (start, end, relative)


def test_weeks_ago_is_a_window_around_that_day():
    s, e, rel = days("1週間前に読んだ本")
    assert s <= date(2026, 11, 15) < e and rel == "1_weeks_ago"
    assert date(2026, 10, 1) < s


def test_recent_window_is_configurable():
    s, e, rel = days("最近の体調", recent_days=30)
    assert rel == "recent" and s == date(2026, 10, 23) and e == date(2026, 11, 23)


def test_life_stage_is_a_hint_not_a_range():
    tp = parse_time("高校の頃の友達", NOW)
    assert tp.range is None and tp.hints == ["高校の頃"]


def test_year_is_also_kept_as_a_hint():
    tp = parse_time("1980年に起きた事件", NOW)
    assert "1980" in tp.hints and tp.range.start.year == 1980


def test_no_time_words():
    assert parse_time("ベクトル検索とキーワード検索の違い", NOW).range is None


def test_invalid_dates_are_ignored():
    assert parse_time("2025年2月30日", NOW).range.start.date() == date(2025, 2, 1)


def test_monday_first_weeks_on_a_monday():
    monday = datetime.fromisoformat("2026-11-16T09:00:00+09:00")
    r = parse_time("今週", monday).range
    assert r.start.date() == date(2026, 11, 16)


def test_strip_spans_and_kanji_numbers():
    assert strip_spans("先週のIntent", [(0, 2)]) == "  のIntent"
    assert kanji_to_int("十二") == 12 and kanji_to_int("二十") == 20 and kanji_to_int("7") == 7


def _cases(path):
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


CASES = Path(__file__).parents[2] / "data" / "time_cases.jsonl"


@pytest.mark.parametrize("case", _cases(CASES), ids=lambda c: c["q"])
def test_every_kind_of_expression(case):
    """Our own set, one or more sentences per kind (eras, fiscal years, holidays, weekdays,
    parts of months and years, relative compounds, dates without a year, English, false
    friends, fuzzy), with other dates and other `now`s than the shared dev set."""
    tr = parse_time(case["q"], datetime.fromisoformat(case["now"])).range
    if case.get("none"):
        assert tr is None
        return
    assert tr is not None
    assert all(covers(tr, d) for d in case.get("covers", [])), (tr.start, tr.end)
    assert not any(covers(tr, d) for d in case.get("excludes", [])), (tr.start, tr.end)
    assert tr.fuzzy == bool(case.get("fuzzy"))


def test_time_dev_set_accuracy(analyzer):
    """shared/eval/analyzer_time_dev.jsonl: windows as people say them; prints the accuracy."""
    path = shared_file("eval", "analyzer_time_dev.jsonl")
    if not path.exists():
        pytest.skip("shared/eval not present")
    cases = _cases(path)
    ok = sum(dev_case_ok(analyzer, c, NOW) for c in cases)
    print(f"analyzer time dev accuracy: {ok}/{len(cases)}")
    assert ok / len(cases) >= 0.95


@pytest.mark.parametrize(
    "year,day",
    [
        (2024, date(2024, 7, 15)),
        (2025, date(2025, 7, 21)),
        (2026, date(2026, 7, 20)),
        (2030, date(2030, 7, 15)),
    ],
)
def test_umi_no_hi_moves_with_the_calendar(year, day):
    """海の日 is the third Monday of July: from the kept holiday library, not a table."""
    r = parse_time(f"{year}年の海の日", NOW).range
    assert (r.start.date(), r.end.date(), r.granularity) == (
        day,
        day + timedelta(days=1),
        Granularity.HOLIDAY,
    )


@pytest.mark.parametrize(
    "text,start,end",
    [
        ("昭和64年", date(1989, 1, 1), date(1989, 1, 8)),
        ("平成元年", date(1989, 1, 8), date(1990, 1, 1)),
        ("平成31年", date(2019, 1, 1), date(2019, 5, 1)),
        ("令和元年", date(2019, 5, 1), date(2020, 1, 1)),
        ("令和五年度", date(2023, 4, 1), date(2024, 4, 1)),
        ("H30年", date(2018, 1, 1), date(2019, 1, 1)),
    ],
)
def test_era_years_are_clipped_to_the_era(text, start, end):
    r = parse_time(text, NOW).range
    assert (r.start.date(), r.end.date()) == (start, end)


def test_fuzzy_expressions_get_soft_edges_by_granularity():
    week = parse_time("先週頃の話", NOW).range
    assert week.fuzzy and week.granularity == Granularity.WEEK
    assert (week.start.date(), week.end.date()) == (date(2026, 11, 9), date(2026, 11, 16))
    assert (week.outer_start.date(), week.outer_end.date()) == (
        date(2026, 11, 6),
        date(2026, 11, 19),
    )
    year = parse_time("about three years ago", NOW).range
    assert year.granularity == Granularity.YEAR and (year.start - year.outer_start).days == 30
    assert not parse_time("先週の話", NOW).range.fuzzy


def test_dates_without_a_year_are_the_latest_begun():
    """11月3日 on 2026-11-22: this year's; 12月24日: last year's (not yet this year)."""
    assert parse_time("11月3日", NOW).range.start.date() == date(2026, 11, 3)
    assert parse_time("12月24日", NOW).range.start.date() == date(2025, 12, 24)
    assert parse_time("来年の12月24日", NOW).range.start.date() == date(2027, 12, 24)


@pytest.mark.parametrize(
    "text,start,end",
    [
        ("on 9 November, 2022", date(2022, 11, 9), date(2022, 11, 10)),
        ("the 9th of November 2022", date(2022, 11, 9), date(2022, 11, 10)),
        ("on 3 June", date(2026, 6, 3), date(2026, 6, 4)),
        ("November 9, 2022", date(2022, 11, 9), date(2022, 11, 10)),
    ],
)
def test_english_dates_with_the_day_first(text, start, end):
    assert days(text)[:2] == (start, end)


def test_a_lower_case_may_after_a_number_is_no_date():
    assert parse_time("we 2 may go", NOW).range is None


@pytest.mark.parametrize(
    "text,start,end",
    [
        # last Friday counted from 23 January 2022 (a Sunday) is the 21st; told on the 23rd.
        (
            "What did Joanna finish last Friday on 23 January, 2022?",
            date(2022, 1, 21),
            date(2022, 1, 24),
        ),
        ("the Sunday before October 25, 2022", date(2022, 10, 23), date(2022, 10, 26)),
        ("recently, as mentioned on 3 June, 2023", date(2023, 5, 20), date(2023, 6, 4)),
        ("2023年6月3日に最近始めたこと", date(2023, 5, 20), date(2023, 6, 4)),
        ("最近、2023年5月に作ったケーキ", date(2023, 5, 1), date(2023, 6, 1)),
    ],
)
def test_a_stated_date_anchors_the_words_that_count_from_now(text, start, end):
    r = parse_time(text, NOW, "Asia/Tokyo", 14).range
    assert (r.start.date(), r.end.date()) == (start, end)
    assert r.relative is None and r.granularity == Granularity.SPAN


def test_without_a_stated_date_the_first_expression_counts_from_now():
    assert days("先週の会議と昨日のメモ") == (date(2026, 11, 9), date(2026, 11, 16), "last_week")
    assert days("11月3日の最近の話")[:2] == (date(2026, 11, 3), date(2026, 11, 4))


@pytest.mark.parametrize(
    "text",
    [
        "What does the assistant do on Sundays?",
        "What do I do every Saturday?",
        "Where do we go each Friday?",
        "毎週土曜日は何をしている？",
        "隔週の日曜に何をしている？",
        "毎土曜日のジム",
        "日曜ごとに何をしている？",
    ],
)
def test_a_habit_is_no_window(text):
    """A day said as a habit ("on Sundays", 毎週土曜日) names no day to search in."""
    assert parse_time(text, NOW).range is None


def test_one_day_is_still_a_window():
    assert parse_time("What did I do on Sunday?", NOW).range is not None
    assert parse_time("土曜日に何をした？", NOW).range is not None


# (question, asked at) -> the day its weekday names.
WEEKDAYS_TOLD = {
    # Asked on a Saturday evening: a past-tense "on Saturday" is a week ago, not today.
    ("Did I win at tennis on Saturday?", "2026-11-21T20:00"): "2026-11-14",
    ("What happened on Wednesday?", "2026-11-18T20:00"): "2026-11-11",
    ("水曜日に何があった？", "2026-11-18T20:00"): "2026-11-11",
    ("土曜日のテニスは勝ったっけ？", "2026-11-21T20:00"): "2026-11-14",
    # Asked on another day: the latest such day, as before.
    ("Did I win at tennis on Saturday?", "2026-11-23T20:00"): "2026-11-21",
    ("水曜日に何があった？", "2026-11-20T20:00"): "2026-11-18",
    # Nothing past: the latest one, today included.
    ("水曜日の予定は？", "2026-11-18T20:00"): "2026-11-18",
    ("What is on Wednesday?", "2026-11-18T20:00"): "2026-11-18",
}


@pytest.mark.parametrize(("asked", "day"), WEEKDAYS_TOLD.items())
def test_a_weekday_told_in_the_past_is_the_last_before_today(analyzer, asked, day):
    question, at = asked
    got = analyzer.analyze(question, datetime.fromisoformat(at + ":00+09:00")).time_range
    assert got is not None and got.start.date().isoformat() == day, (question, got)


@pytest.mark.parametrize(
    ("text", "now", "day"),
    [
        # a day of the month alone: the latest such day, today included
        ("What did I buy on the 28th?", "2026-02-16T10:00:00+09:00", date(2026, 1, 28)),
        ("15日に何をした？", "2026-02-16T10:00:00+09:00", date(2026, 2, 15)),
        ("16日に何があった？", "2026-02-16T10:00:00+09:00", date(2026, 2, 16)),
        ("What did I do on the 31st?", "2026-03-10T10:00:00+09:00", date(2026, 1, 31)),
        # asked of what is to come: the next
        ("What is planned for the 20th?", "2026-02-16T10:00:00+09:00", date(2026, 2, 20)),
        ("20日の予定は？", "2026-02-21T10:00:00+09:00", date(2026, 3, 20)),
    ],
)
def test_a_day_of_the_month_alone_is_a_day(text, now, day):
    from retrieval.analysis.tense import told_in_the_past

    r = parse_time(text, datetime.fromisoformat(now), past=told_in_the_past(text)).range
    assert r is not None and (r.start.date(), r.end.date()) == (day, day + timedelta(days=1))
