"""`retrieval ingest FILE`: a JSONL file imported all or nothing, resumable, at database speed.

1. Every line is validated first (errors name the line; nothing is written when one is bad).
2. Lines are analysed (Sudachi terms, entities) in chunks, by worker processes on a large file,
   embedded or taken from the precomputed vectors, and staged with COPY; each chunk commits, so
   a run that is interrupted resumes at the first chunk it had not staged.
3. One transaction publishes the import (db.bulk.publish): nothing is visible before it.
The same staging and publish path loads `retrieval bench`'s synthetic memories.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from db import bulk
from db.errors import ImportInProgress
from retrieval.cpus import available_cpus
from retrieval.embedding.base import Embedder
from retrieval.errors import InvalidInput
from retrieval.ingest.index import Clocks, Indexed, Indexer, in_threads, index_texts
from retrieval.ingest.items import LineParser, MemoryItem, json_lines, scan_jsonl
from retrieval.ingest.vectors import check_precomputed, open_vectors
from retrieval.text.nlp import TOKENIZER_VERSION, JapaneseNLP
from retrieval.validation import check_namespace

logger = logging.getLogger(__name__)

# Lines analysed, embedded and staged together (one COPY and one commit each).
CHUNK = 1000
# Files with at least this many items are analysed by worker processes (each loads the
# tokenizer once, which costs seconds: smaller files are faster in this process).
PARALLEL_FROM = 20_000
# Errors reported at most (the first ones, by line).
MAX_ERRORS = 100


@dataclass(frozen=True)
class ImportReport:
    namespace: str
    received: int
    inserted: int
    updated: int
    embedded: int
    resumed_from: int  # lines found already staged by an interrupted run
    rebuilt: tuple[str, ...]
    seconds: float


@dataclass(frozen=True)
class _Scan:
    """What the validation pass learnt: item count, ids, and the file's fingerprint; and how
    its lines are read (the parser the pass validated them with)."""

    count: int
    ids: list[str | None]
    digest: str
    parse: LineParser


def scan(path: Path, parse: LineParser) -> _Scan:
    """Validate every line; raise InvalidInput naming the bad lines (1-based)."""
    ids = scan_jsonl(path, parse, keep=False, max_errors=MAX_ERRORS)[1]
    return _Scan(len(ids), ids, _file_digest(path), parse)


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def import_id(namespace: str, digest: str, embedder: Embedder, vectors: Path | None) -> str:
    """One id per (namespace, file content, vectors, tokenizer, model): a rerun resumes it."""
    h = hashlib.sha256(f"{namespace}\0{digest}\0{TOKENIZER_VERSION}\0{embedder.name}".encode())
    if vectors is not None:
        h.update(_file_digest(vectors).encode())
    return h.hexdigest()[:32]


_WORKER_NLP: JapaneseNLP | None = None


def _init_worker(model: str) -> None:
    global _WORKER_NLP
    _WORKER_NLP = JapaneseNLP(model)


def _index_in_worker(texts: list[str], want: list[bool], clocks: Clocks) -> list[Indexed]:
    assert _WORKER_NLP is not None
    return index_texts(_WORKER_NLP, texts, want, clocks)


def in_processes(executor: ProcessPoolExecutor) -> Indexer:
    """Analyse a chunk in one of the worker processes."""

    async def run(texts: list[str], want: list[bool], clocks: Clocks) -> list[Indexed]:
        return await asyncio.get_running_loop().run_in_executor(
            executor, _index_in_worker, texts, want, clocks
        )

    return run


def auto_workers(count: int) -> int:
    """Worker processes for a file of `count` items: one per available CPU (retrieval.cpus) on
    a large file, else none."""
    return available_cpus() if count >= PARALLEL_FROM else 1


async def import_file(
    rt: Any,
    path: Path,
    *,
    namespace: str,
    parse: LineParser,
    embeddings: Path | None = None,
    workers: int = 0,
    rebuild: bulk.Rebuild = bulk.Rebuild.AUTO,
    progress: Callable[[int], None] | None = None,
    timeout_s: float | None = None,
) -> ImportReport:
    """Import a JSONL file into namespace (see the module's docstring); `parse` validates a
    line (retrieval.ingest.memory_in.parse_line)."""
    t0 = time.perf_counter()
    check_namespace(namespace)
    sc = await asyncio.to_thread(scan, path, parse)
    logger.info("import: %d lines validated in %.1f s", sc.count, time.perf_counter() - t0)
    vectors = open_vectors(embeddings, sc.ids, rt.embedder.dim) if embeddings is not None else None
    iid = import_id(namespace, sc.digest, rt.embedder, embeddings)
    # One connection holds the import's lock from begin to publish: a second run of the same
    # import is refused instead of staging the same lines twice.
    async with rt.pool.acquire() as conn:
        if not await bulk.try_lock(conn, iid):
            raise ImportInProgress(
                f"another run is importing {path} into {namespace!r}; rerun when it has ended"
            )
        try:
            return await _run(rt, conn, path, sc, iid, namespace, vectors, workers, rebuild,
                              progress, timeout_s, t0)  # fmt: skip
        finally:
            await bulk.unlock(conn, iid)


async def _run(
    rt: Any,
    conn: Any,
    path: Path,
    sc: _Scan,
    iid: str,
    namespace: str,
    vectors: np.ndarray | None,
    workers: int,
    rebuild: bulk.Rebuild,
    progress: Callable[[int], None] | None,
    timeout_s: float | None,
    t0: float,
) -> ImportReport:
    """Stage what an earlier run did not, then publish (under the import's lock, on conn)."""
    done = await bulk.begin(conn, iid, namespace)
    workers = workers or auto_workers(sc.count)
    executor = (
        ProcessPoolExecutor(workers, initializer=_init_worker, initargs=(rt.nlp.model_name,))
        if workers > 1
        else None
    )
    try:
        analyse = in_processes(executor) if executor else in_threads(rt.nlp)
        embedded = await _stage_all(
            rt, path, sc.parse, iid, namespace, vectors, analyse, done, workers, progress
        )
    except InvalidInput:  # the vectors are not this model's: nothing staged is worth keeping
        await bulk.discard(conn, iid)
        raise
    finally:
        if executor:
            executor.shutdown(cancel_futures=True)
    logger.info("import: staged by %.1f s (%d workers)", time.perf_counter() - t0, workers)
    pub = await bulk.publish(conn, iid, namespace, rebuild=rebuild, timeout_s=timeout_s)
    return ImportReport(
        namespace,
        sc.count,
        pub.inserted,
        pub.updated,
        embedded,
        done,
        pub.rebuilt,
        time.perf_counter() - t0,
    )


def _chunks(
    path: Path, after: int, parse: LineParser
) -> Iterator[list[tuple[int, int, MemoryItem]]]:
    """(line, item index, item) in chunks, for the lines after `after`."""
    chunk: list[tuple[int, int, MemoryItem]] = []
    for index, (lineno, line) in enumerate(json_lines(path)):
        if lineno <= after:
            continue
        item = parse(line, lineno)
        assert isinstance(item, MemoryItem)  # scan() validated every line
        chunk.append((lineno, index, item))
        if len(chunk) == CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


async def _stage_all(
    rt: Any,
    path: Path,
    parse: LineParser,
    iid: str,
    namespace: str,
    vectors: np.ndarray | None,
    analyse: Indexer,
    done: int,
    workers: int,
    progress: Callable[[int], None] | None,
) -> int:
    """Prepare chunks concurrently (as many as there are workers, plus one) and stage them in
    file order; returns how many items were embedded."""
    embedded = 0
    checked = False

    async def prepare(chunk: list[tuple[int, int, MemoryItem]]) -> tuple[list[int], list[Any], int]:
        items = [it for _, _, it in chunk]
        ids = [it.id or f"{iid[:12]}-{line}" for line, _, it in chunk]
        vecs = np.asarray(vectors[[i for _, i, _ in chunk]]) if vectors is not None else None
        rows, n = await rt.writer.rows(items, ids, namespace, vectors=vecs, analyse=analyse)
        return [line for line, _, _ in chunk], rows, n

    pending: list[asyncio.Task[tuple[list[int], list[Any], int]]] = []
    chunks = _chunks(path, done, parse)
    try:
        while True:
            while len(pending) < workers + 1 and (chunk := next(chunks, None)) is not None:
                if vectors is not None and not checked:
                    head = chunk[:3]
                    given = np.asarray(vectors[[i for _, i, _ in head]], dtype=np.float32)
                    await asyncio.to_thread(
                        check_precomputed, rt.embedder, [it for _, _, it in head], given
                    )
                    checked = True
                pending.append(asyncio.create_task(prepare(chunk)))
            if not pending:
                return embedded
            lines, rows, n = await pending.pop(0)
            async with rt.pool.acquire() as conn:
                await bulk.stage(conn, iid, list(zip(lines, rows, strict=True)))
            embedded += n
            if progress:
                progress(len(rows))
    finally:
        for task in pending:
            task.cancel()
