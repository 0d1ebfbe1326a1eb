"""The one recipe, and a write's plan by it: how a memory becomes the texts the embedder sees
and how their vectors make the memory's own vector and its passages'. The write path
(retrieval.ingest.writer), its cost estimate, the maintenance passes and the evaluation's
vector reuse all follow it.

- A memory of at most SPLIT_ABOVE characters is embedded whole: its title and content, cut at
  EMBED_MAX_CHARS.
- A turn that follows another (a `reply_to` link, else the turn before it in its thread, in the
  same write or already stored) is embedded twice, alone and after the end of that turn, and
  stored as the mean of the two: the vector legs rank by inner product, so its score is the mean
  of two cosines ("Yes, last Tuesday!" is found for the question it answered). Measured with
  e5-small alone on locomo_dev: recall@10 .525 -> .618, MRR@10 .354 -> .433. The turn followed
  is the one stored (or in the same write) when the turn is written: a turn written later
  before it in its thread does not change its vector.
- A longer memory is cut into passages (retrieval.text.passages), each embedded with the
  memory's title; the memory's own vector is their mean direction (what it is about as a
  whole), unless one is given.

Every text is embedded as a document ("passage: " for e5); a query's side is
retrieval.embedding.scheduling.query.

A write (`plan`, then `embed`): its ids (a new one where an item gives none, none twice), one
read of what is stored (the rows under its ids, the turns its turns follow), what stands of an
unchanged memory (its vector, terms, names and attribute), each changed memory's recipe with the
turn it follows, and every text to embed in the order the embedding goes: each memory's own,
then after its turn, then the passages.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, tzinfo
from typing import Any, Literal, Protocol

import asyncpg
import numpy as np

from db import memories
from db.memories import StoredEvent, StoredTurn
from db.session import session
from retrieval.analysis.facts import stored_fact
from retrieval.analysis.time.events import told_by_its_kind
from retrieval.embedding.base import EMBED_MAX_CHARS, Embedder
from retrieval.embedding.scheduling.documents import DocumentEmbedding, Tick
from retrieval.embedding.scheduling.meter import EmbedMeter
from retrieval.ingest.items import MemoryItem
from retrieval.text.passages import Span, split_passages
from retrieval.validation import check_batch

# How much of the turn followed is embedded before a turn (its end: what was said last).
PREDECESSOR_CHARS = 1000

# Given vectors, row i for item i; a None row is embedded by the write.
Vectors = np.ndarray | Sequence[np.ndarray | None]

_LATEST = datetime.max.replace(tzinfo=UTC)


class Turn(Protocol):
    """A turn another one follows: what it said (its title, when it has one)."""

    @property
    def title(self) -> str | None: ...

    @property
    def content(self) -> str: ...


def memory_text(title: str | None, content: str) -> str:
    """A memory's title and content as one text: what is embedded (cut) and tokenised (whole)."""
    return f"{title}\n{content}" if title else content


def embedding_text(title: str | None, content: str) -> str:
    """What a short memory's own vector is made from."""
    return memory_text(title, content)[:EMBED_MAX_CHARS]


def turn_text(before: Turn, own: str) -> str:
    """A turn's text after the turn it follows: the end of that turn, a line break, then its
    own text (`own`: its memory_text), the whole cut at EMBED_MAX_CHARS."""
    prev = memory_text(before.title, before.content)
    return f"{prev[-PREDECESSOR_CHARS:]}\n{own}"[:EMBED_MAX_CHARS]


def passage_text(title: str | None, content: str, span: Span) -> str:
    """What a passage's vector is made from: the memory's title (its context) and the span."""
    part = content[span.start : span.end]
    return f"{title}\n{part}" if title else part


def mean_direction(vectors: Sequence[Any]) -> np.ndarray:
    """The unit vector along the mean of unit vectors: a long memory's own vector, from its
    passages' (what it is about as a whole, for the temporal leg and near-duplicates)."""
    m = np.mean(np.asarray(vectors, np.float32), axis=0)
    return (m / max(float(np.linalg.norm(m)), 1e-12)).astype(np.float32)


# One passage of a memory as it is stored: [start, end) of the content and its vector.
PassageRow = tuple[int, int, Any]


