"""The part of a memory that answers (issue #25): a result's highlight, and what the n-gram
signal reads of a long memory.

A memory of at most PASSAGE_MAX_CHARS characters is its own highlight. A longer one is cut as
its passages are (retrieval.passages.split.pack: the spans its stored passages have, unless
they were made by an older cut) and each span is scored by how much of the query it covers
(`covers`, given the span's text as the reranker's character n-grams read it: NFKC, lower
case, letters and digits only) plus VECTOR_WEIGHT times its similarity to the query, relative
to the best passage the vector leg found in this memory (0 for one it did not find). The best
span wins; the earlier one on a tie.

A memory's spans and their cleaned texts are cached (by bytes): a long memory is a candidate
of many queries, and cleaning its 38,000 characters again for each cost more than the rest of
the reranking.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence

from retrieval.cache import ByteLRU
from retrieval.passages.split import PASSAGE_MAX_CHARS, Span, pack

# How much being the vector leg's best passage counts against covering the whole query.
VECTOR_WEIGHT = 0.5

# What clean() drops: anything but letters and digits (str.isalnum), "_" included.
_NON_WORD = re.compile(r"[\W_]+")

# Spans and cleaned texts of the long memories seen lately: about 2 bytes a character of
# content (spans overlap a little), so 32 MB hold some 16 million characters.
CLEAN_CACHE_BYTES = 32 * 1024 * 1024


def clean(text: str) -> str:
    """The text as character n-grams read it: NFKC, lower case, letters and digits only."""
    return _NON_WORD.sub("", unicodedata.normalize("NFKC", text).lower())


def _spans_of(content: str) -> dict[tuple[int, int], str]:
    return {(s.start, s.end): clean(content[s.start : s.end]) for s in pack(content)}


_CLEAN: ByteLRU[dict[tuple[int, int], str]] = ByteLRU(
    CLEAN_CACHE_BYTES, lambda _k, v: 200 + sum(100 + 2 * len(t) for t in v.values())
)


def cleaned_spans(content: str) -> dict[tuple[int, int], str]:
    """A long memory's spans (start, end) with their cleaned texts (cached)."""
    return _CLEAN.get_or_compute(content, lambda: _spans_of(content))


def focus(
    content: str, found: Sequence[tuple[int, int, float]], covers: Callable[[str], float]
) -> tuple[Span, str]:
    """The span of `content` that best answers and its cleaned text: the whole of a short
    memory; of a long one, the passage that covers most of the query, found passages (start,
    end, score) counting VECTOR_WEIGHT at most."""
    if len(content) <= PASSAGE_MAX_CHARS:
        return Span(0, len(content), True), clean(content)
    texts = cleaned_spans(content)
    vec = dict.fromkeys(texts, 0.0)
    top = max((x for _, _, x in found), default=0.0)
    for a, b, x in found:
        if 0 <= a < b <= len(content) and top > 0:
            vec[(a, b)] = max(vec.get((a, b), 0.0), x / top)

    def text(ab: tuple[int, int]) -> str:
        got = texts.get(ab)
        return got if got is not None else clean(content[ab[0] : ab[1]])

    best = max(vec, key=lambda ab: covers(text(ab)) + VECTOR_WEIGHT * vec[ab])
    return Span(*best), text(best)
