"""The part of a memory that answers (issue #25): a result's highlight, and what the n-gram
signal reads of a long memory.

A memory of at most PASSAGE_MAX_CHARS characters is its own highlight. A longer one is cut as
its passages are (retrieval.passages.split.pack: the spans its stored passages have, unless
they were made by an older cut) and each span is scored by how much of the query it covers
(`covers`, the reranker's character n-grams) plus VECTOR_WEIGHT times its similarity to the
query, relative to the best passage the vector leg found in this memory (0 for one it did not
find). The best span wins; the earlier one on a tie.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache

from retrieval.passages.split import PASSAGE_MAX_CHARS, Span, pack

# How much being the vector leg's best passage counts against covering the whole query.
VECTOR_WEIGHT = 0.5


@lru_cache(maxsize=4096)
def _spans(content: str) -> tuple[Span, ...]:
    return tuple(pack(content))


def focus(
    content: str, found: Sequence[tuple[int, int, float]], covers: Callable[[str], float]
) -> Span:
    """The span of `content` that best answers: the whole of a short memory; of a long one,
    the passage that covers most of the query, found passages (start, end, score) counting
    VECTOR_WEIGHT at most."""
    if len(content) <= PASSAGE_MAX_CHARS:
        return Span(0, len(content), True)
    vec = {(s.start, s.end): 0.0 for s in _spans(content)}
    top = max((x for _, _, x in found), default=0.0)
    for a, b, x in found:
        if 0 <= a < b <= len(content) and top > 0:
            vec[(a, b)] = max(vec.get((a, b), 0.0), x / top)
    best = max(vec, key=lambda ab: covers(content[ab[0] : ab[1]]) + VECTOR_WEIGHT * vec[ab])
    return Span(*best)