@dataclass(frozen=True)
class Recipe:
    """The texts one memory is embedded as: its own (unless its vector is given, or it is long),
    after the turn it follows (a turn that follows one), and its passages' (a long memory)."""

    own: str | None
    after: str | None
    spans: tuple[Span, ...]
    passages: tuple[str, ...]

    @property
    def texts(self) -> list[str]:
        """Every text, in the order own, after, passages."""
        return [t for t in (self.own, self.after) if t is not None] + list(self.passages)

    def vector(
        self,
        own: np.ndarray | None,
        after: np.ndarray | None,
        passages: Sequence[np.ndarray],
        given: np.ndarray | None = None,
    ) -> np.ndarray:
        """The memory's vector from the vectors of its texts: the given one, else the mean of
        its own and its after-the-turn vector, else its own, else its passages' direction."""
        if given is not None:
            return given
        if own is not None and after is not None:
            return ((own + after) / 2).astype(np.float32)
        if own is not None:
            return own
        return mean_direction(passages)

    def passage_rows(self, vectors: Sequence[np.ndarray]) -> list[PassageRow]:
        """The passages as stored, with their vectors (in order)."""
        return [(sp.start, sp.end, v) for sp, v in zip(self.spans, vectors, strict=True)]


def recipe(
    title: str | None, content: str, *, before: Turn | None = None, given: bool = False
) -> Recipe:
    """What to embed of a memory: `before` is the turn it follows (None: none), `given` whether
    its own vector is given (precomputed: a long memory's passages are still embedded)."""
    spans = tuple(split_passages(content))
    passages = tuple(passage_text(title, content, sp) for sp in spans)
    if spans or given:
        return Recipe(None, None, spans, passages)
    own = memory_text(title, content)
    after = turn_text(before, own) if before is not None else None
    return Recipe(own[:EMBED_MAX_CHARS], after, spans, passages)


# One text a write embeds: the item (its index in the write), what of it the text is (its own
# text, the text after the turn it follows, a passage) and the text.
Slot = tuple[int, Literal["own", "after", "passage"], str]


def embedding_slots(recipes: Mapping[int, Recipe]) -> list[Slot]:
    """The recipes' texts in the one order a write embeds them: every own text, then every text
    after its turn, then every passage; each with whose it is and what of it (embed reads the
    vectors back by these slots, so the order is written here only)."""
    return (
        [(i, "own", t) for i, rc in recipes.items() if (t := rc.own) is not None]
        + [(i, "after", t) for i, rc in recipes.items() if (t := rc.after) is not None]
        + [(i, "passage", t) for i, rc in recipes.items() for t in rc.passages]
    )


# The turn a conversation turn follows.


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


def followed(
    items: Sequence[MemoryItem],
    ids: Sequence[str],
    picks: Sequence[int],
    stored_texts: dict[str, StoredTurn],
    stored_before: dict[int, StoredTurn | None],
) -> dict[int, StoredTurn]:
    """The turn each picked item follows, by index: what it replies to (in this write, else
    `stored_texts`, by id), else the later of its thread's turn before it in this write and in
    the store (`stored_before`, by index)."""
    index = {x: i for i, x in enumerate(ids)}
    out: dict[int, StoredTurn] = {}
    picks = [i for i in picks if may_follow(items[i])]
    for i in picks:
        t = replied_to(items[i])
        if t is not None and t in index and index[t] != i:
            out[i] = _turn_of(items[index[t]])
        elif t is not None and t in stored_texts:
            out[i] = stored_texts[t]
    threaded = [i for i in picks if i not in out and items[i].thread is not None]
    in_write = batch_predecessors(items, threaded)
    for i in threaded:
        mine, theirs = in_write.get(i), stored_before.get(i)
        if mine is not None and (
            theirs is None or (theirs.created_at or _LATEST) <= (items[mine].created_at or _LATEST)
        ):
            out[i] = _turn_of(items[mine])
        elif theirs is not None:
            out[i] = theirs
    return out


