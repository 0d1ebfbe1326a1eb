"""Write speed over HTTP: memories per second for conversation turns (LoCoMo, and the long
chats' ~1,000-character turns: longmemeval), Japanese passages (JSQuAD) and long articles
(longdoc; `--join-chars N` joins them into memories of N characters) at several batch sizes, and
where the server spent the time, against running `retrieval serve`s (a fresh namespace per run;
nothing else is touched):

    retrieval serve --port 8765 &
    python scripts/ingest_speed.py --url http://127.0.0.1:8765 --sets locomo jsquad \\
        --batches 1 100 1000 --memories 200

Several servers (`--url before=http://… after=http://…`, two code versions) are written to
batch by batch in turn (which first alternates), so both meet the same moments of the machine.

Turns keep their id, time, thread and links. For each set and batch size it posts
`--memories` memories (at least one batch) in batches, follows a 202's job to its end, and
prints memories/s, passages/s (a long memory's passages, retrieval.text.passages; a short
one is one) and characters/s from the first post to the last write, with the server's own stage
seconds (lookup, analyse, embed, write) summed.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections import defaultdict
from pathlib import Path

import httpx

SETS = {
    "locomo": ("locomo_dev/memories.jsonl", "content"),
    "jsquad": ("jsquad/corpus.jsonl", "text"),
    "longdoc": ("longdoc_dev/corpus.jsonl", "content"),
    "longmemeval": ("longmemeval_dev/memories.jsonl.gz", "content"),
}


def joined(items: list[dict], chars: int, n: int) -> list[dict]:
    """n memories of `chars` characters each, the items' texts joined by blank lines."""
    text = "\n\n".join(it["content"] for it in items)
    if len(text) < chars * n:
        raise SystemExit(f"the set holds {len(text)} characters, fewer than {chars * n}")
    return [{"content": text[i * chars : (i + 1) * chars]} for i in range(n)]


def passages(items: list[dict]) -> int:
    from retrieval.text.passages import split_passages

    return sum(max(1, len(split_passages(it["content"]))) for it in items)


def read_set(root: Path, name: str, n: int) -> list[dict]:
    path, key = SETS[name]
    import gzip

    out = []
    opener = gzip.open if path.endswith(".gz") else open
    with opener(root / path, "rt", encoding="utf-8") as fh:
        for line in fh:
            d = json.loads(line)
            item = {"content": d[key]}
            # A conversation turn is written as an agent writes it: with its id, time, thread
            # and reply_to link (it is embedded a second time after the turn it follows).
            for field in ("title", "id", "created_at", "thread", "links"):
                if d.get(field):
                    item[field] = d[field]
            out.append(item)
            if len(out) >= n:
                break
    return out


def write(client: httpx.Client, ns: str, batch: list[dict]) -> tuple[int, dict]:
    """Post one batch; the report (following a job to its end) and the status first answered."""
    r = client.post("/v1/memories", json={"namespace": ns, "memories": batch})
    r.raise_for_status()
    if r.status_code == 200:
        return 200, r.json()
    while True:
        job = client.get(r.headers["location"]).json()
        if job["state"] == "done":
            return 202, job["report"]
        if job["state"] == "failed":
            raise SystemExit(f"job failed: {job['error']}")
        time.sleep(0.25)


def _servers(specs: list[str]) -> list[tuple[str, str]]:
    """NAME=URL pairs (a bare URL is named by itself)."""
    return [tuple(s.split("=", 1)) if "=" in s else (s, s) for s in specs]  # type: ignore[misc]


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--url", nargs="+", default=["http://127.0.0.1:8765"], help="[NAME=]URL ...")
    ap.add_argument("--dir", type=Path, default=Path("../shared/eval"))
    ap.add_argument("--sets", nargs="+", choices=sorted(SETS), default=sorted(SETS))
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 100, 1000])
    ap.add_argument("--memories", type=int, default=200, help="memories per run (≥ one batch)")
    ap.add_argument("--join-chars", type=int, help="memories of this many characters (joined)")
    args = ap.parse_args()
    stage_names = ("lookup", "analyse", "embed", "write")
    print(
        "| server | set | batch | memories | answered | mem/s | passages/s | chars/s | "
        + " | ".join(f"{s} s" for s in stage_names)
        + " |"
    )
    print("|---|---|---|---|---|---|---|---|" + "---|" * len(stage_names))
    servers = _servers(args.url)
    clients = {name: httpx.Client(base_url=url, timeout=3600.0) for name, url in servers}
    try:
        for name in args.sets:
            for size in args.batches:
                n = max(args.memories, size)
                if args.join_chars:
                    items = joined(read_set(args.dir, name, 10**6), args.join_chars, n)
                else:
                    items = read_set(args.dir, name, n)
                tag = uuid.uuid4().hex[:6]
                stages = {s: defaultdict(float) for s, _ in servers}
                answered: dict[str, set[int]] = {s: set() for s, _ in servers}
                took = dict.fromkeys(clients, 0.0)
                for k, start in enumerate(range(0, len(items), size)):
                    order = servers if k % 2 == 0 else servers[::-1]
                    for server, _ in order:
                        t = time.perf_counter()
                        ns = f"speed-{name}-{size}-{tag}"
                        status, rep = write(clients[server], ns, items[start : start + size])
                        took[server] += time.perf_counter() - t
                        answered[server].add(status)
                        for st, v in rep.get("stage_seconds", {}).items():
                            stages[server][st] += v
                chars = sum(len(it["content"]) for it in items)
                for server, _ in servers:
                    cols = " | ".join(f"{stages[server].get(s, 0.0):.1f}" for s in stage_names)
                    print(
                        f"| {server} | {name} | {size} | {len(items)} "
                        f"| {'/'.join(map(str, sorted(answered[server])))} "
                        f"| {len(items) / took[server]:.2f} | {passages(items) / took[server]:.1f} "
                        f"| {chars / took[server]:.0f} | {cols} |",
                        flush=True,
                    )
    finally:
        for c in clients.values():
            c.close()


if __name__ == "__main__":
    main()
