"""Memory rows in and out: reads by id, the idempotent upsert (with entities and links) and
feedback. The BM25 statistics (`namespace_stats`, `term_df`, `postings`) follow from the rows
PostgreSQL really wrote, through the statement triggers of migrations 0002 and 0004; writers of
one namespace are serialised by an advisory lock, so concurrent upserts of the same ids cannot
count a change twice."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import asyncpg
import numpy as np
from pgvector import Vector

from db.errors import NotFound, WriteConflict
from db.session import session

logger = logging.getLogger(__name__)

# A memory as the API shows it (m: memories), with the links it made, the attribute it states
# (null: none, or not read yet) and the newest live memory of its namespace that states the same
# one later (superseded_by; over idx_memories_fact).
MEMORY_COLUMNS = """
m.external_id, m.namespace, m.content, m.title, m.memory_type, m.source_type, m.metadata,
m.created_at, m.ingested_at, m.expires_at, m.is_archived, m.searchable, m.thread,
nullif(m.fact, '') AS fact, m.event_time, m.event_offset,
CASE WHEN coalesce(m.fact, '') <> '' THEN (
  SELECT n.external_id FROM memories n
  WHERE n.namespace = m.namespace AND n.fact = m.fact AND n.created_at > m.created_at
    AND NOT n.is_archived
  ORDER BY n.created_at DESC, n.id DESC LIMIT 1) END AS superseded_by,
coalesce((SELECT jsonb_agg(jsonb_build_object('to', l.to_external, 'label', l.label)
                           ORDER BY l.to_external, l.label)
          FROM memory_links l
          WHERE l.namespace = m.namespace AND l.from_external = m.external_id),
         '[]'::jsonb) AS links"""

# Returns one live or archived memory of a namespace by its external id.
GET_MEMORY = f"""
SELECT {MEMORY_COLUMNS}
FROM memories m WHERE m.namespace = $1 AND m.external_id = $2"""

# Archives a memory; returns its external id when it existed.
ARCHIVE_MEMORY = """
UPDATE memories SET is_archived = true WHERE namespace = $1 AND external_id = $2
RETURNING external_id"""

# Feedback: $3 false (negative) takes the memory out of every future search, true (positive)
# puts back what a negative one took out. Returns whether a search may now return it (an
# archived memory stays out), or no row when it does not exist.
MARK_SEARCHABLE = """
UPDATE memories SET searchable = $3 WHERE namespace = $1 AND external_id = $2
RETURNING searchable AND NOT is_archived"""

# Records a feedback event.
# Returns 1, or no row when $1 is a run of another namespace (a run not logged yet, or
# purged, cannot be checked and is taken as given).
INSERT_FEEDBACK = """
INSERT INTO feedback (run_id, namespace, external_id, negative, comment)
SELECT $1, $2, $3, $4, $5
WHERE NOT EXISTS (SELECT 1 FROM retrieval_runs WHERE run_id = $1 AND namespace <> $2)
RETURNING 1"""

# Returns the stored text, tokens, vector and entities of the given external ids (to skip
# re-embedding unchanged text; read outside the write transaction, it decides only what to embed).
GET_EXISTING = """
SELECT external_id, title, content, search_tokens, embedding, fact, created_at,
       event_time, event_offset, event_read,
       ARRAY(SELECT e.entity FROM memory_entities e WHERE e.memory_id = memories.id) AS entities,
       ARRAY(SELECT e.weight FROM memory_entities e WHERE e.memory_id = memories.id)
           AS entity_weights
