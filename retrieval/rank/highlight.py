"""The part of a memory that answers: a result's highlight, and what the n-gram
signal reads of a long memory.

A memory of at most PASSAGE_MAX_CHARS characters is its own highlight. A longer one is cut as
its passages are (retrieval.text.passages.pack: the spans its stored passages have, unless
they were made by an older cut) and each span is scored by how much of the query it covers
(the query's character bigrams it holds, read as the reranker's n-grams are: NFKC, lower case,
letters and digits only; each weighted by BM25's IDF among the memory's spans, so that the
article's own subject, named in most spans, does not choose the span) plus VECTOR_WEIGHT
times its similarity to the query, min-max scaled between the least similar passage the vector
leg returned (`floor`: what a passage it did not return has at most) and the best it found in
this memory (0 for one it did not find). The best span wins; the earlier one on a tie.

A long memory's spans and the character bigrams each holds are indexed once and cached (by
bytes): a long memory is a candidate of many queries, and testing each of its spans for each of
the query's bigrams again (a 38,000-character article has some 70 spans) cost more than the
rest of the reranking — 22 ms a longdoc query in the reranker, and as much again in choosing
the seeds of the second wave. With the index (SpanIndex: each span's bigrams as sorted integer
codes) a candidate's coverage is one binary search of all the query's bigrams, and a request's
candidates are scored together (focus_all): 50 long candidates of the longdoc set cost ~6 ms
where testing substrings cost ~19 (docs/benchmarks-log.md). The cache is keyed by the memory (its
row id) as well as its text: a tenant's request must not run faster because another tenant's
memory of the same text was read a moment ago (its timing would tell that the text is there).
"""

from __future__ import annotations

import functools
import math
import sys
from collections import Counter
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from retrieval.analysis.chars import clean
from retrieval.cache import ByteLRU
from retrieval.text.passages import PASSAGE_MAX_CHARS, Span, pack

K = TypeVar("K")

# How much being the vector leg's best passage counts against covering the whole query.
VECTOR_WEIGHT = 0.5

# The span indexes of the long memories seen lately: about 7 bytes a character of content (a
# bigram code and the span holding it, 12 where a character lies beyond the BMP; the spans'
# cleaned texts, 2 more), so 64 MB hold some 9 million characters (the longdoc set's 909
# articles are 5.5 million).
INDEX_CACHE_BYTES = 64 * 1024 * 1024

# A span's number sits below the bigram in the key SpanIndex.of() sorts by (a memory of
# 100,000 characters has far fewer spans).
_SPAN_BITS = 17


@dataclass(eq=False)
class SpanIndex:
    """A long memory's spans (as pack() cuts it), each span's cleaned text (`texts`: what a
    highlight returns, so that it is not cleaned again per request), and which character
    bigrams each holds: `codes` sorted (two code points, `shift` bits apart: 16 when every
    character is in the BMP, else 21), `owner` the span of each (a bigram once per span)."""

    spans: tuple[tuple[int, int], ...]
    shift: int
    codes: np.ndarray
    owner: np.ndarray
    texts: tuple[str, ...]

    @classmethod
    def of(cls, content: str) -> SpanIndex:
        spans = tuple((s.start, s.end) for s in pack(content))
        texts = [clean(content[a:b]) for a, b in spans]
        # One pass over the spans' texts, each ended by a NUL (clean() keeps none): a bigram
        # that holds one is no bigram of a span.
        cp = np.frombuffer("\0".join([*texts, ""]).encode("utf-32-le"), dtype=np.uint32)
        cp = cp.astype(np.int64)
        shift = 16 if cp.size == 0 or int(cp.max()) < 1 << 16 else 21
        span = np.repeat(np.arange(len(texts), dtype=np.int64), [len(t) + 1 for t in texts])
        real = (cp[:-1] != 0) & (cp[1:] != 0)
        code = (cp[:-1] << shift) | cp[1:]
        key = np.sort((code[real] << _SPAN_BITS) | span[:-1][real])
        key = key[np.diff(key, prepend=-1) != 0]  # np.unique: 10x slower here
        narrow = shift == 16 and len(texts) < 1 << 15
        return cls(
            spans,
            shift,
            (key >> _SPAN_BITS).astype(np.uint32 if narrow else np.int64),
            (key & ((1 << _SPAN_BITS) - 1)).astype(np.int16 if narrow else np.int32),
            tuple(texts),
        )

    @property
    def nbytes(self) -> int:
        return (
            200
            + 16 * len(self.spans)
            + self.codes.nbytes
            + self.owner.nbytes
            + sum(sys.getsizeof(t) for t in self.texts)
        )

    def text(self, content: str, ab: tuple[int, int]) -> str:
        """clean() of `content[a:b]`, read from `texts` when (a, b) is one of the spans."""
        k = self.position.get(ab)
        return self.texts[k] if k is not None else clean(content[ab[0] : ab[1]])

    @functools.cached_property
    def position(self) -> dict[tuple[int, int], int]:
        """Each span's place in `spans`."""
        return {ab: k for k, ab in enumerate(self.spans)}


