"""The write path: validated items become rows — analysed (terms, entities), embedded by the one
recipe (retrieval.embedding.texts), a turn after the turn it follows — and all are written in
one transaction under the write deadline. A stored memory whose text is unchanged keeps its
vector, terms and entities."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import asyncpg
import numpy as np

from db import memories
from db.memories import MemoryRow, StoredTurn
from db.session import session
from retrieval.analysis.facts import stored_fact
from retrieval.embedding.base import Embedder
from retrieval.embedding.documents import embed_texts
from retrieval.embedding.meter import EmbedMeter
from retrieval.embedding.texts import PassageRow, Recipe, memory_text, recipe, turn_text
from retrieval.errors import InvalidInput, StoreUnavailable
from retrieval.ingest.index import Indexed, Indexer, word_count
from retrieval.ingest.items import MemoryItem
from retrieval.ingest.turns import may_follow, predecessors
from retrieval.metrics import StageClock
from retrieval.text.nlp import normalize_entity
from retrieval.validation import duplicate_ids

A = TypeVar("A")
B = TypeVar("B")

# Given vectors, row i for item i; a None row is embedded by the write.
Vectors = np.ndarray | Sequence[np.ndarray | None]


def embedding_load(items: list[MemoryItem], picks: list[int]) -> list[str]:
    """The texts a write of `picks` embeds, for its cost estimate: by the recipe, a turn that
    may follow another taken to follow a turn as long as itself."""
    recipes = []
    for i in picks:
        it = items[i]
        before = StoredTurn(None, memory_text(it.title, it.content)) if may_follow(it) else None
        recipes.append(recipe(it.title, it.content, before=before))
    return _in_embedding_order(recipes)


def _in_embedding_order(recipes: Sequence[Recipe]) -> list[str]:
    """The recipes' texts as a write embeds them: every own text, then every text after its
    turn, then every passage."""
    return (
        [t for rc in recipes if (t := rc.own) is not None]
        + [t for rc in recipes if (t := rc.after) is not None]
        + [t for rc in recipes for t in rc.passages]
    )


def unchanged(item: MemoryItem, stored: Any) -> bool:
    """Whether a stored row (title, content) holds this item's text: its vector and terms stand."""
    return stored is not None and (stored["title"], stored["content"]) == (item.title, item.content)


@dataclass
class IngestReport:
    namespace: str
    received: int
    inserted: int
    updated: int
    reembedded: int
    ids: list[str]
    seconds: float
    # Seconds each part took: lookup, analyse, context, embed, write.
    stage_s: dict[str, float] = field(default_factory=dict)
    # The primary's WAL position after the write (with replicas; read-your-writes).
    lsn: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "received": self.received,
            "inserted": self.inserted,
            "updated": self.updated,
            "embedded": self.reembedded,
            "ids": self.ids,
            "seconds": round(self.seconds, 3),
            "stage_seconds": {k: round(v, 3) for k, v in self.stage_s.items()},
            "lsn": self.lsn,
        }


@dataclass(frozen=True)
class Lookup:
    """What is stored under a batch's ids: the rows (text, vector, terms, entities) of those
    that exist, and the items whose text is new or changed (the ones a write must embed)."""

    old: dict[str, Any]
    need: list[int]


async def look_up(
    pool: asyncpg.Pool,
    namespace: str,
    items: list[MemoryItem],
    ids: list[str],
    *,
    timeout_s: float | None = None,
) -> Lookup:
    """The batch's Lookup (one read, bounded by `timeout_s`)."""
    async with session(pool, timeout_s if timeout_s is not None else 3600.0) as conn:
        old = await memories.existing(conn, namespace, ids, timeout_s=timeout_s)
    need = [
        i for i, (it, x) in enumerate(zip(items, ids, strict=True)) if not unchanged(it, old.get(x))
    ]
    return Lookup(old, need)


async def prepare_rows(
    pool: asyncpg.Pool,
    embedder: Embedder,
    analyse: Indexer,
    items: list[MemoryItem],
    ids: list[str],
    *,
    namespace: str,
    vectors: Vectors | None = None,
    batch_size: int = 32,
    lookup: Lookup | None = None,
    meter: EmbedMeter | None = None,
    tick: Callable[[], Awaitable[None]] | None = None,
    clock: StageClock | None = None,
    timeout_s: float | None = None,
) -> tuple[list[MemoryRow], int]:
    """The rows to write for items, and how many were (re)embedded. `lookup` is what look_up
    gave, when the caller has read it already; `vectors` gives an item's vector where it is not
    None; `tick` is awaited between embedding calls; `clock` gets the time each part took
    (lookup, context, then analyse and embed, which run side by side: the analysis on a thread
    of the default executor, the embedding on the write path's background threads);
    `timeout_s` bounds each read."""
    clock = clock or StageClock()
    if lookup is None:
        lookup = await look_up(pool, namespace, items, ids, timeout_s=timeout_s)
    clock.lap("lookup")
    old, need = lookup.old, lookup.need
    changed = set(need)
    kept = [None if i in changed else old[x] for i, x in enumerate(ids)]
    given = _given(vectors, need)
    recipes = {i: recipe(items[i].title, items[i].content, given=i in given) for i in need}
    await _after_their_turns(pool, namespace, items, ids, recipes, timeout_s)
    clock.lap("context")
    texts = [memory_text(items[i].title, items[i].content) for i in need]

    async def analysed() -> list[Indexed]:
        t = time.perf_counter()
        try:
            return await analyse(texts, [items[i].entities is None for i in need])
        finally:
            clock.add("analyse", (time.perf_counter() - t) * 1000.0)

    async def embedded() -> tuple[dict[int, np.ndarray], dict[int, list[PassageRow]]]:
        t = time.perf_counter()
        try:
            return await _embed(embedder, recipes, given, batch_size, meter, tick)
        finally:
            clock.add("embed", (time.perf_counter() - t) * 1000.0)

    got, (emb, passages) = await _both(analysed(), embedded())
    fresh = dict(zip(need, got, strict=True))
    clock.mark()  # the two have their own times, above
    rows = []
    for i, it in enumerate(items):
        k = kept[i]
        if k is None:
            terms, found, fact = fresh[i]
            vector = emb[i]
        else:
            terms, found, fact, vector = _as_stored(k)
        rows.append(_row(ids[i], it, vector, terms, found, fact, passages.get(i)))
    return rows, len(need)


