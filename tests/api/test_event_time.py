"""When it happened, not when it was said (retrieval.analysis.time.events), through the API on
the real database: the event read at write time is on the memory and its results, a window
matches it as well as the time written, a memory placed elsewhere by its own words ranks below
one whose event is inside, the reason says which clock matched and gives both dates, and
options.time_range filters by the clock asked for."""

from __future__ import annotations

import json

from retrieval.ingest.importer import import_file
from retrieval.ingest.memory_in import parse_line

# Monday 16 February 2026 and around it.
MEMORIES = [
    # told on Monday of Saturday 14 February
    {"id": "kitten", "content": "On Saturday we adopted a grey kitten called Miso.",
     "created_at": "2026-02-16T09:00:00+00:00"},
    # the same topic, written on the 14th, telling of last year
    {"id": "dog", "content": "Last year we adopted a dog from the shelter.",
     "created_at": "2026-02-14T20:00:00+00:00"},
    # the same topic, no time words, long before
    {"id": "talk", "content": "We keep talking about adopting a kitten.",
     "created_at": "2026-01-30T10:00:00+00:00"},
    # Japanese, written at 00:30 in Tokyo: yesterday is the 21st there
    {"id": "tooth", "content": "昨日、歯医者で親知らずを抜いた。",
     "created_at": "2026-04-22T00:30:00+09:00"},
    {"id": "dentist", "content": "歯医者の予約を取った。", "created_at": "2026-04-01T12:00:00+09:00"},
    # a tennis match told on Monday; asked about on the next Saturday
    {"id": "tennis", "content": "I finally won my tennis match on Saturday!",
     "created_at": "2026-03-02T08:00:00+00:00"},
    {"id": "tennis-plan", "content": "Tennis practice is on my mind a lot.",
     "created_at": "2026-03-07T19:00:00+00:00"},
]  # fmt: skip


async def _write(client, ns, memories=MEMORIES):
    r = await client.post("/v1/memories", json={"namespace": ns, "memories": memories})
    assert r.status_code == 200, r.text


async def _ask(client, ns, query, now, tz="UTC", **options):
    body = {"namespace": ns, "query": query,
            "options": {"now": now, "timezone": tz, "limit": 5, **options}}  # fmt: skip
    r = await client.post("/v1/retrieve", json=body)
    assert r.status_code == 200, r.text
    return r.json()["results"]


async def test_the_event_is_on_the_memory_in_its_own_offset(client, ns):
    await _write(client, ns)
    got = (await client.get("/v1/memories/kitten", params={"namespace": ns})).json()
    assert got["event_time"] == {"start": "2026-02-14T00:00:00Z", "end": "2026-02-15T00:00:00Z"}
    tooth = (await client.get("/v1/memories/tooth", params={"namespace": ns})).json()
    assert tooth["event_time"] == {
        "start": "2026-04-21T00:00:00+09:00",
        "end": "2026-04-22T00:00:00+09:00",
    }
    talk = (await client.get("/v1/memories/talk", params={"namespace": ns})).json()
    assert talk["event_time"] is None
    listed = (await client.get("/v1/memories", params={"namespace": ns})).json()["memories"]
    assert {m["id"]: m["event_time"] for m in listed}["kitten"] == got["event_time"]


async def test_a_window_matches_what_happened_and_says_which_clock(client, ns):
    await _write(client, ns)
    res = await _ask(client, ns, "What did we adopt on February 14?", "2026-03-01T10:00:00+00:00")
    assert res[0]["id"] == "kitten", [r["id"] for r in res]
    first = res[0]
    assert first["window"] == "inside"
    assert "by when it happened" in first["reason"]
    assert "happened Sat 14 Feb 2026, told Mon 16 Feb 2026" in first["reason"]
    assert first["event_time"]["start"].startswith("2026-02-14")
    # written inside the window, but its words place it a year before: below the kitten
    ids = [r["id"] for r in res]
    assert "dog" in ids and ids.index("dog") > ids.index("kitten")
    dog = res[ids.index("dog")]
    assert dog["window"] == "inside" and "its words place it elsewhere" in dog["reason"]


async def test_japanese_and_the_day_boundary(client, ns):
    await _write(client, ns)
    res = await _ask(
        client, ns, "4月21日に歯医者で何をした？", "2026-05-01T10:00:00+09:00", "Asia/Tokyo"
    )
    assert res[0]["id"] == "tooth" and res[0]["window"] == "inside"


async def test_a_past_weekday_asked_on_that_weekday_is_the_one_before(client, ns):
    await _write(client, ns)
    # Saturday 7 March, in the evening: "on Saturday" is 28 February, the match told on the 2nd
    res = await _ask(client, ns, "Did I win at tennis on Saturday?", "2026-03-07T20:00:00+00:00")
    assert res[0]["id"] == "tennis" and res[0]["window"] == "inside"


async def test_the_time_range_filters_by_the_clock_asked_for(client, ns):
    await _write(client, ns)
    day = {"start": "2026-02-14T00:00:00Z", "end": "2026-02-15T00:00:00Z"}
    q, now = "What did we adopt?", "2026-03-01T10:00:00+00:00"
    written = {r["id"] for r in await _ask(client, ns, q, now, time_range=day)}
    event = {r["id"] for r in await _ask(client, ns, q, now, time_range={**day, "clock": "event"})}
    either = {r["id"] for r in await _ask(client, ns, q, now,
                                          time_range={**day, "clock": "either"})}  # fmt: skip
    assert written == {"dog"}  # the default: when written (callers rely on it)
    assert event == {"kitten"}  # what happened that day (the dog's words place it last year)
    assert either == {"dog", "kitten"}


