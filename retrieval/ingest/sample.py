"""The packaged sample memories (README's first command), shifted so the newest is today."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from importlib import resources
from typing import TYPE_CHECKING

import numpy as np

from retrieval.ingest.items import MemoryItem

if TYPE_CHECKING:
    from retrieval.runtime import Runtime

# The instant the sample was written relative to (scripts/make_sample.py).
ANCHOR = datetime.fromisoformat("2026-11-22T12:00:00+09:00")


def sample_items(now: datetime) -> tuple[list[MemoryItem], np.ndarray]:
    """The sample memories with created_at moved by (now - ANCHOR), and their vectors."""
    data = resources.files("retrieval").joinpath("data")
    shift: timedelta = now - ANCHOR
    items = []
    for line in data.joinpath("sample_memories.jsonl").read_text("utf-8").splitlines():
        obj = json.loads(line)
        obj["created_at"] = (datetime.fromisoformat(obj["created_at"]) + shift).isoformat()
        items.append(MemoryItem.from_json(obj))
    with data.joinpath("sample_memories_e5.npy").open("rb") as fh:
        vectors = np.load(fh)
    return items, vectors


async def load_sample(rt: Runtime, namespace: str = "default") -> int:
    """Ingest the sample (idempotent on ids) with the runtime's resources; returns how many
    memories it holds. Its vectors are used where they are the configured model's."""
    items, vectors = sample_items(datetime.now(rt.analyzer.tz))
    use = (
        vectors
        if rt.embedder.name == "intfloat/multilingual-e5-small"
        and vectors.shape[1] == rt.embedder.dim
        else None
    )
    rep = await rt.writer.write(items, namespace, vectors=use)
    return rep.received