@functools.lru_cache(maxsize=64)
def bigram_codes(grams: tuple[str, ...], shift: int) -> np.ndarray:
    """The bigrams as SpanIndex codes (-1 for one a 16-bit index cannot hold), then each code
    plus one: searched for together, they bound each bigram's run of codes. A request asks
    for them once per candidate."""
    q = np.fromiter(
        ((ord(g[0]) << shift) | ord(g[1]) if max(map(ord, g)) < 1 << shift else -1 for g in grams),
        np.int64,
        len(grams),
    )
    return np.concatenate((q, q + 1))


_INDEX: ByteLRU[SpanIndex] = ByteLRU(INDEX_CACHE_BYTES, lambda _k, v: v.nbytes, memory_at=0)


def span_index(content: str, owner: Hashable) -> SpanIndex:
    """A long memory's span index, cached under (owner, content): `owner` is the memory (its
    id), so that no entry serves two tenants (required: a caller that forgot it would share)."""
    return _INDEX.get_or_compute((owner, content), lambda: SpanIndex.of(content))


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


def span_coverages(
    contents: Sequence[str],
    grams: Sequence[str],
    extras: Sequence[Sequence[tuple[int, int]]],
    memories: Sequence[Hashable],
) -> list[tuple[list[tuple[int, int]], np.ndarray, SpanIndex]]:
    """For each long memory of `contents`: its spans (pack()'s, then those of `extras` an older
    cut made), weighted_coverage(…, bm25_idf) of the query's bigrams `grams` by each, read
    through the memories' indexes in one pass (per memory, one binary search of all bigrams),
    and its index. `memories`: each content's memory (its id: span_index)."""
    if not contents:
        return []
    g = tuple(grams)
    ixs = [span_index(c, m) for c, m in zip(contents, memories, strict=True)]
    spans = [
        [*ix.spans, *(ab for ab in dict.fromkeys(ex) if ab not in ix.position)]
        for ix, ex in zip(ixs, extras, strict=True)
    ]
    if not g or any(len(x) != 2 for x in g):  # a one-character query: tested by substring
        out = []
        for content, sp, ix in zip(contents, spans, ixs, strict=True):
            each = weighted_coverage(
                {ab: set(filter(clean(content[ab[0] : ab[1]]).__contains__, g)) for ab in sp},
                g,
                bm25_idf,
            )
            out.append((sp, np.fromiter((each[ab] for ab in sp), np.float64, len(sp)), ix))
        return out
    sizes = np.array([len(sp) for sp in spans], np.int64)
    offsets = np.cumsum(sizes) - sizes
    held = np.zeros((len(ixs), len(g)), np.int64)  # how many spans of each memory hold each
    owners = []
    late: list[tuple[int, int, np.ndarray]] = []  # (memory, its first extra, [gram, extra])
    for j, (ix, sp, content) in enumerate(zip(ixs, spans, contents, strict=True)):
        lohi = ix.codes.searchsorted(bigram_codes(g, ix.shift))
        lo, n = lohi[: len(g)], lohi[len(g) :] - lohi[: len(g)]
        held[j] = n
        at = np.repeat(lo - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))
        owners.append(ix.owner[at].astype(np.int64) + offsets[j])
        if len(sp) > len(ix.spans):
            texts = [clean(content[a:b]) for a, b in sp[len(ix.spans) :]]
            late.append((j, len(ix.spans), np.array([[x in t for t in texts] for x in g])))
    df = held.copy()
    for j, _, m in late:
        df[j] += m.sum(axis=1)
    w = np.log1p((sizes[:, None] - df + 0.5) / (df + 0.5))  # bm25_idf, memory by memory
    denom = w.sum(axis=1)
    denom[denom == 0] = 1.0
    cover: np.ndarray = np.bincount(
        np.concatenate(owners),
        weights=np.repeat(w.ravel(), held.ravel()),
        minlength=int(sizes.sum()),
    ).astype(np.float64)
    for j, first, m in late:
        cover[offsets[j] + first : offsets[j] + sizes[j]] = w[j] @ m
    cover /= np.repeat(denom, sizes)
    return [(sp, cover[o : o + len(sp)], ix) for sp, o, ix in zip(spans, offsets, ixs, strict=True)]