async def test_the_callers_event_is_kept_and_null_means_none(client, ns):
    given = {"start": "2025-12-24T00:00:00+09:00", "end": "2025-12-26T00:00:00+09:00"}
    await _write(client, ns, [
        {"id": "given", "content": "Yesterday was fun.", "created_at": "2026-02-16T09:00:00+09:00",
         "event_time": given},
        {"id": "none", "content": "Yesterday was fun.", "created_at": "2026-02-16T09:00:00+09:00",
         "event_time": None},
        {"id": "read", "content": "Yesterday was fun.", "created_at": "2026-02-16T09:00:00+09:00"},
    ])  # fmt: skip
    shown = {
        m["id"]: m["event_time"]
        for m in (await client.get("/v1/memories", params={"namespace": ns})).json()["memories"]
    }
    assert shown["given"] == given and shown["none"] is None
    assert shown["read"]["start"] == "2026-02-15T00:00:00+09:00"


async def test_an_import_reads_the_event_back(rt, client, ns, tmp_path):
    await _write(client, ns)
    listed = (await client.get("/v1/memories", params={"namespace": ns})).json()["memories"]
    from retrieval.cli.manage import exported

    path = tmp_path / "export.jsonl"
    path.write_text("".join(json.dumps(exported(m)) + "\n" for m in listed), encoding="utf-8")
    copy = f"{ns}-copy"
    report = await import_file(rt, path, namespace=copy, parse=parse_line)
    assert report.inserted == len(MEMORIES)
    again = (await client.get("/v1/memories", params={"namespace": copy})).json()["memories"]
    assert {m["id"]: m["event_time"] for m in again} == {m["id"]: m["event_time"] for m in listed}


# Another set of this kind, in wordings event_dev does not use (its memories, same-topic
# distractors outside the window by both clocks, and questions naming the event's day).
OTHERS = [
    ("o1", "The day before yesterday I lost my keys at the station.", "2026-05-20T18:00:00+00:00"),
    ("o1x", "I keep losing my keys lately.", "2026-04-02T09:00:00+00:00"),
    ("o2", "Over the weekend we went hiking up Mount Takao.", "2026-06-08T08:00:00+00:00"),
    ("o2x", "Hiking up Mount Takao is on our list.", "2026-05-01T09:00:00+00:00"),
    ("o3", "We're moving to the new flat next Tuesday.", "2026-07-01T12:00:00+00:00"),
    ("o3x", "Looking at new flats to move into.", "2026-06-10T12:00:00+00:00"),
    ("o4", "A week ago I started a pottery course.", "2026-09-15T12:00:00+00:00"),
    ("o4x", "A pottery course sounds fun.", "2026-08-01T12:00:00+00:00"),
    ("o5", "先週末、家族でスキーに行った。", "2026-01-19T20:00:00+09:00"),
    ("o5x", "スキーに行きたいね。", "2025-12-01T20:00:00+09:00"),
    ("o6", "一昨日、駅で財布を落とした。", "2026-03-12T21:00:00+09:00"),
    ("o6x", "新しい財布が欲しい。", "2026-02-01T21:00:00+09:00"),
    ("o7", "木曜日に面接がある。", "2026-04-06T08:00:00+09:00"),
    ("o7x", "面接の練習をした。", "2026-03-20T08:00:00+09:00"),
    ("o8", "去年の夏、沖縄に行った。", "2026-02-10T20:00:00+09:00"),
    ("o8x", "沖縄のガイドブックを買った。", "2026-03-01T20:00:00+09:00"),
]
ASKED = [
    ("Where did I lose my keys on May 18?", "2026-06-01T10:00:00+00:00", "UTC", "o1", "o1x"),
    ("Where did we hike on June 6?", "2026-06-20T10:00:00+00:00", "UTC", "o2", "o2x"),
    ("What happened on July 7?", "2026-07-20T10:00:00+00:00", "UTC", "o3", "o3x"),
    ("What course did I start on September 8?", "2026-09-30T10:00:00+00:00", "UTC", "o4", "o4x"),
    ("1月17日に何をした？", "2026-02-01T10:00:00+09:00", "Asia/Tokyo", "o5", "o5x"),
    ("3月10日に何を落とした？", "2026-03-20T10:00:00+09:00", "Asia/Tokyo", "o6", "o6x"),
    ("4月9日に何があった？", "2026-04-20T10:00:00+09:00", "Asia/Tokyo", "o7", "o7x"),
    ("2025年の夏にどこへ行った？", "2026-04-01T10:00:00+09:00", "Asia/Tokyo", "o8", "o8x"),
]


async def test_another_set_in_other_wordings(client, ns):
    await _write(client, ns, [{"id": i, "content": c, "created_at": t} for i, c, t in OTHERS])
    missed = []
    for query, now, tz, want, distractor in ASKED:
        res = await _ask(client, ns, query, now, tz)
        ids = [r["id"] for r in res]
        at = ids.index(want) if want in ids else None
        ok = (
            at is not None
            and at < 3
            and res[at]["window"] == "inside"
            and (distractor not in ids or ids.index(distractor) > at)
        )
        if not ok:
            missed.append((query, ids))
    assert not missed, missed
