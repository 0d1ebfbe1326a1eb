"""The character n-gram signal (ref-llmless-hybrid-rerank's `lex`, IDF-aware): how much of the
query's character n-grams a candidate holds, read where it answers (a long memory's
highlight), blended into the fused score; and the bigram sets the near-duplicate test compares."""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping, Sequence

import numpy as np

from retrieval.analysis.chars import clean
from retrieval.cache import ByteLRU
from retrieval.models import Candidate, Preset, Source
from retrieval.rank.highlight import focus_all, weighted_coverage
from retrieval.text.passages import SPLIT_ABOVE, Span

# The n-gram signal reads at most this many characters of a memory: a 100k-character memory
# holds nearly every common n-gram anyway, and its n-grams cost ~44 ms to make and ~7 MB to
# cache (the cache would hold a handful). Every passage of the shared corpora is shorter.
LEX_MAX_CHARS = 4000


def char_ngrams(text: str, n: int = 2) -> set[str]:
    t = clean(text)
    return {t[i : i + n] for i in range(len(t) - n + 1)} if len(t) >= n else ({t} if t else set())


# A memory's n-grams are kept as integers (CODE_BITS a character: every code point fits), sorted,
# each once: 8 bytes an n-gram where a set of strings took ~110, so the cache holds some 14 times
# as many memories, and made in less than half the time (texts of every dev set, cut at
# LEX_MAX_CHARS: 94 us against 222, clean() included). The query's n-grams are looked up.
CODE_BITS = 21
# The longest n-gram a code holds (3 x 21 bits: an int64).
MAX_CODED_N = 3


def _code_points(t: str) -> np.ndarray:
    return np.frombuffer(t.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)


def _coded(chars: list[np.ndarray]) -> np.ndarray:
    """The codes of n-grams given as their characters' code points, one array per place in
    the n-gram (the first character's, the second's, ...)."""
    code = chars[0].copy()
    for c in chars[1:]:
        code = (code << CODE_BITS) | c
    return code


def gram_codes(t: str, n: int) -> np.ndarray:
    """The n-grams of a cleaned text (n <= MAX_CODED_N, len(t) >= n) as sorted int64 codes."""
    cp = _code_points(t)
    m = len(cp) - n + 1
    code = _coded([cp[i : i + m] for i in range(n)])
    code.sort()
    return code[np.diff(code, prepend=-1) != 0]  # np.unique, without its overhead


# Candidates repeat across queries; a cache saves most of the n-gram work. It is bounded by
# bytes (48 MB: some 6 million n-grams; the near-duplicate test's bigram sets, ~110 bytes each,
# have 16 MB of their own). Keyed by the memory as well as the text: no entry serves two tenants
# (one's timing would tell that the other holds the same text).
NGRAM_CACHE_BYTES = 48 * 1024 * 1024
BIGRAM_SET_CACHE_BYTES = 16 * 1024 * 1024


def held_bytes(_key: Hashable, grams: np.ndarray | frozenset[str]) -> int:
    """What a cached memory's n-grams take: their codes' bytes, or ~110 an n-gram of a set
    (set slot and string object); 200 for the entry."""
    return 200 + (grams.nbytes if isinstance(grams, np.ndarray) else 110 * len(grams))


_CODES: ByteLRU[np.ndarray | frozenset[str]] = ByteLRU(NGRAM_CACHE_BYTES, held_bytes, memory_at=0)
_BIGRAM_SETS: ByteLRU[frozenset[str]] = ByteLRU(BIGRAM_SET_CACHE_BYTES, held_bytes, memory_at=0)


def asked_grams(grams: Collection[str], n: int) -> tuple[list[str], np.ndarray]:
    """The query's n-grams to look up with held_ngrams(): those of length n, and their codes
    (none past MAX_CODED_N: such n-grams are kept as sets)."""
    asked = [g for g in grams if len(g) == n] if n <= MAX_CODED_N else []
    cp = _code_points("".join(asked)).reshape(len(asked), n)
    return asked, _coded([cp[:, i] for i in range(n)])


def held_ngrams(
    text: str, n: int, owner: Hashable, grams: Collection[str], asked: tuple[list[str], np.ndarray]
) -> set[str]:
    """Which of the query's n-grams `grams` a memory's text holds (char_ngrams(text, n) &
    grams; `asked`: asked_grams(grams, n)); the memory's n-grams are cached under (owner,
    text, n): `owner` is the memory (its id)."""

    def make() -> np.ndarray | frozenset[str]:
        t = clean(text)
        return (
            gram_codes(t, n) if n <= MAX_CODED_N and len(t) >= n else frozenset(char_ngrams(t, n))
        )

    got = _CODES.get_or_compute((owner, text, n), make)
    if not isinstance(got, np.ndarray):
        return set(got.intersection(grams))
    words, q = asked
    if not words or not len(got):
        return set()
    at = np.minimum(got.searchsorted(q), len(got) - 1)
    return {words[i] for i in np.flatnonzero(got[at] == q)}


def name_grams(query: str, names: Sequence[str], n: int, others: Sequence[str] = ()) -> set[str]:
    """The query's character n-grams that touch one of `names` where the query writes it (清水
    in 清水さんに: 清水さ, 水さん for n = 3): what a memory naming them in another script holds
    of the query. An n-gram that also touches one of the query's `others` (names the memory
    does not hold) is not held: of 木村翔太, a memory naming another 翔太 holds 翔太さ, not
    村翔太."""
    q = clean(query)
    taken = [(at, at + len(w)) for w in map(clean, others) if w for at in _places(q, w)]
    out: set[str] = set()
    for name in names:
        w = clean(name)
        for start in _places(q, w) if w else ():
            lo, hi = max(0, start - n + 1), min(len(q) - n, start + len(w) - 1)
            out.update(
                q[i : i + n]
                for i in range(lo, hi + 1)
                if not any(i < b and a < i + n for a, b in taken)
            )
    return out