FROM memories WHERE namespace = $1 AND external_id = ANY($2::text[])"""

# Returns, per ordinal i of the arrays, the turn written before item i in its thread: the
# latest memory of thread $2[i] created before $3[i] (now() when null) other than $4[i] itself
# (read backwards on idx_memories_thread_time).
GET_THREAD_PREDECESSORS = """
SELECT u.i, p.title, p.content, p.created_at
FROM unnest($2::text[], $3::timestamptz[], $4::text[]) WITH ORDINALITY AS u(thread, at, id, i)
CROSS JOIN LATERAL (
  SELECT m.title, m.content, m.created_at FROM memories m
  WHERE m.namespace = $1 AND m.thread = u.thread AND m.created_at < coalesce(u.at, now())
    AND m.external_id <> u.id AND NOT m.is_archived
  ORDER BY m.created_at DESC, m.id DESC LIMIT 1) AS p"""

# Returns the title and content of the given external ids (the memories items reply to).
GET_TEXTS = """
SELECT external_id, title, content FROM memories
WHERE namespace = $1 AND external_id = ANY($2::text[]) AND NOT is_archived"""

# Makes the weekly vector partitions (migration 0009) of these instants and of now (a row
# without created_at gets now()).
ENSURE_WEEKS = "SELECT memory_vectors_ensure(array_append($1::timestamptz[], now()))"

# Serialises the writers of one namespace for the rest of the transaction. The statistics
# triggers lock term_df rows in term order within one trigger, but an upsert fires two
# triggers (insert, then update) whose lock sets are not in one order between them.
LOCK_NAMESPACE = "SELECT pg_advisory_xact_lock(hashtextextended($1, 7231904118))"

# The columns a memory row writes, in the order of MemoryRow.columns().
COLUMNS = (
    "external_id",
    "content",
    "title",
    "memory_type",
    "source_type",
    "metadata",
    "embedding",
    "search_tokens",
    "token_count",
    "created_at",
    "expires_at",
    "thread",
    "fact",
    "event_time",
    "event_offset",
    "event_read",
)
_TYPES = (
    "text",
    "text",
    "text",
    "text",
    "text",
    "jsonb",
    "vector",
    "text",
    "int",
    "timestamptz",
    "timestamptz",
    "text",
    "text",
    "tstzrange",
    "int",
    "smallint",
)

# Rows given as arrays ($2..$17), one array per column.
ARRAY_SOURCE = (
    "unnest("
    + ", ".join(f"${i + 2}::{t}[]" for i, t in enumerate(_TYPES))
    + ") AS u("
    + ", ".join(COLUMNS)
    + ")"
)


def upsert_sql(source: str, *, given_created_at: bool) -> str:
    """Insert or replace the rows of `source` (aliased `u`, columns COLUMNS) into namespace $1,
    in id order (a stable lock order). An update keeps the stored created_at unless the row
    gives one; rows that give one and rows that do not are written by the two forms."""
    created = "EXCLUDED.created_at" if given_created_at else "memories.created_at"
    return f"""
INSERT INTO memories (external_id, namespace, content, title, memory_type, source_type, metadata,
                      embedding, search_tokens, token_count, created_at, expires_at, thread,
                      fact, event_time, event_offset, event_read, term_tf)
SELECT u.external_id, $1, u.content, u.title, u.memory_type, u.source_type, u.metadata,
       u.embedding, u.search_tokens, u.token_count, coalesce(u.created_at, now()), u.expires_at,
       u.thread, u.fact, u.event_time, u.event_offset, u.event_read,
       (SELECT coalesce(jsonb_object_agg(lexeme, array_length(positions, 1)), '{{}}'::jsonb)
        FROM unnest(to_tsvector('simple', u.search_tokens)))
FROM {source}
ORDER BY u.external_id
ON CONFLICT (namespace, external_id) DO UPDATE SET
    content = EXCLUDED.content, title = EXCLUDED.title, memory_type = EXCLUDED.memory_type,
    source_type = EXCLUDED.source_type, metadata = EXCLUDED.metadata,
    embedding = EXCLUDED.embedding, search_tokens = EXCLUDED.search_tokens,
    token_count = EXCLUDED.token_count, term_tf = EXCLUDED.term_tf, created_at = {created},
    expires_at = EXCLUDED.expires_at, thread = EXCLUDED.thread, fact = EXCLUDED.fact,
    event_time = EXCLUDED.event_time, event_offset = EXCLUDED.event_offset,
    event_read = EXCLUDED.event_read, is_archived = false,
    ingested_at = now()
