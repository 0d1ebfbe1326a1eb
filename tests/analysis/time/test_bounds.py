"""Windows open on one side and from–to ranges, against a fixed now (Sunday 2026-11-22)."""

from datetime import date, datetime

import pytest

from retrieval.analysis.time.expressions import parse_time, strip_spans

NOW = datetime.fromisoformat("2026-11-22T12:00:00+09:00")


def edges(text: str, now: datetime = NOW):
    r = parse_time(text, now).range
    assert r is not None, text
    return (r.start.date() if r.start else None), (r.end.date() if r.end else None)


@pytest.mark.parametrize(
    "text,start,end",
    [
        # Japanese: X is inside the window (以降, 以後, から, まで, 以前); より前/より後 exclude it
        ("9月以降の旅行", date(2026, 9, 1), None),
        ("8月以後のランニング", date(2026, 8, 1), None),
        ("先週から飲んでいる薬", date(2026, 11, 9), None),
        ("今年になってから観た映画", date(2026, 1, 1), None),
        ("今月15日以降の打ち合わせ", date(2026, 11, 15), None),
        ("去年の春以降の体調", date(2025, 3, 1), None),
        ("7月までの残業時間", None, date(2026, 8, 1)),
        ("先月末までに払った税金", None, date(2026, 11, 1)),
        ("2023年以前の写真", None, date(2024, 1, 1)),
        ("2024年より前の引っ越し", None, date(2024, 1, 1)),
        ("2024年より後の引っ越し", date(2025, 1, 1), None),
        ("6月から8月までのアルバイト", date(2026, 6, 1), date(2026, 9, 1)),
        ("6月〜8月の旅行", date(2026, 6, 1), date(2026, 9, 1)),
        ("去年の12月から今までの体重", date(2025, 12, 1), None),
        # English: after and before exclude X; since, until, up to include it
        ("trips since September", date(2026, 9, 1), None),
        ("runs since 2025", date(2025, 1, 1), None),
        ("photos before 2023", None, date(2023, 1, 1)),
        ("apartments prior to 2021", None, date(2021, 1, 1)),
        ("meetings after October", date(2026, 11, 1), None),
        ("what did I do after the summer of 2025?", date(2025, 9, 1), None),
        ("doctor visits before last year", None, date(2025, 1, 1)),
        ("overtime until the end of July", None, date(2026, 8, 1)),
        ("tax payments up to yesterday", None, date(2026, 11, 22)),
        ("workouts from February on", date(2026, 2, 1), None),
        ("expenses this year so far", date(2026, 1, 1), None),
        ("so far this year, how much did I spend", date(2026, 1, 1), None),
        ("everything since the beginning of last month", date(2026, 10, 1), None),
        ("my part-time job from May to August", date(2026, 5, 1), date(2026, 9, 1)),
        ("between 2019 and 2021", date(2019, 1, 1), date(2022, 1, 1)),
    ],
)
def test_bounds_open_one_side_or_join_a_range(text, start, end):
    assert edges(text) == (start, end)


def test_the_year_of_a_bound_comes_from_now():
    # asked in March 2027, 11月 is November 2026 (the latest begun), as everywhere else
    assert edges("11月以降の支出", datetime.fromisoformat("2027-03-15T12:00:00+09:00")) == (
        date(2026, 11, 1),
        None,
    )


def test_a_range_end_without_a_year_follows_its_start():
    assert edges("1942年7月22日から9月10日にかけての作戦") == (date(1942, 7, 22), date(1942, 9, 11))
    # 12月から3月まで asked in February: December of last year to March of this one
    feb = datetime.fromisoformat("2027-02-10T12:00:00+09:00")
    assert edges("12月から3月までの冬の記録", feb) == (date(2026, 12, 1), date(2027, 4, 1))
    # An end in the start's own month is that month's, not the next year's (it was 2027-08-16).
    assert edges("8月11日から8月15日の間に何をした？") == (date(2026, 8, 11), date(2026, 8, 16))
    assert edges("7月22日から7月30日まで") == (date(2026, 7, 22), date(2026, 7, 31))
    assert edges("between August 11 and August 15") == (date(2026, 8, 11), date(2026, 8, 16))


@pytest.mark.parametrize(
    "text,start,end",
    [
        # words that are not a bound of the expression beside them leave its window whole
        ("the photos from March", date(2026, 3, 1), date(2026, 4, 1)),
        ("photos from 2019", date(2019, 1, 1), date(2020, 1, 1)),
    ],
)
def test_words_that_are_not_bounds_change_nothing(text, start, end):
    assert edges(text) == (start, end)


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        # a time counted back from a date: the days before it, not the date
        ("What did John do the week before August 3, 2023?", date(2023, 7, 27), date(2023, 8, 3)),
        ("the weekend before 17 July 2023", date(2023, 7, 15), date(2023, 7, 17)),
        ("two weeks before 11 August 2023", date(2023, 7, 25), date(2023, 8, 1)),
        ("3 days before 16 November 2025", date(2025, 11, 13), date(2025, 11, 14)),
        ("2023年8月3日の前の週に何をした？", date(2023, 7, 27), date(2023, 8, 3)),
        ("2023年7月17日の前の週末", date(2023, 7, 15), date(2023, 7, 17)),
        ("2023年8月11日の2週間前", date(2023, 7, 25), date(2023, 8, 1)),
        ("the weekend of 24 June 2022", date(2022, 6, 25), date(2022, 6, 27)),
        ("the weekend after 3 June 2022", date(2022, 6, 4), date(2022, 6, 6)),
        ("two weekends before 17 July 2023", date(2023, 7, 8), date(2023, 7, 10)),
        ("the week of 7 June 2023", date(2023, 6, 5), date(2023, 6, 12)),
        ("The weekend after 3June, 2022.", date(2022, 6, 4), date(2022, 6, 6)),
        # the nth week of a month: its nth seven days
        ("in the second week of November 2025", date(2025, 11, 8), date(2025, 11, 15)),
        ("2025年11月の第2週", date(2025, 11, 8), date(2025, 11, 15)),
    ],
)
def test_a_time_counted_from_a_date_is_its_own_window(text, start, end):
    assert edges(text) == (start, end)


def test_no_time_no_window():
    for text in ("駅から歩いた", "up to 2000 yen", "since I moved", "I went to 2023 Expo"):
        assert parse_time(text, NOW).range is None, text


def test_the_bound_words_are_time_words_not_keywords():
    tp = parse_time("9月以降の旅行", NOW)
    assert strip_spans("9月以降の旅行", tp.spans).strip() == "の旅行"
    assert tp.range.text == "9月以降"
    tp = parse_time("trips since September", NOW)
    assert strip_spans("trips since September", tp.spans).strip() == "trips"
