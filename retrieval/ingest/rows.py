"""A write's last stage: its plan (retrieval.ingest.recipe), analysed and embedded, becomes the
stored rows, written in one transaction under the write deadline. An unchanged memory keeps
its vector, terms, names and attribute."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import asyncpg

from db import memories
from db.memories import MemoryRow, StoredEvent
from retrieval.analysis.time.events import (
    EVENT_READER_VERSION,
    EventTime,
    read_event,
    told_by_its_kind,
)
from retrieval.errors import StoreUnavailable
from retrieval.ingest.index import Indexed, word_count
from retrieval.ingest.items import MemoryItem
from retrieval.ingest.recipe import Embedded, PassageRow, Plan, memory_text
from retrieval.text.nlp import normalize_entity


def make_rows(planned: Plan, analysed: list[Indexed], embedded: Embedded) -> list[MemoryRow]:
    """Each item's row: a changed one from its analysis (`analysed`, in `planned.need`'s order)
    and its embedding, an unchanged one from what stands of it."""
    fresh = dict(zip(planned.need, analysed, strict=True))
    rows = []
    for i, it in enumerate(planned.items):
        kept = planned.kept.get(i)
        if kept is None:
            terms, found, fact, read = fresh[i]
            vector: Any = embedded.vectors[i]
            passages = embedded.passages.get(i)
            event = event_row(it, read)
        else:
            terms, found, fact, vector = kept.terms, kept.entities, kept.fact, kept.vector
            passages = None
            # the same words at another time (or a stored row not read yet): read again
            event = kept.event or event_row(it, _read_again(it, planned.written[i]))
        rows.append(_row(planned.ids[i], it, vector, terms, found, fact, event, passages))
    return rows


def _read_again(it: MemoryItem, written: datetime) -> EventTime | None:
    """An unchanged memory's event read again, unless the caller gives it."""
    if it.event_time is not None:
        return None
    return read_memory(it.title, it.content, it.memory_type, it.source_type, written)


def read_memory(
    title: str | None, content: str, memory_type: str, source_type: str, written: datetime
) -> EventTime | None:
    """A memory's event read from its words (its title and content) and its kind, against when
    it was written: the write's analysis reads the same (ingest.index, with plan's clocks)."""
    personal = told_by_its_kind(memory_type, source_type)
    return read_event(memory_text(title, content), written, personal=personal)


def event_row(it: MemoryItem, read: EventTime | None) -> StoredEvent:
    """A memory's event as stored: the caller's (read 0: never read again), else what its words
    say (`read`: stored_event)."""
    given = it.event_time
    if given is None:
        return stored_event(read)
    if given.start is None or given.end is None:
        return StoredEvent(None, None, 0)
    return StoredEvent((given.start, given.end), _offset(given.start), 0)


def stored_event(read: EventTime | None) -> StoredEvent:
    """An event read from a memory's words as stored, by this reader's version, in the offset
    it was read in (None: its words place none)."""
    if read is None:
        return StoredEvent(None, None, EVENT_READER_VERSION)
    return StoredEvent((read.start, read.end), _offset(read.start), EVENT_READER_VERSION)


def _offset(at: datetime) -> int:
    off = at.utcoffset()
    return int(off.total_seconds()) if off is not None else 0


def _row(
    external_id: str,
    it: MemoryItem,
    embedding: Any,
    terms: list[str],
    found: list[tuple[str, float]],
    fact: str,
    event: StoredEvent,
    passages: list[PassageRow] | None,
) -> MemoryRow:
    """The stored row of an item; entities it names itself replace the extracted ones;
    `passages` None keeps the stored ones (the text is unchanged)."""
    given = [(normalize_entity(e), 1.0) for e in it.entities] if it.entities is not None else None
    return MemoryRow(
        external_id=external_id,
        content=it.content,
        title=it.title,
        memory_type=it.memory_type,
        source_type=it.source_type,
        metadata=it.metadata,
        embedding=embedding,
        search_tokens=" ".join(terms),
        token_count=word_count(terms),
        created_at=it.created_at,
        expires_at=it.expires_at,
        thread=it.thread,
        fact=fact,
        event=event,
        entities=found if given is None else given,
        links=[(ln.to, str(ln.label)) for ln in it.links],
        passages=passages,
    )


async def commit(
    pool: asyncpg.Pool,
    planned: Plan,
    analysed: list[Indexed],
    embedded: Embedded,
    timeout_s: float | None,
) -> int:
    """The plan's rows in one transaction: how many memories were new. The write deadline bounds
    it (and only it: what the database holds, its locks and its transaction, not the embedding
    before it)."""
    rows = make_rows(planned, analysed, embedded)
    try:
        return await asyncio.wait_for(
            memories.upsert(pool, planned.namespace, rows, timeout_s=timeout_s), timeout_s
        )
    except TimeoutError as exc:
        raise StoreUnavailable(
            f"the database did not finish the write within {timeout_s:g} s; nothing was written"
        ) from exc
