"""Precomputed vectors for an import (`--embeddings F.npy`, row i = item i): refused unless the
shape, the ids and the configured model agree."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from retrieval.embedding.base import Embedder
from retrieval.errors import InvalidInput
from retrieval.ingest.items import MemoryItem
from retrieval.ingest.recipe import embedding_text


def check_precomputed(
    embedder: Embedder, items: list[MemoryItem], vectors: np.ndarray, rows: int = 3
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
    fresh = embedder.embed_documents(
        [embedding_text(items[i].title, items[i].content) for i in picks]
    )
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
