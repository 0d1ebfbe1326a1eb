"""The harness writes a corpus in batches bounded by memories and by characters: one write is
one transaction under the Writer's deadline, and the long-memory set's articles in one write
went past it."""

from __future__ import annotations

from retrieval.evaluation import indexing
from retrieval.evaluation.indexing import batches
from retrieval.ingest.items import MemoryItem


def _group(*sizes: int) -> list[tuple[int, MemoryItem]]:
    return [(i, MemoryItem(content="x" * n, id=f"m{i}")) for i, n in enumerate(sizes)]


def test_a_batch_ends_before_the_memory_that_would_pass_the_characters(monkeypatch):
    monkeypatch.setattr(indexing, "INDEX_BATCH_CHARS", 100)
    got = [[r for r, _ in chunk] for chunk in batches(_group(40, 50, 20, 100, 250, 5))]
    # 40 + 50 fit, 20 more would be 110; a memory longer than the bound is a write of its own.
    assert got == [[0, 1], [2], [3], [4], [5]]


def test_a_batch_holds_at_most_the_memories_bound_and_keeps_the_order(monkeypatch):
    monkeypatch.setattr(indexing, "INDEX_BATCH", 3)
    got = [[r for r, _ in chunk] for chunk in batches(_group(*[1] * 7))]
    assert got == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(batches([])) == []