RETURNING id, external_id, (xmax = 0) AS inserted"""


_UPSERT = {
    given: upsert_sql(
        f"(SELECT * FROM {ARRAY_SOURCE} WHERE (u.created_at IS NOT NULL) = {given}) AS u",
        given_created_at=given,
    )
    for given in (True, False)
}

# Replace the entities of the memories just written ($2 ids, $3 entities, $4 weights).
DELETE_ENTITIES = "DELETE FROM memory_entities WHERE memory_id = ANY($1::bigint[])"
_INSERT_ENTITIES = """
INSERT INTO memory_entities (namespace, entity, memory_id, weight)
SELECT $1, x.entity, x.id, x.weight
FROM unnest($2::bigint[], $3::text[], $4::real[]) AS x(id, entity, weight)
ON CONFLICT DO NOTHING"""
# Replace the links the memories just written make ($2 from, $3 to, $4 label).
DELETE_LINKS = """
DELETE FROM memory_links WHERE namespace = $1 AND from_external = ANY($2::text[])"""
_INSERT_LINKS = """
INSERT INTO memory_links (namespace, from_external, to_external, label)
SELECT $1, x.f, x.t, x.l FROM unnest($2::text[], $3::text[], $4::text[]) AS x(f, t, l)
ON CONFLICT DO NOTHING"""

# Replace the passages of the memories just written ($1 ids; then $1..$5 one array per column).
DELETE_PASSAGES = "DELETE FROM memory_passages WHERE memory_id = ANY($1::bigint[])"
_INSERT_PASSAGES = """
INSERT INTO memory_passages (memory_id, ord, namespace, start_char, end_char, embedding)
SELECT x.id, x.ord, $1, x.s, x.e, x.v
FROM unnest($2::bigint[], $3::int[], $4::int[], $5::int[], $6::vector[]) AS x(id, ord, s, e, v)"""

# A write that lost a deadlock or a serialisation race is retried this many times.
WRITE_ATTEMPTS = 4


@dataclass(frozen=True, slots=True)
class MemoryRow:
    """One memory as stored: text, its index terms, its vector, its names and links."""

    external_id: str
    content: str
    embedding: Any  # float32 vector (numpy array or pgvector Vector)
    search_tokens: str  # index terms joined by spaces
    token_count: int
    title: str | None = None
    memory_type: str = "semantic"
    source_type: str = "unknown"
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None
    expires_at: datetime | None = None
    thread: str | None = None
    # The changing attribute it states and whose ("residence", "car:mother"); "" for none.
    fact: str = ""
    # When what it tells happened (migration 0021): [start, end) or None, the offset it was
    # read in (seconds) and who placed it (the reader's version; 0: the caller).
    event: StoredEvent | None = None
    entities: Sequence[tuple[str, float]] = ()  # (normalised name, weight)
    links: Sequence[tuple[str, str]] = ()  # (to external id, label)
    # A long memory's passages (start, end, vector) in order; () none; None: leave the stored
    # ones (the text is unchanged).
    passages: Sequence[tuple[int, int, Any]] | None = ()

    def columns(self) -> tuple[Any, ...]:
        """The values of COLUMNS for this row."""
        return (
            self.external_id,
            self.content,
            self.title,
            self.memory_type,
            self.source_type,
            self.metadata,
            as_vector(self.embedding),
            self.search_tokens,
            self.token_count,
            self.created_at,
            self.expires_at,
            self.thread,
            self.fact,
            *(self.event or NO_EVENT_READ).columns(),
        )


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """A memory's event as stored: its range ([start, end) instants, or None: its words place
    none), the UTC offset it was read in (seconds) and who placed it (the reader's version;
    0 the caller; None not read yet)."""

    range: tuple[datetime, datetime] | asyncpg.Range | None
    offset: int | None
    read: int | None

    def columns(self) -> tuple[Any, ...]:
        r = self.range
        if isinstance(r, tuple):
            r = asyncpg.Range(r[0], r[1], lower_inc=True, upper_inc=False)
        return (r, self.offset, self.read)


# A row written without an event read (not read: the re-read pass reads it).
NO_EVENT_READ = StoredEvent(None, None, None)


def event_shown(rng: asyncpg.Range | None, offset: int | None) -> dict[str, str] | None:
    """An event as the API shows it: {start, end} in ISO 8601, in the offset it was read in
    (end exclusive), or None."""
    if rng is None or rng.isempty or rng.lower is None or rng.upper is None:
        return None
    zone = timezone(timedelta(seconds=offset or 0))
    return {
        "start": rng.lower.astimezone(zone).isoformat(),
        "end": rng.upper.astimezone(zone).isoformat(),
    }


async def get_memory(
    conn: asyncpg.Connection, namespace: str, external_id: str, *, timeout_s: float | None
) -> dict[str, Any] | None:
    """One memory of a namespace, archived or not, as the API shows it (`id` its external id);
    None when absent."""
    row = await conn.fetchrow(GET_MEMORY, namespace, external_id, timeout=timeout_s)
    return None if row is None else _shown(row)


def _shown(row: asyncpg.Record) -> dict[str, Any]:
    """A memory's row as the API shows it: `id` its external id, links and metadata decoded."""
    out = dict(row)
    out["id"] = out.pop("external_id")
    for k in ("links", "metadata"):
        if isinstance(out[k], str):
            out[k] = json.loads(out[k])
    out["event_time"] = event_shown(out["event_time"], out.pop("event_offset"))
    return out


