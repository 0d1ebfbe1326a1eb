"""The analyzer never raises: property tests over arbitrary text and the analyzer's own cue words."""

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retrieval.analysis.time.expressions import parse_time
from retrieval.models import TIME_MAX, TIME_MIN
from tests.helpers import UNHOLDABLE_DATES

NOW = datetime.fromisoformat("2026-11-22T12:00:00+09:00")

# Words the time rules and the cue dictionary react to, numbers of every size, and the glue
# between them: random sentences made of these reach the rules' corners far more often than
# random Unicode does.
CUES = [
    "先週",
    "先々週",
    "今週",
    "来週",
    "先月",
    "先々月",
    "今月",
    "来月",
    "今年",
    "去年",
    "昨年",
    "一昨年",
    "来年",
    "昨日",
    "一昨日",
    "おととい",
    "今日",
    "最近",
    "この前",
    "年",
    "月",
    "日",
    "週間",
    "週",
    "か月",
    "ヶ月",
    "前",
    "後",
    "頃",
    "の",
    "春",
    "夏",
    "秋",
    "冬",
    "令和",
    "平成",
    "昭和",
    "元年",
    "年度",
    "上旬",
    "下旬",
    "月末",
    "十",
    "二",
    "三",
    "〇",
    "-",
    "/",
    ".",
    " ",
    "とは",
    "違い",
    "方法",
    "いつ",
    "何",
    "last",
    "week",
    "month",
    "year",
    "ago",
    "days",
    "in",
    "spring",
    "of",
    "this",
    "next",
    "the",
    "January",
    "Dec",
    "yesterday",
    "today",
    "recently",
    "early",
    "around",
    "\u0000",
    "\ud800",
    "\U0010ffff",
]
NUMBERS = st.one_of(
    st.integers(min_value=0, max_value=10**12), st.integers(min_value=-5, max_value=3000)
)
PIECES = st.one_of(st.sampled_from(CUES), NUMBERS.map(str), st.text(max_size=4))
SENTENCES = st.lists(PIECES, max_size=12).map("".join)
ZONES = st.sampled_from(
    [
        UTC,
        timezone(timedelta(hours=9)),
        timezone(timedelta(hours=-9)),
        timezone(timedelta(hours=14)),
    ]
)
NOWS = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=ZONES)


@settings(max_examples=400, deadline=None, database=None)
@given(text=SENTENCES, now=NOWS)
def test_parse_time_never_raises_and_stays_in_bounds(text, now):
    out = parse_time(text, now, "Asia/Tokyo")
    r = out.range
    if r is not None:
        assert r.start is None or TIME_MIN <= r.start < TIME_MAX
        assert r.end is None or TIME_MIN < r.end <= TIME_MAX
        assert r.start is None or r.end is None or r.start < r.end
    for s, e in out.spans:
        assert 0 <= s < e <= len(text)


@settings(
    max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(text=st.one_of(SENTENCES, st.text(max_size=60)), now=NOWS)
def test_analyze_never_raises_and_is_well_formed(analyzer, text, now):
    intent = analyzer.analyze(text, now)
    assert intent.query == text
    assert all(isinstance(k, str) and k for k in intent.keywords)
    assert 0.0 <= intent.importance <= 1.0
    tr = intent.time_range
    if tr is not None:
        assert tr.start is not None and tr.end is not None and tr.start < tr.end
        assert tr.start >= TIME_MIN and tr.end <= TIME_MAX
    intent.to_json()  # serialisable


@pytest.mark.parametrize("text", [*UNHOLDABLE_DATES, "1899年1月の記録"])
def test_dates_past_what_can_be_held_are_dropped_not_raised(analyzer, text):
    """These crashed the analyzer (`year -974 is out of range` in `_ago`): a 500 for an
    ordinary question. Now the date is dropped and the words stay keywords."""
    intent = analyzer.analyze(text, NOW)
    assert intent.time_range is None
    assert intent.keywords


@pytest.mark.parametrize("now", ["0001-01-01T00:00:00+09:00", "9999-12-31T23:00:00-09:00"])
def test_extreme_now_gives_no_window(analyzer, now):
    intent = analyzer.analyze("先週の会議と3日前のメモ", datetime.fromisoformat(now))
    assert intent.time_range is None


def _best_of(fn, text: str, runs: int = 3) -> float:
    import time

    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        fn(text)
        best = min(best, time.perf_counter() - t)
    return best


@pytest.mark.parametrize(
    "unit", ["1", "一", "12日前", "3月5日、"], ids=["digits", "kanji", "ago", "dates"]
)
def test_time_expression_scan_is_linear_in_the_query(unit):
    """Before: every pattern could start a number inside a run of digits and read the rest of
    it (4,000 digits: 2.6 s in the analyzer), and each atom was checked against every earlier
    one. Eight times the text must cost well under the 64 times of a quadratic scan."""
    from retrieval.analysis.time.atoms import scan

    short, long = unit * (2000 // len(unit)), unit * (16000 // len(unit))
    ratio = _best_of(scan, long) / max(_best_of(scan, short), 1e-4)
    print(f"{unit!r}: 8x the text costs {ratio:.1f}x")
    assert ratio < 24
    assert scan("1" * 4000 + "日前") == []  # no number of 4,000 digits is a time
    assert [a.kind for a in scan("3日前")] == ["ago"]
