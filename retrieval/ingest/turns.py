"""The turn a conversation turn follows: what it replies to (a `reply_to` link), else the turn
before it in its thread — in the same write or already stored. The recipe
(retrieval.embedding.texts) embeds such a turn after it.

The turn followed is the one stored (or in the same write) when the turn is written: a turn
written later before it in its thread does not change its vector.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime

import asyncpg

from db import memories
from db.memories import StoredTurn
from retrieval.ingest.items import MemoryItem

_LATEST = datetime.max.replace(tzinfo=UTC)


def may_follow(item: MemoryItem) -> bool:
    """Whether an item can follow another turn (it replies to one or belongs to a thread)."""
    return item.thread is not None or any(ln.label == "reply_to" for ln in item.links)


def replied_to(item: MemoryItem) -> str | None:
    """The id of the first memory this one replies to, if any."""
    return next((ln.to for ln in item.links if ln.label == "reply_to"), None)


def _turn_of(item: MemoryItem) -> StoredTurn:
    return StoredTurn(item.title, item.content, item.created_at)


def batch_predecessors(items: Sequence[MemoryItem], picks: Sequence[int]) -> dict[int, int]:
    """For each picked item with a thread, the item of the same write just before it in that
    thread (by created_at, then by position: items without a time count as now)."""
    by_thread: dict[str, list[int]] = defaultdict(list)
    for i, it in enumerate(items):
        if it.thread is not None:
            by_thread[it.thread].append(i)
    now = datetime.now(UTC)
    before: dict[int, int] = {}
    for members in by_thread.values():
        ordered = sorted(members, key=lambda i: (items[i].created_at or now, i))
        for prev, cur in zip(ordered, ordered[1:], strict=False):
            # A turn at the same instant as another is not taken to follow it.
            if (items[prev].created_at or now) < (items[cur].created_at or now):
                before[cur] = prev
    wanted = set(picks)
    return {i: j for i, j in before.items() if i in wanted}


async def predecessors(
    conn: asyncpg.Connection,
    namespace: str,
    items: Sequence[MemoryItem],
    ids: Sequence[str],
    picks: Sequence[int],
    *,
    timeout_s: float | None = None,
) -> dict[int, StoredTurn]:
    """The turn each picked item follows, by index: what it replies to (in this write or
    stored), else the later of its thread's turn before it in this write and in the store."""
    picks = [i for i in picks if may_follow(items[i])]
    if not picks:
        return {}
    index = {x: i for i, x in enumerate(ids)}
    out: dict[int, StoredTurn] = {}
    targets = {i: t for i in picks if (t := replied_to(items[i])) is not None}
    stored = await memories.texts_of(
        conn,
        namespace,
        sorted({t for t in targets.values() if t not in index}),
        timeout_s=timeout_s,
    )
    for i, t in targets.items():
        if t in index and index[t] != i:
            out[i] = _turn_of(items[index[t]])
        elif t in stored:
            out[i] = stored[t]
    threaded = [i for i in picks if i not in out and items[i].thread is not None]
    in_write = batch_predecessors(items, threaded)
    found = await memories.thread_predecessors(
        conn,
        namespace,
        [(str(items[i].thread), items[i].created_at, ids[i]) for i in threaded],
        timeout_s=timeout_s,
    )
    for k, i in enumerate(threaded):
        mine = in_write.get(i)
        theirs = found.get(k)
        if mine is not None and (
            theirs is None or (theirs.created_at or _LATEST) <= (items[mine].created_at or _LATEST)
        ):
            out[i] = _turn_of(items[mine])
        elif theirs is not None:
            out[i] = theirs
    return out
