"""Documents (memories, passages) embedded in bounded calls on background threads: a write, inline
or a job, takes the CPU that searches leave and costs the tenants searching meanwhile nothing; a
request or job given up on stops after the call in flight."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from retrieval.embedding.base import EMBED_MAX_CHARS, Embedder, lower_priority
from retrieval.embedding.scheduling.meter import EmbedMeter

# Awaited between two calls of a long embedding (a job renews its lease).
Tick = Callable[[], Awaitable[None]]

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


class DocumentEmbedding:
    """The write path's embedding threads: documents (memories, passages) are embedded in the
    background (nice 19), so a write, inline or a job, takes the CPU that searches leave and
    costs the tenants searching meanwhile nothing; idle, it runs at full speed. The runtime
    builds one (the Writer's) and closes it with itself; a maintenance pass run alone opens its
    own for its length. Its threads start with the first call, never at import."""

    def __init__(self, threads: int = 2) -> None:
        self._pool = ThreadPoolExecutor(
            max_workers=threads, thread_name_prefix="embed-write", initializer=lower_priority
        )

    async def embed(
        self,
        embedder: Embedder,
        texts: list[str],
        batch_size: int,
        *,
        meter: EmbedMeter | None = None,
        tick: Tick | None = None,
    ) -> list[Any]:
        """The texts' vectors, a bounded call at a time on these threads (timed by `meter`;
        `tick` awaited between calls)."""
        loop = asyncio.get_running_loop()
        out: list[Any] = []

        def timed(texts: list[str]) -> np.ndarray:
            t = time.perf_counter()
            got = embedder.embed_documents(texts)
            if meter is not None:
                meter.record(meter.units(texts), time.perf_counter() - t)
            return got

        for call in embed_batches(texts, batch_size):
            out.extend(await loop.run_in_executor(self._pool, timed, call))
            if tick is not None:
                await tick()
        return out

    def close(self) -> None:
        """Stop the threads (a call in flight finishes; nothing queued runs)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> DocumentEmbedding:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