def _as_stored(k: Any) -> tuple[list[str], list[tuple[str, float]], str, Any]:
    """An unchanged memory's stored terms, entities, attribute and vector; a row written before
    attributes were read has none stored (NULL), so it is read now."""
    found = list(zip(k["entities"], k["entity_weights"], strict=True))
    fact = (
        k["fact"] if k["fact"] is not None else stored_fact(memory_text(k["title"], k["content"]))
    )
    return k["search_tokens"].split(), found, fact, k["embedding"]


async def _both(a: Awaitable[A], b: Awaitable[B]) -> tuple[A, B]:
    """Both results; when one fails, the other is cancelled (and waited for) first."""
    ta, tb = asyncio.ensure_future(a), asyncio.ensure_future(b)
    try:
        return await ta, await tb
    finally:
        for t in (ta, tb):
            if not t.done():
                t.cancel()
        await asyncio.gather(ta, tb, return_exceptions=True)


def _given(vectors: Vectors | None, need: list[int]) -> dict[int, np.ndarray]:
    """The vectors given for the items to embed (by index)."""
    if vectors is None:
        return {}
    return {i: np.asarray(vectors[i], np.float32) for i in need if vectors[i] is not None}


async def _after_their_turns(
    pool: asyncpg.Pool,
    namespace: str,
    items: list[MemoryItem],
    ids: list[str],
    recipes: dict[int, Recipe],
    timeout_s: float | None,
) -> None:
    """Each recipe of a short memory that follows another turn (stored, or in this write)
    gets its text after that turn."""
    todo = [i for i, rc in recipes.items() if rc.own is not None]
    if not todo:
        return
    async with session(pool, timeout_s if timeout_s is not None else 3600.0) as conn:
        before = await predecessors(conn, namespace, items, ids, todo, timeout_s=timeout_s)
    for i, turn in before.items():
        it = items[i]
        recipes[i] = replace(recipes[i], after=turn_text(turn, memory_text(it.title, it.content)))


async def _embed(
    embedder: Embedder,
    recipes: dict[int, Recipe],
    given: dict[int, np.ndarray],
    batch_size: int,
    meter: EmbedMeter | None,
    tick: Callable[[], Awaitable[None]] | None,
) -> tuple[dict[int, np.ndarray], dict[int, list[PassageRow]]]:
    """Every item's vector and passages: all own texts embedded first, then the texts after
    their turns, then the passages (bounded calls, retrieval.embedding.documents)."""
    own = [i for i, rc in recipes.items() if rc.own is not None]
    after = [i for i in own if recipes[i].after is not None]
    texts = _in_embedding_order(list(recipes.values()))
    got = iter(
        await embed_texts(embedder, texts, batch_size, meter=meter, tick=tick) if texts else []
    )
    own_vec = {i: next(got) for i in own}
    after_vec = {i: next(got) for i in after}
    emb: dict[int, np.ndarray] = {}
    passages: dict[int, list[PassageRow]] = {}
    for i, rc in recipes.items():
        vecs = [next(got) for _ in rc.passages]
        emb[i] = rc.vector(own_vec.get(i), after_vec.get(i), vecs, given.get(i))
        passages[i] = rc.passage_rows(vecs)
    return emb, passages


def _row(
    external_id: str,
    it: MemoryItem,
    embedding: Any,
    terms: list[str],
    found: list[tuple[str, float]],
    fact: str,
    passages: list[tuple[int, int, Any]] | None,
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
        entities=found if given is None else given,
        links=[(ln.to, str(ln.label)) for ln in it.links],
        passages=passages,
    )


def assign_ids(items: list[MemoryItem]) -> list[str]:
    """Each item's id, a new one where it gives none; InvalidInput on a repeated id."""
    ids = [it.id or uuid.uuid4().hex for it in items]
    errors = duplicate_ids(ids, range(len(ids)), key="index", noun="item")
    if errors:
        raise InvalidInput(errors)
    return ids


async def write_rows(
    pool: asyncpg.Pool, namespace: str, rows: list[MemoryRow], timeout_s: float | None
) -> int:
    """One transaction of rows; the write deadline bounds it (and only it: what the database
    holds, its locks and its transaction, not the embedding before it)."""
    try:
        return await asyncio.wait_for(
            memories.upsert(pool, namespace, rows, timeout_s=timeout_s), timeout_s
        )
    except TimeoutError as exc:
        raise StoreUnavailable(
            f"the database did not finish the write within {timeout_s:g} s; nothing was written"
        ) from exc