def focus_all(
    items: Sequence[tuple[str, Sequence[tuple[int, int, float]]]],
    grams: Sequence[str],
    floor: float = 0.0,
    *,
    memories: Sequence[Hashable],
) -> list[tuple[Span, str]]:
    """focus() of each (content, found passages), the long memories' coverage in one pass;
    `memories`: each item's memory (its id), which its span index is cached under."""
    out: list[tuple[Span, str]] = [(Span(0, len(c), True), "") for c, _ in items]
    longs = []
    ids = list(memories)
    if len(ids) != len(items):
        raise ValueError("focus_all: one memory per item")
    for i, (content, found) in enumerate(items):
        if len(content) <= PASSAGE_MAX_CHARS:
            out[i] = (Span(0, len(content), True), clean(content))
            continue
        top = max((x for _, _, x in found), default=0.0) - floor
        inside = [(a, b, x) for a, b, x in found if 0 <= a < b <= len(content) and top > 0]
        longs.append((i, content, inside, top))
    covered = span_coverages(
        [c for _, c, _, _ in longs],
        grams,
        [[(a, b) for a, b, _ in f] for _, _, f, _ in longs],
        [ids[i] for i, _, _, _ in longs],
    )
    for (i, content, inside, top), (spans, cover, ix) in zip(longs, covered, strict=True):
        if not spans:  # nothing but blanks
            out[i] = (Span(0, len(content), True), clean(content))
            continue
        vec = np.zeros(len(spans))
        if inside:
            at = {ab: k for k, ab in enumerate(spans)}
            for a, b, x in inside:
                vec[at[(a, b)]] = max(vec[at[(a, b)]], max(x - floor, 0.0) / top)
        # The earlier on a tie: sums of equal weights added in another order differ in the
        # last bits.
        a, b = spans[int(np.argmax(np.round(cover + VECTOR_WEIGHT * vec, 12)))]
        out[i] = (Span(a, b), ix.text(content, (a, b)))
    return out


def focus(
    content: str,
    found: Sequence[tuple[int, int, float]],
    grams: Sequence[str],
    floor: float = 0.0,
    *,
    owner: Hashable,
) -> tuple[Span, str]:
    """The span of `content` that best answers and its cleaned text: the whole of a short
    memory; of a long one, the passage that covers most of the query's bigrams `grams`
    (weighted within the memory), found passages (start, end, score) counting VECTOR_WEIGHT at
    most. `owner`: the memory (its id), as in span_index()."""
    return focus_all([(content, found)], grams, floor, memories=[owner])[0]
