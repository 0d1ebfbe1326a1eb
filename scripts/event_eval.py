"""When it happened, measured (issue: event time): two checks of the event a memory's own words
place (retrieval.analysis.time.events).

`--url`: event_dev through a running service (a fresh namespace per run). Its memories are
written as they are; for each question (asked at its `now`, in its zone):
  found    the memory whose event is in the window is among the first 3, inside the window,
           above the same-topic distractor (outside the window by both clocks);
and for each memory, read back by GET /v1/memories/{id}:
  days     its event_time covers exactly the labelled days (and `within` it covers them,
           perhaps more widely);
  no time  a memory whose words place nothing is given no event that leaves its day.

`--locomo`: LoCoMo dev's temporal questions whose short answer names a day, a month or a year
(a four-digit year in it; read by the question grammar at the evidence's date): the share whose
evidence turn's event (its `created_at` day when its words place none) overlaps the answer's
period and spans at most a week more than it, beside `created_at` alone. Offline (no service).

    retrieval serve --port 8765 &
    python scripts/event_eval.py --dir ../shared/eval --url http://127.0.0.1:8765
    python scripts/event_eval.py --dir ../shared/eval --locomo
"""

from __future__ import annotations

import argparse
import json
import re
import uuid
from collections import defaultdict
from datetime import date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def event_dev(root: Path, url: str, key: str | None) -> dict:
    import httpx

    folder = root / "event_dev"
    memories = _lines(folder / "memories.jsonl")
    truth = {e["id"]: e for e in _lines(folder / "events.jsonl")}
    queries = _lines(folder / "queries.jsonl")
    ns = f"event-eval-{uuid.uuid4().hex[:8]}"
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    out: dict = {"namespace": ns, "questions": [], "memories": []}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as http:
        body = [{k: v for k, v in m.items() if k != "namespace"} for m in memories]
        r = http.post("/v1/memories", json={"namespace": ns, "memories": body})
        r.raise_for_status()
        for m in memories:
            got = http.get(f"/v1/memories/{m['id']}", params={"namespace": ns}).json()
            out["memories"].append(_days(m, got.get("event_time"), truth[m["id"]]))
        for q in queries:
            r = http.post(
                "/v1/retrieve",
                json={
                    "namespace": ns,
                    "query": q["query"],
                    "options": {"now": q["now"], "timezone": q["timezone"], "limit": 10},
                },
            )
            r.raise_for_status()
            res = r.json()["results"]
            ids = [x["id"] for x in res]
            rel = q["relevant"][0]
            at = ids.index(rel) if rel in ids else None
            inside = at is not None and res[at].get("window") == "inside"
            above = at is not None and all(
                d not in ids or ids.index(d) > at for d in q.get("distract", [])
            )
            ok = at is not None and at < 3 and inside and above
            out["questions"].append(
                {"qid": q["qid"], "ok": ok, "rank": at, "inside": inside, "above": above,
                 "first": ids[:3]}
            )  # fmt: skip
        http.delete(f"/v1/namespaces/{ns}")
    qs, ms = out["questions"], out["memories"]
    timed = [m for m in ms if m["want"] is not None]
    untimed = [m for m in ms if m["want"] is None]
    out["found"] = sum(q["ok"] for q in qs) / len(qs)
    out["days"] = sum(m["exact"] for m in timed) / len(timed)
    out["within"] = sum(m["covers"] for m in timed) / len(timed)
    out["no_time_kept_to_its_day"] = sum(m["kept"] for m in untimed) / len(untimed)
    return out


def _local_days(ev: dict, zone) -> tuple[date, date]:
    s = datetime.fromisoformat(ev["start"]).astimezone(zone)
    e = datetime.fromisoformat(ev["end"]).astimezone(zone)
    return s.date(), (e - timedelta(microseconds=1)).date()


def _days(m: dict, got: dict | None, want: dict) -> dict:
    created = datetime.fromisoformat(m["created_at"])
    zone = created.tzinfo
    w = want["event"]
    row = {"id": m["id"], "got": got, "want": w}
    if w is None:
        row["kept"] = got is None or _local_days(got, zone) == (created.date(), created.date())
        return row
    ws, we = date.fromisoformat(w["start"]), date.fromisoformat(w["end"])
    if got is None:
        row.update(exact=False, covers=False)
        return row
    gs, ge = _local_days(got, zone)
    row.update(exact=(gs, ge) == (ws, we), covers=gs <= ws and ge >= we)
    return row


