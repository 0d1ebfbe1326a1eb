"""When what a memory tells happened, read from its words against when it was written
(retrieval.analysis.time.events): every kind in both languages, tense, habits and mentions,
offsets and the day boundary."""

from __future__ import annotations

from datetime import date, datetime, timedelta

import pytest

from retrieval.analysis.time.events import READ_MAX_CHARS, read_event

# Monday 16 February 2026, 09:00 UTC.
MON = datetime.fromisoformat("2026-02-16T09:00:00+00:00")
# The same Monday in Tokyo.
MON_JST = datetime.fromisoformat("2026-02-16T09:00:00+09:00")


def days(text: str, at: datetime = MON, personal: bool = True) -> tuple[date, date] | None:
    """The event's first and last day, in the offset it was read in (of a memory of a personal
    kind, a chat's or a diary's, unless said otherwise)."""
    e = read_event(text, at, personal=personal)
    if e is None:
        return None
    assert e.start.utcoffset() == at.utcoffset()
    return e.start.date(), (e.end - timedelta(days=1)).date()


def day(y: int, m: int, d: int) -> tuple[date, date]:
    return date(y, m, d), date(y, m, d)


@pytest.mark.parametrize(
    ("text", "at", "want"),
    [
        # relative days
        ("Yesterday my brother passed his driving test.", MON, day(2026, 2, 15)),
        ("昨日、健康診断で再検査になった。", MON_JST, day(2026, 2, 15)),
        ("おととい映画を観た", MON_JST, day(2026, 2, 14)),
        ("Three days ago I finished Middlemarch.", MON, day(2026, 2, 13)),
        ("3日前に風邪をひいた", MON_JST, day(2026, 2, 13)),
        ("Today I went bouldering for the first time.", MON, day(2026, 2, 16)),
        ("今日、初めてボルダリングに行った。", MON_JST, day(2026, 2, 16)),
        # weekdays by tense: told in the past, the last one before; else the next one after
        ("On Saturday we adopted a grey kitten.", MON, day(2026, 2, 14)),
        ("We went to the beach on Monday.", MON, day(2026, 2, 9)),
        ("日曜日に母と温泉に行った。", MON_JST, day(2026, 2, 15)),
        ("Flying to Oslo on Friday for a birthday.", MON, day(2026, 2, 20)),
        ("I'm seeing the dentist on Monday.", MON, day(2026, 2, 23)),
        ("来週の月曜に会議がある", MON_JST, day(2026, 2, 23)),
        ("Last Wednesday I presented the roadmap.", MON, day(2026, 2, 11)),
        ("先週の土曜、引っ越しを手伝った。", MON_JST, day(2026, 2, 14)),
        # weeks and months
        ("I went there last week.", MON, (date(2026, 2, 9), date(2026, 2, 15))),
        ("先週、京都に行った", MON_JST, (date(2026, 2, 9), date(2026, 2, 15))),
        ("Two weeks ago I bought a car.", MON, day(2026, 2, 2)),
        ("2週間前に車を買い替えた。", MON_JST, day(2026, 2, 2)),
        ("Last month I switched my phone plan.", MON, (date(2026, 1, 1), date(2026, 1, 31))),
        ("先月、転職した", MON_JST, (date(2026, 1, 1), date(2026, 1, 31))),
        ("Back in March I started a new job.", MON, (date(2025, 3, 1), date(2025, 3, 31))),
        ("Next month I start a new job.", MON, (date(2026, 3, 1), date(2026, 3, 31))),
        # years
        ("In 2019 I moved to Osaka.", MON, (date(2019, 1, 1), date(2019, 12, 31))),
        ("2019年に大阪へ引っ越した", MON_JST, (date(2019, 1, 1), date(2019, 12, 31))),
        ("Five years ago I moved.", MON, (date(2021, 1, 1), date(2021, 12, 31))),
        ("5年前に引っ越した", MON_JST, (date(2021, 1, 1), date(2021, 12, 31))),
        # dates: a day of the month alone by tense, a month and day
        ("I went to the dentist on the 15th.", MON, day(2026, 2, 15)),
        ("On the 15th I have a dentist appointment.", MON, day(2026, 3, 15)),
        ("15日に歯医者に行った", MON_JST, day(2026, 2, 15)),
        ("5月9日に歯医者に行く", MON_JST, day(2026, 5, 9)),
        ("5月9日に歯医者に行った", MON_JST, day(2025, 5, 9)),
        ("We met on March 3, 2024.", MON, day(2024, 3, 3)),
        # spans
        ("Tomorrow I fly to Lisbon, back on Friday.", MON, (date(2026, 2, 17), date(2026, 2, 20))),
        ("明日から三日間、京都に行く。", MON_JST, (date(2026, 2, 17), date(2026, 2, 19))),
        ("I'll be in Paris from May 3 to May 10.", MON, (date(2026, 5, 3), date(2026, 5, 10))),
        ("6月から8月までロンドンにいた", MON_JST, (date(2025, 6, 1), date(2025, 8, 31))),
        # "X から" alone: the day it began
        ("来週の月曜から夏休み。", MON_JST, day(2026, 2, 23)),
    ],
)
def test_every_kind_in_both_languages(text, at, want):
    assert days(text, at) == want, text


