"""The walk of one write: which of the write path's files its code runs in, in order, from
`Writer.store` down to the rows and back (issue "the write path reads top-down").

It stores a small batch (two turns of a thread, one replying to a stored turn, one long memory,
one unchanged) through `Writer.store` under a profiler that sees every Python call and return,
keeps the frames whose code is in the write path's own files (retrieval/ingest, db/memories,
db/bulk), and prints the walk: each file entered, in order,
with a move for every call into another file and a climb for every return to a file above that
goes on running there. A write that reads top-down calls down and comes back up to its owner
only between stages.

    .venv/bin/python scripts/write_walk.py            (the embedded PostgreSQL, a scratch namespace)
"""

from __future__ import annotations

import asyncio
import dis
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# The write path's own files (prefixes, from the project's root); the rest (the embedding's models
# and scheduling, metrics, validation, the analysis of text, libraries) are leaves a reader need
# not follow, and so are the item and the analysis the write hands around.
WATCHED = ("retrieval/ingest/", "db/memories.py", "db/bulk.py")
LEAVES = ("retrieval/ingest/index.py", "retrieval/ingest/items.py")


def _watched(filename: str) -> str | None:
    try:
        rel = str(Path(filename).resolve().relative_to(ROOT))
    except ValueError:
        return None
    if rel.startswith(WATCHED) and not rel.startswith(LEAVES):
        return rel
    return None


class Walk:
    """The files a reader goes through following the write's calls in the order they run: at
    each first call of a function of the write path's files, the reader is in the caller's file
    (climbing back up to it if they were further down) and moves into the callee's. Calls
    within a file, a call read already (the same caller and callee: a loop's next turn), a
    coroutine resumed after an await and the leaves are not moves."""

    def __init__(self) -> None:
        self.starts: dict[object, int] = {}
        self.read: set[tuple[object, object]] = set()
        self.steps: list[tuple[str, str]] = []  # (kind, file): start, move or climb
        self.at: str | None = None

    def __call__(self, frame, event, arg):
        if event != "call":
            return
        f = _watched(frame.f_code.co_filename)
        if f is None or frame.f_code.co_name.startswith("<") or not self._fresh(frame):
            return
        caller = frame.f_back
        while caller is not None and _watched(caller.f_code.co_filename) is None:
            caller = caller.f_back
        c = _watched(caller.f_code.co_filename) if caller is not None else self.at
        # A reader reads a call once: the same call again (a loop's next item) is no step.
        site = (caller.f_code if caller is not None else None, frame.f_code)
        if site in self.read:
            return
        self.read.add(site)
        if self.at is None:
            self.steps.append(("start", f))
        else:
            if c is not None and c != self.at:
                self.steps.append(("climb", c))
            if f != (c or self.at):
                self.steps.append(("move", f))
        self.at = f

    def _fresh(self, frame) -> bool:
        """A frame's first start, not a coroutine resumed: it stands at its code's first RESUME."""
        code = frame.f_code
        if code not in self.starts:
            self.starts[code] = next(
                (i.offset for i in dis.get_instructions(code) if i.opname == "RESUME"), 0
            )
        return frame.f_lasti == self.starts[code]

    def collapsed(self) -> list[tuple[str, str]]:
        return self.steps


async def main() -> None:
    from retrieval.cli.common import opened
    from retrieval.ingest.items import MemoryItem
    from retrieval.settings import Settings

    settings = Settings()
    ns = f"walk-{uuid.uuid4().hex[:8]}"
    async with opened(settings) as rt:
        first = [
            MemoryItem.from_json({"id": "t1", "content": "来週は京都に行く予定です。", "thread": "c1",
                                  "created_at": "2025-01-01T10:00:00+09:00"}),
            MemoryItem.from_json({"id": "same", "content": "変わらないメモ"}),
        ]  # fmt: skip
        await rt.writer.store(first, ns, tenant=ns)
        batch = [
            MemoryItem.from_json({"id": "t2", "content": "いいですね、何日ですか？", "thread": "c1",
                                  "created_at": "2025-01-01T10:01:00+09:00"}),
            MemoryItem.from_json({"id": "t3", "content": "15日です。", "thread": "c1",
                                  "created_at": "2025-01-01T10:02:00+09:00"}),
            MemoryItem.from_json({"id": "r1", "content": "楽しんで！",
                                  "links": [{"to": "t1", "label": "reply_to"}]}),
            MemoryItem.from_json({"id": "long", "content": "長い記録。" * 900}),
            MemoryItem.from_json({"id": "same", "content": "変わらないメモ"}),
        ]  # fmt: skip
        walk = Walk()
        sys.setprofile(walk)
        try:
            await rt.writer.store(batch, ns, tenant=ns)
        finally:
            sys.setprofile(None)
        await rt.writer.erase(ns, ["t1", "t2", "t3", "r1", "long", "same"])
    steps = walk.collapsed()
    moves = sum(1 for k, _ in steps if k == "move")
    climbs = sum(1 for k, _ in steps if k == "climb")
    for kind, f in steps:
        print(f"{kind:6} {f}")
    print(f"{moves} moves between files, {climbs} climbs back up")


if __name__ == "__main__":
    asyncio.run(main())
