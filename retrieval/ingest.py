"""The write path: validate every item first, embed in batches, then write all in one transaction."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from retrieval.embeddings import Embedder
from retrieval.errors import InvalidInput
from retrieval.nlp import JapaneseNLP

logger = logging.getLogger(__name__)

MAX_CONTENT_CHARS = 100_000


class MemoryIn(BaseModel):
    """One memory to store; `text` is accepted as another name for `content`."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)

    id: str | None = Field(default=None, min_length=1, max_length=512)
    content: str = Field(min_length=1, max_length=MAX_CONTENT_CHARS)
    title: str | None = Field(default=None, max_length=1000)
    created_at: datetime | None = None
    expires_at: datetime | None = None
    memory_type: str = Field(default="semantic", min_length=1, max_length=64)
    source_type: str = Field(default="unknown", min_length=1, max_length=64)
    metadata: dict[str, Any] = Field(default_factory=dict)

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
        if "\x00" in v:
            raise ValueError("must not contain NUL characters")
        return v

    @field_validator("created_at", "expires_at")
    @classmethod
    def _aware(cls, v: datetime | None) -> datetime | None:
        if v is not None and v.tzinfo is None:
            raise ValueError("must be ISO 8601 with a UTC offset, e.g. 2025-01-31T09:00:00+09:00")
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
    """What gets embedded: title and content, as the shared corpus vectors were made."""
    return f"{item.title}\n{item.content}" if item.title else item.content


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


# Returns the stored digest and tokens of the given external ids (to skip re-embedding).
_EXISTING = """
SELECT external_id, encode(sha256(convert_to(coalesce(title || E'\\n', '') || content, 'UTF8')), 'hex') AS digest,
       search_tokens, embedding, tsvector_to_array(content_tsvector) AS lexemes
FROM memories WHERE namespace = $1 AND external_id = ANY($2::text[])"""

# Returns the distinct lexemes PostgreSQL makes of each token string (what term_df must count).
_LEXEMES = """
SELECT tsvector_to_array(to_tsvector('simple', t)) AS lexemes
FROM unnest($1::text[]) WITH ORDINALITY AS x(t, i) ORDER BY i"""

# Inserts or replaces one memory; returns whether it was inserted (xmax = 0).
_UPSERT = """
INSERT INTO memories (external_id, namespace, content, title, memory_type, source_type, metadata,
                      embedding, search_tokens, token_count, created_at, expires_at, term_tf)
VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, $9, $10, coalesce($11, now()), $12,
        (SELECT coalesce(jsonb_object_agg(lexeme, array_length(positions, 1)), '{}'::jsonb)
         FROM unnest(to_tsvector('simple', $9::text))))
ON CONFLICT (namespace, external_id) DO UPDATE SET
    content = EXCLUDED.content, title = EXCLUDED.title, memory_type = EXCLUDED.memory_type,
    source_type = EXCLUDED.source_type, metadata = EXCLUDED.metadata, embedding = EXCLUDED.embedding,
    search_tokens = EXCLUDED.search_tokens, token_count = EXCLUDED.token_count, term_tf = EXCLUDED.term_tf,
    created_at = coalesce($11, memories.created_at), expires_at = EXCLUDED.expires_at,
    is_archived = false, ingested_at = now()
"""

# Adds document-frequency deltas for BM25.
_DF_DELTA = """
INSERT INTO term_df (namespace, term, df)
SELECT $1, t, d FROM unnest($2::text[], $3::int[]) AS x(t, d)
ON CONFLICT (namespace, term) DO UPDATE SET df = term_df.df + EXCLUDED.df"""

# Adds document-count and length deltas for BM25.
_NS_DELTA = """
INSERT INTO namespace_stats (namespace, doc_count, total_tokens) VALUES ($1, $2, $3)
ON CONFLICT (namespace) DO UPDATE SET doc_count = namespace_stats.doc_count + EXCLUDED.doc_count,
    total_tokens = namespace_stats.total_tokens + EXCLUDED.total_tokens"""


def check_precomputed(embedder: Embedder, items: list[MemoryIn], vectors: np.ndarray, rows: int = 3) -> None:
    """Refuse precomputed vectors that the configured model would not have produced."""
    if vectors.shape != (len(items), embedder.dim):
        raise InvalidInput([{"field": "embeddings", "reason": f"expected shape ({len(items)}, {embedder.dim}), got {vectors.shape}"}])
    picks = sorted({0, len(items) // 2, len(items) - 1})[:rows] if items else []
    if not picks:
        return
    fresh = embedder.embed_passages([passage_text(items[i]) for i in picks])
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
) -> IngestReport:
    """Store items idempotently (by id) in one transaction; nothing is written on any error."""
    t0 = time.perf_counter()
    if not namespace or len(namespace) > 128:
        raise InvalidInput([{"field": "namespace", "reason": "must be 1-128 characters"}])
    ids = [it.id or uuid.uuid4().hex for it in items]
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
    for i in need:
        token_lists[i] = await loop.run_in_executor(None, nlp.terms, texts[i])

    emb: list[Any] = [existing[ids[i]]["embedding"] if ids[i] in existing else None for i in range(len(items))]
    if vectors is not None:
        for i in need:
            emb[i] = vectors[i].astype(np.float32)
        if progress:
            progress(len(need))
    else:
        for start in range(0, len(need), batch_size):
            batch = need[start : start + batch_size]
            vecs = await loop.run_in_executor(None, embedder.embed_passages, [texts[i] for i in batch])
            for j, i in enumerate(batch):
                emb[i] = vecs[j]
            if progress:
                progress(len(batch))

    async with pool.acquire() as conn:
        lexemes = [
            r["lexemes"]
            for r in await conn.fetch(_LEXEMES, [" ".join(token_lists[i]) for i in need])
        ]
    df_delta: Counter[str] = Counter()
    token_delta = 0
    new_docs = 0
    for j, i in enumerate(need):
        old = existing.get(ids[i])
        if old is not None:
            df_delta.subtract(set(old["lexemes"]))
            token_delta -= len(old["search_tokens"].split())
        else:
            new_docs += 1
        df_delta.update(set(lexemes[j]))
        token_delta += len(token_lists[i])
    terms = sorted(t for t, d in df_delta.items() if d != 0)

    rows = [
        (
            ids[i], namespace, it.content, it.title, it.memory_type, it.source_type,
            it.metadata, emb[i], " ".join(token_lists[i]),
            len(token_lists[i]), it.created_at, it.expires_at,
        )
        for i, it in enumerate(items)
    ]
    async with pool.acquire() as conn, conn.transaction():
        await conn.executemany(_UPSERT, rows)
        if terms:
            await conn.execute(_DF_DELTA, namespace, terms, [df_delta[t] for t in terms])
        await conn.execute(_NS_DELTA, namespace, new_docs, token_delta)
    inserted = sum(1 for i in ids if i not in existing)
    return IngestReport(
        namespace=namespace,
        received=len(items),
        inserted=inserted,
        updated=len(items) - inserted,
        reembedded=len(need),
        ids=ids,
        seconds=time.perf_counter() - t0,
    )