def _asked(
    items: Sequence[MemoryItem], ids: Sequence[str], picks: Sequence[int]
) -> tuple[list[str], list[int]]:
    """What to read of the store for `followed`: the stored ids the picked items reply to, and
    the picked items with a thread."""
    index = set(ids)
    targets = sorted(
        {t for i in picks if (t := replied_to(items[i])) is not None and t not in index}
    )
    return targets, [i for i in picks if items[i].thread is not None]


async def predecessors(
    conn: asyncpg.Connection,
    namespace: str,
    items: Sequence[MemoryItem],
    ids: Sequence[str],
    picks: Sequence[int],
    *,
    timeout_s: float | None = None,
) -> dict[int, StoredTurn]:
    """`followed`, reading what it needs of the store (the maintenance pass's turns)."""
    picks = [i for i in picks if may_follow(items[i])]
    if not picks:
        return {}
    targets, threaded = _asked(items, ids, picks)
    got = await memories.turns_before(
        conn, namespace, targets, _thread_keys(items, ids, threaded), timeout_s=timeout_s
    )
    return followed(items, ids, picks, got.texts, dict(zip(threaded, got.before, strict=True)))


def _thread_keys(
    items: Sequence[MemoryItem], ids: Sequence[str], threaded: Sequence[int]
) -> list[tuple[str, datetime | None, str]]:
    return [(str(items[i].thread), items[i].created_at, ids[i]) for i in threaded]


# A write's plan.


def assign_ids(items: Sequence[MemoryItem], max_batch: int | None = None) -> list[str]:
    """Each item's id, a new one where it gives none; InvalidInput for a batch over `max_batch`
    or with an id twice (validation.check_batch, the write's one check of both)."""
    ids = [it.id or uuid.uuid4().hex for it in items]
    check_batch(ids, max_batch)
    return ids


def unchanged(item: MemoryItem, stored: Any) -> bool:
    """Whether a stored row (title, content) holds this item's text: its vector and terms stand."""
    return stored is not None and (stored["title"], stored["content"]) == (item.title, item.content)


@dataclass(frozen=True)
class Kept:
    """What stands of an unchanged memory: its stored terms, names (and weights), attribute and
    vector, and its stored event when its time is unchanged too (None: read it again). A row
    written before attributes were read has none stored: it is read now."""

    terms: list[str]
    entities: list[tuple[str, float]]
    fact: str
    vector: Any
    event: StoredEvent | None = None

    @classmethod
    def of(cls, row: Any, item: MemoryItem) -> Kept:
        fact = row["fact"]
        if fact is None:
            fact = stored_fact(memory_text(row["title"], row["content"]))
        found = list(zip(row["entities"], row["entity_weights"], strict=True))
        same_time = item.created_at is None or item.created_at == row["created_at"]
        event = (
            StoredEvent(row["event_time"], row["event_offset"], row["event_read"])
            if same_time and item.event_time is None and row["event_read"] is not None
            else None
        )
        return cls(row["search_tokens"].split(), found, fact, row["embedding"], event)


def clock_of(item: MemoryItem, stored: Any, now: datetime) -> datetime:
    """The instant a memory's words are read against (its event: retrieval.analysis.time.events):
    its created_at, in the offset it was given in; else the stored one (an update keeps it);
    else `now` (aware, in the writer's zone), as the store will date it."""
    if item.created_at is not None:
        return item.created_at
    if stored is not None and stored["created_at"] is not None:
        return stored["created_at"].astimezone(now.tzinfo)
    return now


@dataclass(frozen=True)
class Plan:
    """What a write does, decided once: the items and their ids; which are new or changed
    (`need`: analysed and embedded) and what stands of the others (`kept`); each changed one's
    recipe, with the turn it follows; the vectors given; every text to embed, in order (also
    the cost estimate's); the texts to analyse and whether each one's names are to be read."""

    namespace: str
    items: list[MemoryItem]
    ids: list[str]
    need: list[int]
    kept: dict[int, Kept]
    recipes: dict[int, Recipe]
    given: dict[int, np.ndarray]
    slots: list[Slot]
    texts: list[str]  # the slots' texts, in their order (the cost estimate's)
    read: list[str]
    want_entities: list[bool]
    # What `read`'s events are read against (None: the caller gave the event) and the instant
    # of every item (the kept ones' event, when their time changed).
    clocks: list[tuple[datetime, bool] | None]
    written: list[datetime]


