"""The part of a memory that answers (issue #25): a result's highlight, and what the n-gram
signal reads of a long memory.

A memory of at most PASSAGE_MAX_CHARS characters is its own highlight. A longer one is cut as
its passages are (retrieval.passages.split.pack: the spans its stored passages have, unless
they were made by an older cut) and each span is scored by how much of the query it covers
(the query's character bigrams it holds, read as the reranker's n-grams are: NFKC, lower case,
letters and digits only; each weighted by BM25's IDF among the memory's spans, so that the
article's own subject, named in most spans, does not choose the span) plus VECTOR_WEIGHT
times its similarity to the query, min-max scaled between the least similar passage the vector
leg returned (`floor`: what a passage it did not return has at most) and the best it found in
this memory (0 for one it did not find). The best span wins; the earlier one on a tie.

A memory's spans and their cleaned texts are cached (by bytes): a long memory is a candidate
of many queries, and cleaning its 38,000 characters again for each cost more than the rest of
the reranking.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import TypeVar

from retrieval.cache import ByteLRU
from retrieval.passages.split import PASSAGE_MAX_CHARS, Span, pack

K = TypeVar("K")

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


def lex_idf(n: int, df: int) -> float:
    """The reranker's n-gram weight among n candidates: mild, every n-gram keeps some."""
    return math.log(1 + n / (1 + df))


def bm25_idf(n: int, df: int) -> float:
    """BM25's IDF: an n-gram every text holds weighs almost nothing."""
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def weighted_coverage(
    held: Mapping[K, AbstractSet[str]],
    grams: Collection[str],
    idf: Callable[[int, int], float] = lex_idf,
) -> dict[K, float]:
    """Each text's share of the query's n-grams `grams`, given the ones it holds (`held`), each
    n-gram weighted by how few of these texts hold it (`idf(texts, texts holding it)`)."""
    df: Counter[str] = Counter()
    for h in held.values():
        df.update(h)
    n = len(held)
    w = {g: idf(n, df[g]) for g in grams}
    denom = sum(w.values()) or 1.0
    return {k: sum(w[g] for g in h) / denom for k, h in held.items()}


def focus(
    content: str,
    found: Sequence[tuple[int, int, float]],
    grams: Sequence[str],
    floor: float = 0.0,
) -> tuple[Span, str]:
    """The span of `content` that best answers and its cleaned text: the whole of a short
    memory; of a long one, the passage that covers most of the query's bigrams `grams`
    (weighted within the memory), found passages (start, end, score) counting VECTOR_WEIGHT at
    most."""
    if len(content) <= PASSAGE_MAX_CHARS:
        return Span(0, len(content), True), clean(content)
    texts = dict(cleaned_spans(content))
    top = max((x for _, _, x in found), default=0.0) - floor
    vec = dict.fromkeys(texts, 0.0)
    for a, b, x in found:
        if 0 <= a < b <= len(content) and top > 0:
            if (a, b) not in texts:  # a passage of an older cut
                texts[(a, b)] = clean(content[a:b])
            vec[(a, b)] = max(vec.get((a, b), 0.0), max(x - floor, 0.0) / top)
    cover = weighted_coverage(
        {ab: set(filter(t.__contains__, grams)) for ab, t in texts.items()}, grams, bm25_idf
    )
    best = max(vec, key=lambda ab: cover[ab] + VECTOR_WEIGHT * vec[ab])
    return Span(*best), texts[best]