@pytest.mark.parametrize(
    ("text", "want"),
    [
        # a memory of no personal kind (memory_type, source_type): a short one whose event
        # counts from when it was written
        ("Yesterday my brother passed his driving test.", day(2026, 2, 15)),
        ("昨日、健康診断で再検査になった。", day(2026, 2, 15)),
        ("I went to the dentist on the 15th.", day(2026, 2, 15)),
        ("Last week I presented the roadmap.", (date(2026, 2, 9), date(2026, 2, 15))),
        # a first date that names itself: perhaps a reference text's (a chat's or a diary's
        # memory of the same words is read: above)
        ("2019年に大阪へ引っ越した", None),
        ("We met on March 3, 2024.", None),
        ("1961年4月12日、ガガーリンが飛んだ。数日前から準備していた。", None),
        (
            "1961年4月12日、ソ連の宇宙飛行士ユーリ・ガガーリンが史上初の有人宇宙飛行に成功した。",
            None,
        ),
        ("The treaty was signed in 1648 in Münster.", None),
        # counting from the text's own moment, in a long reference text: not from its writing
        ("選挙の2日前の市議会で提案は7対5で否決された。" + "その後の経過は" * 60, None),
    ],
)
def test_a_memory_of_no_personal_kind_tells_of_its_writer_by_its_words(text, want):
    assert days(text, MON_JST if not text.isascii() else MON, personal=False) == want, text


@pytest.mark.parametrize(
    "text",
    [
        # habits
        "We go running every Saturday.",
        "On Sundays we go running.",
        "毎週土曜日にジムへ行く",
        "土曜日ごとにジムへ行く",
        "We pay rent on the 15th of every month.",
        # mentions that place nothing
        "I drive a 2019 Honda.",
        "Agreed on a limit of 2000 tokens.",
        "2019年式のホンダに乗っている",
        "I love the 1990s music.",
        "90年代の音楽が好き",
        "夏休みの計画を立てたい。",
        "冬服を買いに行きたい",
        # vague, or one side only
        "Recently I started running.",
        "最近ジムに通っている",
        "I saw it before March.",
        # no time words
        "We keep talking about getting a kitten.",
        "箱根の温泉旅館を調べている。",
    ],
)
def test_habits_mentions_and_no_time_words_are_no_event(text):
    assert read_event(text, MON, personal=True) is None, text


def test_the_day_boundary_is_the_offset_written_in():
    # 00:30 on 22 April in Tokyo is still 21 April in UTC: "yesterday" is the 21st in Tokyo
    at = datetime.fromisoformat("2026-04-22T00:30:00+09:00")
    e = read_event("昨日、歯医者で親知らずを抜いた", at, personal=True)
    assert e is not None
    assert (e.start.isoformat(), e.end.isoformat()) == (
        "2026-04-21T00:00:00+09:00",
        "2026-04-22T00:00:00+09:00",
    )
    # the same instant written in UTC: the 20th
    utc = read_event(
        "Yesterday I had a tooth out", datetime.fromisoformat("2026-04-21T15:30:00+00:00")
    )
    assert utc is not None and utc.start.date() == date(2026, 4, 20)


def test_the_words_read_are_given_and_a_long_text_tells_of_none():
    e = read_event("On Saturday we adopted a kitten.", MON, personal=True)
    assert e is not None and e.words == "On Saturday"
    assert read_event("Yesterday " + "x" * READ_MAX_CHARS, MON, personal=True) is None


def test_a_time_without_an_offset_is_refused():
    with pytest.raises(ValueError):
        read_event("yesterday", datetime(2026, 2, 16, 9, 0))