def _places(text: str, word: str) -> list[int]:
    """Where `word` starts in `text`, each place."""
    out, at = [], text.find(word)
    while at >= 0:
        out.append(at)
        at = text.find(word, at + 1)
    return out


def lexical_overlap(
    query: str,
    docs: Mapping[int, str],
    n: int = 2,
    cleaned: Mapping[int, str] | None = None,
    held: Mapping[int, Sequence[str]] | None = None,
    names: Sequence[str] = (),
) -> dict[int, float]:
    """Character n-gram coverage of the query by each document, weighted by how rare each
    n-gram is among these documents (ref-llmless-hybrid-rerank's `lex`, made IDF-aware).

    Needs no tokenizer, so it catches what segmentation splits differently in query and text.
    A document given in `cleaned` (already as n-grams read it, retrieval.rank.highlight
    .clean) is tested by substring instead of through its n-gram set: a long memory's
    highlight, which changes with the query. `held`: the question's names a document holds in
    another script (their n-grams of the query count as held, name_grams(); `names`: all the
    question's names).
    """
    q = char_ngrams(query, n)
    if not q or not docs:
        return {k: 0.0 for k in docs}
    pre = cleaned or {}
    asked = asked_grams(q, n)
    grams = {
        k: set(filter(pre[k].__contains__, q)) if k in pre else held_ngrams(v, n, k, q, asked)
        for k, v in docs.items()
    }
    for k, his in (held or {}).items():
        if k in grams:
            others = [x for x in names if x not in his]
            grams[k] = set(grams[k]) | (name_grams(query, his, n, others) & q)
    return weighted_coverage(grams, q)


def lex_signal(
    query: str,
    texts: Mapping[int, str],
    cleaned: Mapping[int, str],
    preset: Preset,
    held: Mapping[int, Sequence[str]] | None = None,
    names: Sequence[str] = (),
) -> dict[int, float]:
    """The preset's character n-gram signal per text (its first LEX_MAX_CHARS, or its cleaned
    form where given; `held` and `names` as in lexical_overlap); {} when the preset uses
    none."""
    if preset.lex_weight <= 0 or not query or not texts:
        return {}
    return lexical_overlap(
        query,
        {k: v[:LEX_MAX_CHARS] for k, v in texts.items()},
        preset.lex_n,
        cleaned,
        held,
        names,
    )


def highlights(
    query: str, cands: Sequence[Candidate], per_source: Mapping[Source, Sequence[Candidate]]
) -> dict[int, tuple[Span, str]]:
    """Each candidate's highlight (retrieval.rank.highlight) and its cleaned text: the
    passage that covers most of the query's character bigrams, helped by the passages the
    vector leg found in it."""
    found: dict[int, list[tuple[int, int, float]]] = {}
    for got in per_source.values():
        for c in got:
            if c.passages:
                found.setdefault(c.id, []).extend(c.passages)
    q = tuple(char_ngrams(query, 2))
    floor = min((x for got in found.values() for _, _, x in got), default=0.0)
    spans = focus_all(
        [(c.content, found.get(c.id, ())) for c in cands], q, floor, memories=[c.id for c in cands]
    )
    return {c.id: span for c, span in zip(cands, spans, strict=True)}


def lex_highlights(
    query: str, cands: Sequence[Candidate], per_source: Mapping[Source, Sequence[Candidate]]
) -> dict[int, tuple[Span, str]]:
    """highlights() of the candidates the n-gram signal reads by their highlight (a memory with
    passages: longer than SPLIT_ABOVE, lex_inputs). A shorter one is read whole, so its
    highlight is made only if it is shown: a candidate's highlight is the same made alone
    (each memory's spans are weighed among its own; the floor is every found passage's)."""
    return highlights(query, [c for c in cands if len(c.content) > SPLIT_ABOVE], per_source)


def lex_inputs(
    cands: Sequence[Candidate],
    spans: Mapping[int, tuple[Span, str]],
    chain_text: Mapping[int, str] | None = None,
) -> tuple[dict[int, str], dict[int, str]]:
    """What the n-gram signal reads of each candidate, and the cleaned form of those that have
    one: an answering chain's text where expansion made one; a memory with passages (longer
    than SPLIT_ABOVE), its title and highlight (`spans`, from highlights()); any other, its
    title and all of it."""
    texts: dict[int, str] = {}
    cleaned: dict[int, str] = {}
    for c in cands:
        chain = (chain_text or {}).get(c.id)
        if chain:
            texts[c.id] = chain
        elif len(c.content) > SPLIT_ABOVE:
            span, text = spans[c.id]
            texts[c.id] = (c.title or "") + c.content[span.start : span.end]
            cleaned[c.id] = clean(c.title or "") + text
        else:
            texts[c.id] = (c.title or "") + c.content
    return texts, cleaned


def blend_lex(score: float, lex: float, preset: Preset) -> float:
    """A fused score with the n-gram signal mixed in at the preset's weight."""
    return (1 - preset.lex_weight) * score + preset.lex_weight * lex


def char_bigrams(text: str, owner: Hashable) -> frozenset[str]:
    """The character bigrams of a text without its white space, cached (a cache of their own)
    under (owner, text): `owner` is the memory (its id), as in held_ngrams()."""

    def make() -> frozenset[str]:
        t = "".join(text.split())
        return frozenset({t[i : i + 2] for i in range(len(t) - 1)} or {t})

    return _BIGRAM_SETS.get_or_compute((owner, text), make)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0