async def archive(
    conn: asyncpg.Connection, namespace: str, external_id: str, *, timeout_s: float | None
) -> bool:
    """Archive a memory; whether it existed."""
    got = await conn.fetchval(ARCHIVE_MEMORY, namespace, external_id, timeout=timeout_s)
    return got is not None


async def record_feedback(
    conn: asyncpg.Connection,
    namespace: str,
    external_id: str,
    *,
    negative: bool,
    run_id: str | None,
    comment: str | None,
    timeout_s: float | None,
) -> bool:
    """Record feedback on a memory, in the caller's transaction: negative takes it out of every
    future search, positive puts it back (a mark made by mistake is undone). Returns whether a
    search may return it now (an archived one stays out). NotFound when the memory, or the run
    named, is not this namespace's (the caller's transaction then rolls back: nothing is
    marked)."""
    searchable = await conn.fetchval(
        MARK_SEARCHABLE, namespace, external_id, not negative, timeout=timeout_s
    )
    if searchable is None:
        raise NotFound(f"no memory {external_id!r} in namespace {namespace!r}")
    run = uuid.UUID(run_id) if run_id else None
    args = (run, namespace, external_id, negative, comment)
    if await conn.fetchval(INSERT_FEEDBACK, *args, timeout=timeout_s) is None:
        raise NotFound(f"no run {run_id} in namespace {namespace!r}")
    return bool(searchable)


# A page of namespace $1's memories after external id $2 (null: from the first), in external id
# order, with the links each made: the listing's and the export's rows. Filters: thread $3,
# created at or after $4 and before $5, archived ones too when $6. Returns at most $7 rows.
LIST_MEMORIES = f"""
SELECT {MEMORY_COLUMNS}
FROM memories m
WHERE m.namespace = $1 AND ($2::text IS NULL OR m.external_id > $2)
  AND ($3::text IS NULL OR m.thread = $3)
  AND ($4::timestamptz IS NULL OR m.created_at >= $4)
  AND ($5::timestamptz IS NULL OR m.created_at < $5)
  AND ($6 OR NOT m.is_archived)
ORDER BY m.external_id
LIMIT $7"""


@dataclass(frozen=True)
class Page:
    """Which memories of a namespace a listing asks for."""

    after: str | None = None
    thread: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    include_archived: bool = False


async def list_memories(
    conn: asyncpg.Connection, namespace: str, page: Page, limit: int, *, timeout_s: float | None
) -> list[dict[str, Any]]:
    """Up to `limit` memories of the namespace after `page.after`, in external id order (a
    memory written meanwhile is listed when its id comes later; none is listed twice), each
    with the links it made; `id` is its external id."""
    rows = await conn.fetch(
        LIST_MEMORIES,
        namespace,
        page.after,
        page.thread,
        page.since,
        page.until,
        page.include_archived,
        limit,
        timeout=timeout_s,
    )
    return [_shown(r) for r in rows]


