"""Test doubles: a deterministic embedder (unit tests only, never a default) and fake legs."""

from __future__ import annotations

import asyncio
import hashlib
from datetime import UTC

import numpy as np

from retrieval.models import Candidate, Source


class FakeEmbedder:
    """Hashes character bigrams into a fixed-size vector: similar strings, similar vectors."""

    name = "fake-bigram-hash"

    def __init__(self, dim: int = 384) -> None:
        self.dim = dim

    def _one(self, text: str) -> np.ndarray:
        v = np.zeros(self.dim, dtype=np.float32)
        t = "".join(text.split())
        for i in range(max(len(t) - 1, 1)):
            h = int.from_bytes(
                hashlib.blake2b(t[i : i + 2].encode(), digest_size=4).digest(), "little"
            )
            v[h % self.dim] += 1.0
        n = np.linalg.norm(v)
        return v / n if n else v

    def embed_query(self, text: str, *, background: bool = False) -> np.ndarray:
        return self._one(text)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return (
            np.stack([self._one(t) for t in texts])
            if texts
            else np.zeros((0, self.dim), np.float32)
        )

    def cost_units(self, text: str) -> int:
        return len(text)


def cand(
    id: int, score: float, source: Source, content: str = "", created_at=None, emb=None
) -> Candidate:
    from datetime import datetime

    return Candidate(
        id=id,
        external_id=f"m{id}",
        content=content or f"memory {id}",
        title=None,
        memory_type="semantic",
        source_type="note",
        metadata={},
        created_at=created_at or datetime(2026, 11, 1, tzinfo=UTC),
        embedding=emb if emb is not None else np.eye(8, dtype=np.float32)[id % 8],
        score=score,
        source=source,
    )


def fixed_source(results: list[Candidate], delay: float = 0.0):
    async def fn(run, given):
        if delay:
            await asyncio.sleep(delay)
        return results

    return fn


def failing_source(exc: Exception):
    async def fn(run, given):
        raise exc

    return fn