async def plan(
    pool: asyncpg.Pool,
    namespace: str,
    items: list[MemoryItem],
    *,
    ids: Sequence[str] | None = None,
    vectors: Vectors | None = None,
    max_batch: int | None = None,
    timeout_s: float | None = None,
    zone: tzinfo = UTC,
) -> Plan:
    """The write's plan: `ids` fixed already (else assigned and checked), `vectors` given per
    item (None rows are embedded), one read of the store bounded by `timeout_s`; a memory
    without a time is read in `zone`'s calendar."""
    ids = list(ids) if ids is not None else assign_ids(items, max_batch)
    picks = [i for i, it in enumerate(items) if may_follow(it)]
    targets, threaded = _asked(items, ids, picks)
    async with session(pool, timeout_s if timeout_s is not None else 3600.0) as conn:
        stored = await memories.write_context(
            conn, namespace, ids, targets, _thread_keys(items, ids, threaded), timeout_s=timeout_s
        )
    need = [i for i, x in enumerate(ids) if not unchanged(items[i], stored.existing.get(x))]
    changed = set(need)
    given = (
        {i: np.asarray(vectors[i], np.float32) for i in need if vectors[i] is not None}
        if vectors is not None
        else {}
    )
    recipes = {i: recipe(items[i].title, items[i].content, given=i in given) for i in need}
    before = followed(
        items,
        ids,
        [i for i, rc in recipes.items() if rc.own is not None],
        stored.turns.texts,
        dict(zip(threaded, stored.turns.before, strict=True)),
    )
    for i, turn in before.items():
        it = items[i]
        recipes[i] = replace(recipes[i], after=turn_text(turn, memory_text(it.title, it.content)))
    slots = embedding_slots(recipes)
    now = datetime.now(zone)
    written = [clock_of(it, stored.existing.get(x), now) for it, x in zip(items, ids, strict=True)]
    return Plan(
        namespace=namespace,
        items=items,
        ids=ids,
        need=need,
        kept={
            i: Kept.of(stored.existing[x], items[i]) for i, x in enumerate(ids) if i not in changed
        },
        recipes=recipes,
        given=given,
        slots=slots,
        texts=[t for _, _, t in slots],
        read=[memory_text(items[i].title, items[i].content) for i in need],
        want_entities=[items[i].entities is None for i in need],
        clocks=[
            (written[i], told_by_its_kind(items[i].memory_type, items[i].source_type))
            if items[i].event_time is None
            else None
            for i in need
        ],
        written=written,
    )


@dataclass(frozen=True)
class Embedded:
    """A plan's embedding: each changed memory's vector and passages (by item index)."""

    vectors: dict[int, np.ndarray]
    passages: dict[int, list[PassageRow]]


async def embed(
    planned: Plan,
    embedder: Embedder,
    documents: DocumentEmbedding,
    batch_size: int,
    *,
    meter: EmbedMeter | None = None,
    tick: Tick | None = None,
) -> Embedded:
    """Every changed memory's vector and passages, from its texts' vectors read back by the
    plan's slots (embedding_slots: the order is written there only), embedded in bounded calls
    on the write path's threads (`documents`)."""
    texts = planned.texts
    got = (
        await documents.embed(embedder, texts, batch_size, meter=meter, tick=tick) if texts else []
    )
    own: dict[int, np.ndarray] = {}
    after: dict[int, np.ndarray] = {}
    parts: dict[int, list[np.ndarray]] = {}
    for (i, what, _), v in zip(planned.slots, got, strict=True):
        if what == "passage":
            parts.setdefault(i, []).append(v)
        else:
            (own if what == "own" else after)[i] = v
    vectors: dict[int, np.ndarray] = {}
    passages: dict[int, list[PassageRow]] = {}
    for i, rc in planned.recipes.items():
        vecs = parts.get(i, [])
        vectors[i] = rc.vector(own.get(i), after.get(i), vecs, planned.given.get(i))
        passages[i] = rc.passage_rows(vecs)
    return Embedded(vectors, passages)