def as_vector(v: Any) -> Vector:
    """A pgvector value from a numpy array, a list or a Vector."""
    return v if isinstance(v, Vector) else Vector(np.asarray(v, dtype=np.float32))


async def existing(
    conn: asyncpg.Connection, namespace: str, ids: list[str], *, timeout_s: float | None = None
) -> dict[str, Any]:
    """The stored text, tokens, vector and entities of those ids, by external id."""
    rows = await conn.fetch(GET_EXISTING, namespace, ids, timeout=timeout_s)
    return {r["external_id"]: r for r in rows}


@dataclass(frozen=True, slots=True)
class StoredTurn:
    """A stored memory's text (and time) as the context of another."""

    title: str | None
    content: str
    created_at: datetime | None = None


async def thread_predecessors(
    conn: asyncpg.Connection,
    namespace: str,
    wanted: Sequence[tuple[str, datetime | None, str]],
    *,
    timeout_s: float | None = None,
) -> dict[int, StoredTurn]:
    """For each (thread, created_at, external id) wanted, by its index: the stored memory
    before it in its thread, where there is one."""
    if not wanted:
        return {}
    threads, ats, ids = (list(x) for x in zip(*wanted, strict=True))
    rows = await conn.fetch(
        GET_THREAD_PREDECESSORS, namespace, threads, ats, ids, timeout=timeout_s
    )
    return {r["i"] - 1: StoredTurn(r["title"], r["content"], r["created_at"]) for r in rows}


async def texts_of(
    conn: asyncpg.Connection, namespace: str, ids: Sequence[str], *, timeout_s: float | None = None
) -> dict[str, StoredTurn]:
    """The stored text of those external ids that exist (and are not archived)."""
    if not ids:
        return {}
    rows = await conn.fetch(GET_TEXTS, namespace, list(ids), timeout=timeout_s)
    return {r["external_id"]: StoredTurn(r["title"], r["content"]) for r in rows}


@dataclass(frozen=True, slots=True)
class TurnsBefore:
    """The stored turns others follow: by external id (the turns replied to) and, for each
    (thread, created_at, id) asked, the stored turn before it in its thread (or None)."""

    texts: dict[str, StoredTurn]
    before: list[StoredTurn | None]


async def turns_before(
    conn: asyncpg.Connection,
    namespace: str,
    replied: Sequence[str],
    threaded: Sequence[tuple[str, datetime | None, str]],
    *,
    timeout_s: float | None = None,
) -> TurnsBefore:
    """The texts of the stored turns `replied` names, and each `threaded` turn's stored
    predecessor in its thread."""
    texts = await texts_of(conn, namespace, replied, timeout_s=timeout_s)
    found = await thread_predecessors(conn, namespace, threaded, timeout_s=timeout_s)
    return TurnsBefore(texts, [found.get(k) for k in range(len(threaded))])


@dataclass(frozen=True, slots=True)
class WriteContext:
    """What a write reads before it writes: the rows stored under its ids (text, terms, vector,
    names, attribute) and the stored turns its turns follow."""

    existing: dict[str, Any]
    turns: TurnsBefore


async def write_context(
    conn: asyncpg.Connection,
    namespace: str,
    ids: list[str],
    replied: Sequence[str],
    threaded: Sequence[tuple[str, datetime | None, str]],
    *,
    timeout_s: float | None = None,
) -> WriteContext:
    """One read, on one connection, of a write's context (`existing`, `turns_before`)."""
    stored = await existing(conn, namespace, ids, timeout_s=timeout_s)
    turns = await turns_before(conn, namespace, replied, threaded, timeout_s=timeout_s)
    return WriteContext(stored, turns)