_YEAR = re.compile(r"\b(1[89]\d\d|2[01]\d\d)\b")


def locomo(root: Path) -> dict:
    from retrieval.analysis.time.events import read_event, told_by_its_kind
    from retrieval.analysis.time.expressions import parse_time

    folder = root / "locomo_dev"
    turns = {m["id"]: m for m in _lines(folder / "memories.jsonl")}
    per: dict[str, dict[str, int]] = defaultdict(lambda: {"n": 0, "event": 0, "created": 0})
    misses = []
    for q in _lines(folder / "queries.jsonl"):
        answer = str(q.get("answer") or "")
        if q.get("category") != "temporal" or not _YEAR.search(answer):
            continue
        evidence = [turns[x] for x in q["relevant"] if x in turns]
        if not evidence:
            continue
        said = datetime.fromisoformat(evidence[0]["created_at"])
        rng = parse_time(answer, said, ZoneInfo("UTC")).range
        if rng is None or rng.start is None or rng.end is None:
            continue
        conv = q["namespace"]
        per[conv]["n"] += 1
        span = rng.end - rng.start
        ok_event = ok_created = False
        for t in evidence:
            at = datetime.fromisoformat(t["created_at"])
            day = datetime.combine(at.date(), datetime.min.time(), tzinfo=at.tzinfo)
            created = (day, day + timedelta(days=1))
            personal = told_by_its_kind(t.get("memory_type"), t.get("source_type"))
            ev = read_event(t["content"], at, personal=personal)
            placed = (ev.start, ev.end) if ev is not None else created
            ok_event |= _agrees(placed, rng.start, rng.end, span)
            ok_created |= _agrees(created, rng.start, rng.end, span)
        per[conv]["event"] += ok_event
        per[conv]["created"] += ok_created
        if not ok_event:
            misses.append({"qid": q["qid"], "answer": answer,
                           "evidence": [t["content"][:120] for t in evidence]})  # fmt: skip
    n = sum(v["n"] for v in per.values())
    return {
        "questions": n,
        "event": sum(v["event"] for v in per.values()) / n,
        "created_at": sum(v["created"] for v in per.values()) / n,
        "by_conversation": {
            k: {"n": v["n"], "event": v["event"] / v["n"], "created_at": v["created"] / v["n"]}
            for k, v in sorted(per.items())
        },
        "misses": misses,
    }


def _agrees(placed: tuple[datetime, datetime], start, end, span: timedelta) -> bool:
    """The placed range overlaps the answer's period and is at most a week wider."""
    s, e = placed
    return s < end and e > start and (e - s) <= span + timedelta(days=7)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, required=True, help="the shared eval folder")
    ap.add_argument("--url", help="a running service: run event_dev through it")
    ap.add_argument("--key", help="its API key, if it asks for one")
    ap.add_argument("--locomo", action="store_true", help="the LoCoMo evidence-date check")
    ap.add_argument("--misses", action="store_true", help="print what the checks missed")
    args = ap.parse_args()
    if not args.url and not args.locomo:
        ap.error("give --url, --locomo or both")
    if args.url:
        got = event_dev(args.dir, args.url, args.key)
        print(f"event_dev: found {got['found']:.3f}  days {got['days']:.3f} "
              f"(within {got['within']:.3f})  no-time kept to its day "
              f"{got['no_time_kept_to_its_day']:.3f}")  # fmt: skip
        if args.misses:
            for q in got["questions"]:
                if not q["ok"]:
                    print("  miss", q)
            for m in got["memories"]:
                if m["want"] is not None and not m["exact"]:
                    print("  days", m)
    if args.locomo:
        got = locomo(args.dir)
        print(f"locomo temporal, answer names a period: {got['questions']} questions; "
              f"event agrees {got['event']:.3f}, created_at alone {got['created_at']:.3f}")  # fmt: skip
        for conv, v in got["by_conversation"].items():
            print(f"  {conv}: n {v['n']}  event {v['event']:.3f}  created_at {v['created_at']:.3f}")
        if args.misses:
            for x in got["misses"]:
                print("  miss", x)


if __name__ == "__main__":
    main()
