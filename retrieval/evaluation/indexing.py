"""How an evaluation set gets into the store: indexed once per content, model, schema and
tokenizer (the key is kept beside the namespace), each conversation of a set on its own, and
reused by any later run that finds its record."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from db.eval_indexes import GET_HARNESS_KEY, HAS_MEMORIES, PUT_HARNESS_KEY
from retrieval.errors import RetrievalError
from retrieval.evaluation.data import (
    read_corpus,
)
from retrieval.evaluation.embedding_cache import CachedEmbedder
from retrieval.ingest.items import MemoryItem
from retrieval.ingest.recipe import Vectors, may_follow, recipe
from retrieval.ingest.vectors import check_precomputed, open_vectors
from retrieval.settings import Settings

logger = logging.getLogger(__name__)


def cache_key(corpus: Path, model: str, schema: int, vectors: Path | None) -> str:
    h = hashlib.sha256()
    with open(corpus, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    from retrieval.analysis.time.events import EVENT_READER_VERSION
    from retrieval.text.nlp import TOKENIZER_VERSION

    h.update(
        f"|{model}|{schema}|{TOKENIZER_VERSION}|events {EVENT_READER_VERSION}"
        f"|{'vectors' if vectors else 'embedded'}".encode()
    )
    return h.hexdigest()[:32]


# Removes a namespace's memories (its statistics follow, by trigger) and harness record, and
# those of its sub-namespaces (`NS:conversation`, a conversation set's).
_TABLES = ("postings", "memories", "memory_links", "term_df", "namespace_stats", "harness_indexes")
_DROP_NAMESPACE = [
    f"DELETE FROM {t} WHERE namespace = $1 OR starts_with(namespace, $1 || ':')" for t in _TABLES
]


# The same for one namespace alone (one conversation of a conversation set).
_DROP_ONE = [f"DELETE FROM {t} WHERE namespace = $1" for t in _TABLES]

# Memories indexed per write, and their characters: a write is one transaction under the
# Writer's deadline (RETRIEVAL_WRITE_TIMEOUT_S, 30 s), and the long-memory set's 909 articles
# (5.5 million characters, 13,795 passages) in one went past it here.
INDEX_BATCH = 2000
INDEX_BATCH_CHARS = 500_000


def batches(group: list[tuple[int, MemoryItem]]) -> Iterator[list[tuple[int, MemoryItem]]]:
    """`group` in order, in writes of at most INDEX_BATCH memories and INDEX_BATCH_CHARS
    characters of content (a longer memory alone)."""
    chunk: list[tuple[int, MemoryItem]] = []
    chars = 0
    for row in group:
        size = len(row[1].content)
        if chunk and (len(chunk) >= INDEX_BATCH or chars + size > INDEX_BATCH_CHARS):
            yield chunk
            chunk, chars = [], 0
        chunk.append(row)
        chars += size
    if chunk:
        yield chunk


# Returns the vectors stored in a namespace and its sub-namespaces, with what they were made of.
_STORED_VECTORS = """
SELECT namespace, external_id, title, content, embedding FROM memories
WHERE namespace = $1 OR starts_with(namespace, $1 || ':')"""


def embedding_cache_path(settings: Settings) -> Path:
    """The evaluation's embedding cache (retrieval.evaluation.embedding_cache): a file beside
    the data directory (which is the embedded server's own)."""
    d = settings.data_dir.expanduser().resolve()
    return d.with_name(d.name + "-eval-embeddings.sqlite")


class ForeignNamespace(RetrievalError):
    """The namespace holds memories the harness did not put there; replacing them needs --force."""


def clock_zone(now: datetime | None) -> str | None:
    """The calendar a question is asked in: the zone of its `now`'s offset, when that is whole
    hours (a LoCoMo question's `now` is UTC, so are its conversation's session dates; a Japanese
    set's +09:00 is Asia/Tokyo's). None without `now`: the service's own zone."""
    offset = now.utcoffset() if now is not None else None
    if offset is None:
        return None
    hours, rest = divmod(int(offset.total_seconds()), 3600)
    if rest or not -14 <= hours <= 12:
        return None
    return "UTC" if hours == 0 else f"Etc/GMT{-hours:+d}"


def sub_namespace(namespace: str, line_namespace: str | None) -> str:
    """Where the harness puts (and asks about) a corpus line's or a query's own namespace."""
    return namespace if line_namespace is None else f"{namespace}:{line_namespace}"


async def ensure_index(
    rt: Any,
    corpus: Path,
    namespace: str,
    vectors_path: Path | None,
    *,
    force: bool = False,
    only: set[str] | None = None,
) -> tuple[bool, float]:
    """Index the corpus into namespace unless the harness record says it is already there.
    Lines that name a namespace (a conversation set: one per conversation) go into
    `namespace:theirs`, each conversation indexed and recorded on its own, so that a run over
    a few questions (`only`: their namespaces) indexes only their conversations; the others
    into namespace itself. Returns whether everything needed was there already, and seconds.

    A namespace that holds memories the harness did not write is refused unless `force`:
    indexing replaces everything in it."""
    t0 = time.perf_counter()
    async with rt.pool.acquire() as conn:
        schema = await conn.fetchval("SELECT max(version) FROM schema_migrations")
        stored = await conn.fetchval(GET_HARNESS_KEY, namespace)
        occupied = await conn.fetchval(HAS_MEMORIES, namespace)
    key = cache_key(corpus, rt.embedder.name, int(schema or 0), vectors_path)
    if stored == key:
        return True, time.perf_counter() - t0
    if stored is None and occupied and not force:
        raise ForeignNamespace(
            f"namespace {namespace!r} holds memories that `retrieval eval` did not index; "
            "indexing would delete them. Choose another --namespace, or pass --force"
        )
    groups = read_corpus(corpus)
    embedder = CachedEmbedder(rt.embedder, embedding_cache_path(rt.settings))
    if None in groups:
        await _index_whole(rt, embedder, groups, namespace, vectors_path)
        reused = False
    else:
        reused = True
        for line_ns, group in groups.items():
            if line_ns is not None and (only is None or line_ns in only):
                reused &= await _index_one(rt, embedder, group, namespace, line_ns, key)
    async with rt.pool.acquire() as conn:
        if only is None or None in groups:
            await conn.execute(PUT_HARNESS_KEY, namespace, key)
        await conn.execute("ANALYZE memories")
    return reused, time.perf_counter() - t0


async def _index_whole(
    rt: Any,
    embedder: CachedEmbedder,
    groups: dict[str | None, list[tuple[int, MemoryItem]]],
    namespace: str,
    vectors_path: Path | None,
) -> None:
    """Replace what namespace (and its sub-namespaces) holds with the corpus."""
    vectors = None
    if vectors_path is not None:
        rows = sorted((row, it) for g in groups.values() for row, it in g)
        items = [it for _, it in rows]
        vectors = np.asarray(
            open_vectors(vectors_path, [it.id for it in items], rt.embedder.dim), np.float32
        )
        check_precomputed(rt.embedder, items, vectors)
    kept = await _dropped(rt, namespace, _DROP_NAMESPACE)
    total = sum(len(g) for g in groups.values())
    done = 0
    for line_ns, group in groups.items():
        for chunk in batches(group):
            ns = sub_namespace(namespace, line_ns)
            if vectors is not None:
                vec: Vectors = np.ascontiguousarray(vectors[[r for r, _ in chunk]])
            else:
                vec = _reuse(embedder, kept, ns, [it for _, it in chunk])
            await rt.writer.using(embedder).write([it for _, it in chunk], ns, vectors=vec)
            done += len(chunk)
            logger.info("indexed %d/%d", done, total)


async def _index_one(
    rt: Any,
    embedder: CachedEmbedder,
    group: list[tuple[int, MemoryItem]],
    namespace: str,
    line_ns: str,
    key: str,
) -> bool:
    """One conversation of a conversation set into `namespace:line_ns`, unless its own record
    says it is there; whether it was."""
    ns = sub_namespace(namespace, line_ns)
    async with rt.pool.acquire() as conn:
        if await conn.fetchval(GET_HARNESS_KEY, ns) == key:
            return True
    kept = await _dropped(rt, ns, _DROP_ONE)
    for chunk in batches(group):
        items = [it for _, it in chunk]
        vec = _reuse(embedder, kept, ns, items)
        await rt.writer.using(embedder).write(items, ns, vectors=vec)
    async with rt.pool.acquire() as conn:
        await conn.execute(PUT_HARNESS_KEY, ns, key)
    logger.info("indexed %s (%d memories)", ns, len(group))
    return False


async def _dropped(rt: Any, namespace: str, drop: list[str]) -> dict[tuple[Any, ...], Any]:
    """Empty `namespace` (by the `drop` statements); the vectors it held, by what they were
    made of: a re-index (a new tokenizer, a new schema) embeds again only what it has no
    vector for (the vectors depend on the text and the model, which the key also names)."""
    async with rt.pool.acquire() as conn, conn.transaction():
        kept = {
            (r["namespace"], r["external_id"], r["title"], r["content"]): r["embedding"]
            for r in await conn.fetch(_STORED_VECTORS, namespace, timeout=3600)
        }
        for sql in drop:
            await conn.execute(sql, namespace, timeout=3600)
    return kept


def _reuse(
    embedder: Any, kept: dict[tuple[Any, ...], Any], namespace: str, items: list[MemoryItem]
) -> list[np.ndarray | None]:
    """The chunk's vectors: the stored one where the same memory was indexed before, the rest
    embedded now by the recipe (retrieval.ingest.recipe). A turn that may follow another is
    left to ingest (None): its vector depends on that turn too; so is a long memory, whose
    vector is its passages'."""
    out: list[np.ndarray | None] = [None] * len(items)
    missing: list[tuple[int, str]] = []
    for i, it in enumerate(items):
        own = recipe(it.title, it.content).own
        if may_follow(it) or own is None:
            continue
        v = kept.get((namespace, it.id, it.title, it.content))
        if v is None:
            missing.append((i, own))
        else:
            out[i] = np.asarray(v.to_numpy() if hasattr(v, "to_numpy") else v, np.float32)
    for start in range(0, len(missing), 32):
        part = missing[start : start + 32]
        got = embedder.embed_documents([text for _, text in part])
        for (i, _), v in zip(part, got, strict=True):
            out[i] = v
    return out