async def upsert(
    pool: asyncpg.Pool, namespace: str, rows: Sequence[MemoryRow], *, timeout_s: float | None
) -> int:
    """Write rows (and replace their entities and links) in one transaction, retried when it
    loses a deadlock; returns how many rows were inserted (the rest were updated). The whole
    write, its waits included, ends within `timeout_s` whatever the server's state
    (db.session); None: the pool's own bounds."""
    if not rows:
        return 0
    async with session(pool, timeout_s if timeout_s is not None else 3600.0) as conn:
        await ensure_weeks(conn, [r.created_at for r in rows if r.created_at], timeout_s)
        for attempt in range(WRITE_ATTEMPTS):
            try:
                await conn.execute("BEGIN", timeout=timeout_s)
                inserted = await _upsert_once(conn, namespace, rows, timeout_s)
                await conn.execute("COMMIT", timeout=timeout_s)
                return inserted
            except (asyncpg.DeadlockDetectedError, asyncpg.SerializationError) as exc:
                # The server answered: the transaction is aborted, the connection fine.
                await conn.execute("ROLLBACK", timeout=timeout_s)
                if attempt == WRITE_ATTEMPTS - 1:
                    raise WriteConflict(
                        f"write lost {WRITE_ATTEMPTS} deadlocks in a row: {exc}"
                    ) from exc
                logger.warning(
                    "write into %r lost a deadlock; retrying (%d)", namespace, attempt + 1
                )
                await asyncio.sleep(0.05 * 2**attempt)
    raise AssertionError("unreachable")


async def ensure_weeks(conn: Any, stamps: list[datetime], timeout_s: float | None) -> int:
    """Make the weekly vector partitions for these instants (and now) in a statement, so a
    transaction, of its own: making one holds the default partition's lock until commit.
    Returns how many were made. A write never waits long for it: the function gives up on a
    week whose locks it cannot take within 3 s, and the rows of that week land in the default
    partition (still searched) until a later write makes it."""
    return int(await conn.fetchval(ENSURE_WEEKS, stamps, timeout=timeout_s))


async def _upsert_once(
    conn: asyncpg.Connection, namespace: str, rows: Sequence[MemoryRow], timeout_s: float | None
) -> int:
    await conn.execute(LOCK_NAMESPACE, namespace, timeout=timeout_s)
    arrays = [list(col) for col in zip(*(r.columns() for r in rows), strict=True)]
    inserted = 0
    written: dict[str, int] = {}
    for given in (True, False):
        if not any((r.created_at is not None) == given for r in rows):
            continue
        got = await conn.fetch(_UPSERT[given], namespace, *arrays, timeout=timeout_s)
        inserted += sum(1 for r in got if r["inserted"])
        written.update((r["external_id"], r["id"]) for r in got)
    entities = [(written[r.external_id], e, w) for r in rows for e, w in r.entities]
    await conn.execute(DELETE_ENTITIES, list(written.values()), timeout=timeout_s)
    if entities:
        await conn.execute(_INSERT_ENTITIES, namespace, *_transpose(entities), timeout=timeout_s)
    links = [(r.external_id, to, label) for r in rows for to, label in r.links]
    await conn.execute(DELETE_LINKS, namespace, list(written), timeout=timeout_s)
    if links:
        await conn.execute(_INSERT_LINKS, namespace, *_transpose(links), timeout=timeout_s)
    await write_passages(conn, namespace, [(written[r.external_id], r) for r in rows], timeout_s)
    return inserted


async def write_passages(
    conn: asyncpg.Connection,
    namespace: str,
    rows: Sequence[tuple[int, MemoryRow]],
    timeout_s: float | None,
) -> None:
    """Replace the passages of the (memory id, row) whose row gives them."""
    given = [(mid, r) for mid, r in rows if r.passages is not None]
    if not given:
        return
    await conn.execute(DELETE_PASSAGES, [mid for mid, _ in given], timeout=timeout_s)
    parts = [
        (mid, n, s, e, as_vector(v))
        for mid, r in given
        for n, (s, e, v) in enumerate(r.passages or ())
    ]
    if parts:
        await conn.execute(_INSERT_PASSAGES, namespace, *_transpose(parts), timeout=timeout_s)


def _transpose(pairs: list[tuple[Any, ...]]) -> list[list[Any]]:
    return [list(col) for col in zip(*pairs, strict=True)]
