"""Reranker: pure functions over plain data (normalise, fuse, decay, dedupe, threshold, explain)."""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

import numpy as np

from retrieval.analysis.passages import SPLIT_ABOVE, Span
from retrieval.analysis.strategy import Preset
from retrieval.cache import ByteLRU
from retrieval.models import (
    ADDABLE_SOURCES,
    ANSWERS_QUESTION,
    EXPANSION_SOURCES,
    Candidate,
    Fused,
    Fusion,
    Hop,
    Norm,
    Relevance,
    ScoredResult,
    Source,
    TimeRange,
    WindowMode,
)
from retrieval.rank.highlight import clean, focus_all, weighted_coverage

_SCORE_NAMES = {
    Source.VECTOR: "cos",
    Source.TEMPORAL: "cos in window",
    Source.KEYWORD: "bm25",
    Source.TRIGRAM: "n-gram",
    Source.LINKS: "from seed",
    Source.ENTITY: "from seed",
    Source.THREAD: "from seed",
    Source.VECTOR_GLOBAL: "cos, older",
}


# --- Expansion: how much what a hop reached counts (the hop sources only fetch it). ---

# How much of a memory's own fused score still counts when a chain stands for it.
OWN_SHARE = 0.25

# How closely a hop's kind ties the memory to its seed: a reply is the next turn of the seed's
# exchange; a shared topic says less. Kinds not named (a thread, a shared name) count 1: their
# source's weight (Preset.expansion) says how much they count.
HOP_KIND_WEIGHTS = {"reply_to": 1.0, "continuation": 0.9, "caused_by": 0.8, "same_topic": 0.7}

# A chain that answers (the hop gives the asked date or sum where its seed does not, or replies
# to the question its seed asks) counts for at most this multiple of the seed's share of the
# query: a reply that adds the project's name to the seed's deadline counts for more.
MAX_HOP_GAIN = 2.0

# A shared name is a bridge only where the memory supplies what the seed misses of the query
# (the deadline of the project the meeting named); a memory that adds less than this share of
# the query's IDF mass is a neighbour, not an answer, and is not added.
MIN_ENTITY_ADDED = 0.1


def answers(hop: Hop) -> bool:
    """Whether the chain seed -> memory answers the question, the seed only leading there: the
    memory gives the kind of answer asked (a date, a sum) and the seed none, or the memory
    replies to the question the seed asks. That is evidence, not adjacency."""
    return hop.gives_answer or hop.kind == ANSWERS_QUESTION


def hop_score(
    own: float, seed: float, rank: float, hop: Hop, weight: float, preset: Preset
) -> float:
    """What a memory reached by a hop scores, from its own fused score (0 when no first-wave
    source found it), its seed's fused score, and the seed's standing among the seeds (`rank`:
    1 for the best, sharpened below it: orchestrator.choose_seeds), which is the candidate's
    score as its hop source gave it.

    A chain that answers stands for the memory: `answer_weight` times the standing of its seed
    on the scale of the best fused score (times what the memory adds of the query, at most
    MAX_HOP_GAIN), when that beats the memory's own, which still orders such chains — the
    deadline the best seed's project names comes first. Any other hop is adjacency: it adds a
    bounded credit, at most `hop_credit` times the seed's own score, to what the memory scores
    by itself — a neighbour that shares nothing with the question never outranks its seed (and
    expand() keeps none that no first-wave source found as a result, unless the caller named
    its seed), and a turn that matches the question and sits beside the best match gains a
    little."""
    if answers(hop):
        chain = preset.answer_weight * rank * min(hop.gain, MAX_HOP_GAIN)
        return chain + OWN_SHARE * own if chain > own else own
    return own + preset.hop_credit * weight * HOP_KIND_WEIGHTS.get(hop.kind, 1.0) * seed


@dataclass(frozen=True)
class Expanded:
    """What expansion added: per candidate, how it was reached, and the chain's text (seed
    and memory together) where an answering chain, not the memory alone, gives its score."""

    vias: dict[int, list[str]]
    chain_text: dict[int, str]
    # Memories a chain reached that answer the question (`answers`).
    answering: frozenset[int] = frozenset()


def expand(
    fused: dict[int, Fused],
    per_source: Mapping[Source, Sequence[Candidate]],
    preset: Preset,
    named: frozenset[str] = frozenset(),
) -> tuple[dict[int, Fused], Expanded]:
    """Add what the expansion sources reached, each memory scored by its best hop (hop_score)
    from its seed's fused score; a seed the caller named (`named`) and no source found counts
    as the best fused score.

    Adjacency alone makes no result: a memory no first-wave source found, reached by a hop that
    does not answer from a seed the caller did not name, is context of its seed (returned with
    it: options.context_window), not a competitor of the memories that match the question."""
    out = dict(fused)
    top = max((f.score for f in fused.values()), default=1.0)
    seed_score = {f.candidate.external_id: f.score for f in fused.values()}
    best: dict[int, tuple[float, Candidate]] = {}
    vias: dict[int, list[str]] = {}
    answering: set[int] = set()
    for source in EXPANSION_SOURCES:
        w = preset.expansion.get(source, 0.0)
        if w <= 0:
            continue
        for c in per_source.get(source, ()):
            hop = c.hop
            if hop is None:
                continue
            if source == Source.ENTITY and not answers(hop) and hop.added < MIN_ENTITY_ADDED:
                continue
            own = fused[c.id].score if c.id in fused else 0.0
            if c.id not in fused and not answers(hop) and hop.seed not in named:
                continue
            seed = seed_score.get(hop.seed, top)
            score = hop_score(own, seed, c.score * top, hop, w, preset)
            if answers(hop):
                answering.add(c.id)
            f = out.get(c.id) or Fused(c, {}, 0.0)
            out[c.id] = replace(f, signals={**f.signals, source.value: c.score})
            if c.id not in best or score > best[c.id][0]:
                best[c.id] = (score, c)
            if c.via:
                vias.setdefault(c.id, []).append(c.via)
    chain_text: dict[int, str] = {}
    for cid, (b, c) in best.items():
        f = out[cid]
        if b > f.score:
            out[cid] = Fused(f.candidate, {**f.signals, "expansion": b}, b)
            if c.hop is not None and answers(c.hop) and c.hop.seed_text:
                chain_text[cid] = (
                    c.hop.seed_text + "\n" + (f.candidate.title or "") + f.candidate.content
                )
    return out, Expanded(vias, chain_text, frozenset(answering))


def admit(
    ordered: Sequence[Fused],
    per_source: Mapping[Source, Sequence[Candidate]],
    preset: Preset,
    seats: int,
    answering: frozenset[int] = frozenset(),
) -> list[Fused]:
    """The candidates the reranker considers: each source's quota of its own best first, then
    the best remaining by fused order; entity-only candidates capped at their share, unless
    they give the kind of answer the question asks for (`answering`)."""
    if not preset.quotas:
        return list(ordered[:seats])
    position = {f.candidate.id: i for i, f in enumerate(ordered)}
    entity_cap = math.floor(preset.entity_only_share * seats)
    others = {s.value for s in per_source if s != Source.ENTITY}

    def entity_only(f: Fused) -> bool:
        return (
            Source.ENTITY.value in f.signals
            and not others & f.signals.keys()
            and f.candidate.id not in answering
        )

    chosen: set[int] = set()
    taken = 0
    for source, share in preset.quotas.items():
        own = sorted(per_source.get(source, ()), key=lambda c: c.score, reverse=True)
        for c in own[: math.ceil(share * seats)]:
            if c.id not in position or c.id in chosen:
                continue
            if entity_only(ordered[position[c.id]]):
                if taken >= entity_cap:
                    continue
                taken += 1
            chosen.add(c.id)
    for f in ordered:
        if len(chosen) >= seats:
            break
        if f.candidate.id in chosen:
            continue
        if entity_only(f):
            if taken >= entity_cap:
                continue
            taken += 1
        chosen.add(f.candidate.id)
    return [ordered[i] for i in sorted(position[c] for c in chosen)]


def diversify(
    results: Sequence[ScoredResult], key: str, per_bucket: int, limit: int
) -> list[ScoredResult]:
    """At most per_bucket results of one metadata[key] value before any bucket repeats; the
    order within is kept, and skipped results fill what is left."""
    if not key or per_bucket <= 0:
        return list(results[:limit])
    counts: dict[str, int] = {}
    first, rest = [], []
    for r in results:
        bucket = str(r.candidate.metadata.get(key, ""))
        if counts.get(bucket, 0) < per_bucket:
            counts[bucket] = counts.get(bucket, 0) + 1
            first.append(r)
        else:
            rest.append(r)
    return (first + rest)[:limit]


def minmax(scores: Sequence[float]) -> list[float]:
    """Scale to [0, 1]; a list of equal scores (or a single one) maps to 1.0."""
    if not scores:
        return []
    lo, hi = min(scores), max(scores)
    if hi - lo < 1e-12:
        return [1.0] * len(scores)
    return [(s - lo) / (hi - lo) for s in scores]


def maxnorm(scores: Sequence[float]) -> list[float]:
    """Divide by the best score: a flat list stays flat (min-max would stretch a tiny gap to 1)."""
    if not scores:
        return []
    hi = max(scores)
    return [s / hi if hi > 0 else 0.0 for s in scores]


NORMALISERS = {Norm.MINMAX: minmax, Norm.MAX: maxnorm}


def fuse_weighted(
    per_source: Mapping[Source, Sequence[Candidate]],
    weights: Mapping[Source, float],
    norms: Mapping[Source, Norm] | None = None,
) -> dict[int, Fused]:
    """Normalise per source (min-max unless told), then the weighted sum."""
    out: dict[int, Fused] = {}
    total_w = sum(weights.get(s, 0.0) for s in per_source if per_source[s]) or 1.0
    for source, cands in per_source.items():
        w = weights.get(source, 0.0)
        norm = NORMALISERS[(norms or {}).get(source, Norm.MINMAX)]
        for c, n in zip(cands, norm([c.score for c in cands]), strict=True):
            f = out.get(c.id) or Fused(c, {}, 0.0)
            signals = {**f.signals, source.value: c.score, f"{source.value}_norm": n}
            out[c.id] = Fused(f.candidate, signals, f.score + w * n / total_w)
    return out


def rrf(
    per_source: Mapping[Source, Sequence[Candidate]],
    weights: Mapping[Source, float],
    *,
    k: int = 60,
) -> dict[int, Fused]:
    """Reciprocal rank fusion: sum of w / (k + rank), ranks from 1."""
    out: dict[int, Fused] = {}
    for source, cands in per_source.items():
        w = weights.get(source, 1.0)
        ranked = sorted(cands, key=lambda c: c.score, reverse=True)
        for rank, c in enumerate(ranked, start=1):
            f = out.get(c.id) or Fused(c, {}, 0.0)
            signals = {**f.signals, source.value: c.score, f"{source.value}_rank": float(rank)}
            out[c.id] = Fused(f.candidate, signals, f.score + w / (k + rank))
    return out


def char_ngrams(text: str, n: int = 2) -> set[str]:
    t = clean(text)
    return {t[i : i + n] for i in range(len(t) - n + 1)} if len(t) >= n else ({t} if t else set())


# Candidates repeat across queries; a cache saves most of the n-gram work. It is bounded by
# bytes (about 110 per n-gram: set slot and string object): one 100k-character memory alone
# makes ~100k n-grams, ~11 MB. Keyed by the memory as well as the text: no entry serves two
# tenants (one's timing would tell that the other holds the same text).
NGRAM_CACHE_BYTES = 64 * 1024 * 1024
_NGRAMS: ByteLRU[frozenset[str]] = ByteLRU(NGRAM_CACHE_BYTES, lambda _k, v: 200 + 110 * len(v))


def doc_ngrams(text: str, n: int, owner: Hashable) -> frozenset[str]:
    """The character n-grams of a memory's text, cached under (owner, text, n): `owner` is the
    memory (its id)."""
    return _NGRAMS.get_or_compute((owner, text, n), lambda: frozenset(char_ngrams(text, n)))


def lexical_overlap(
    query: str, docs: Mapping[int, str], n: int = 2, cleaned: Mapping[int, str] | None = None
) -> dict[int, float]:
    """Character n-gram coverage of the query by each document, weighted by how rare each
    n-gram is among these documents (ref-llmless-hybrid-rerank's `lex`, made IDF-aware).

    Needs no tokenizer, so it catches what segmentation splits differently in query and text.
    A document given in `cleaned` (already as n-grams read it, retrieval.rank.highlight
    .clean) is tested by substring instead of through its n-gram set: a long memory's
    highlight, which changes with the query.
    """
    q = char_ngrams(query, n)
    if not q or not docs:
        return {k: 0.0 for k in docs}
    pre = cleaned or {}
    grams = {
        k: set(filter(pre[k].__contains__, q)) if k in pre else doc_ngrams(v, n, k) & q
        for k, v in docs.items()
    }
    return weighted_coverage(grams, q)


def lex_signal(
    query: str,
    texts: Mapping[int, str],
    cleaned: Mapping[int, str],
    preset: Preset,
) -> dict[int, float]:
    """The preset's character n-gram signal per text (its first LEX_MAX_CHARS, or its cleaned
    form where given); {} when the preset uses none."""
    if preset.lex_weight <= 0 or not query or not texts:
        return {}
    return lexical_overlap(
        query, {k: v[:LEX_MAX_CHARS] for k, v in texts.items()}, preset.lex_n, cleaned
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


def recency_factor(
    created_at: datetime, now: datetime, *, half_life_days: float, weight: float
) -> float:
    """1 - weight + weight * 0.5 ** (age / half-life): at most `weight` of a score decays away."""
    if weight <= 0:
        return 1.0
    age_days = max((now - created_at).total_seconds() / 86400.0, 0.0)
    return 1.0 - weight + weight * math.pow(0.5, age_days / half_life_days)


def near_window(created_at: datetime, window: TimeRange | None) -> float:
    """For a fuzzy window (先週頃): 0 inside the core, else how far into the soft edge a
    memory lies (0-1], or -1 outside both."""
    if window is None or in_window(created_at, window):
        return 0.0
    outer = TimeRange(window.outer_start, window.outer_end)
    if not window.fuzzy or not in_window(created_at, outer):
        return -1.0
    if window.start is not None and created_at < window.start and window.outer_start is not None:
        edge, width = window.start - created_at, window.start - window.outer_start
    elif window.end is not None and window.outer_end is not None:
        edge, width = created_at - window.end, window.outer_end - window.end
    else:
        return -1.0
    return max(edge / width, 1e-6) if width.total_seconds() > 0 else -1.0


# The n-gram signal reads at most this many characters of a memory: a 100k-character memory
# holds nearly every common n-gram anyway, and its n-grams cost ~44 ms to make and ~7 MB to
# cache (the cache would hold a handful). Every passage of the shared corpora is shorter.
LEX_MAX_CHARS = 4000

# A memory at the far end of a fuzzy window's soft edge keeps this share of its score.
NEAR_WINDOW_FLOOR = 0.5


def in_window(created_at: datetime, window: TimeRange | None) -> bool:
    if window is None:
        return True
    if window.start is not None and created_at < window.start:
        return False
    return not (window.end is not None and created_at >= window.end)


def char_bigrams(text: str, owner: Hashable) -> frozenset[str]:
    """The character bigrams of a text without its white space, cached with the n-grams under
    (owner, text): `owner` is the memory (its id), as in doc_ngrams()."""

    def make() -> frozenset[str]:
        t = "".join(text.split())
        return frozenset({t[i : i + 2] for i in range(len(t) - 1)} or {t})

    return _NGRAMS.get_or_compute((owner, text, 0), make)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def dedupe(
    results: Sequence[ScoredResult],
    threshold: float = 0.95,
    text_threshold: float = 0.9,
    *,
    keep: int | None = None,
) -> tuple[list[ScoredResult], list[tuple[str, str]]]:
    """Drop results within `threshold` cosine of a better one whose text is also
    nearly the same (character-bigram Jaccard >= text_threshold); stop after `keep` kept.

    The text test exists because e5 puts same-template memories of different days at cosine
    0.975-0.994 (measured on shared/eval/temporal_dev), above a copy with changed punctuation
    (0.991): by embedding alone, a diary would collapse into one entry per topic.
    """
    kept: list[ScoredResult] = []
    dropped: list[tuple[str, str]] = []
    if threshold > 1.0 or not results:
        return list(results[:keep] if keep else results), dropped
    mat = np.stack([np.asarray(r.candidate.embedding, dtype=np.float32) for r in results])
    norms = np.linalg.norm(mat, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    sims = (mat / norms) @ (mat / norms).T
    kept_idx: list[int] = []
    for i, r in enumerate(results):
        if keep is not None and len(kept) >= keep:
            break
        dup = None
        near = np.flatnonzero(sims[i, kept_idx] > threshold) if kept_idx else ()
        for j in (kept_idx[x] for x in near):  # in the order kept, as before
            gi = char_bigrams(r.candidate.content, r.candidate.id)
            other = results[j].candidate
            if jaccard(gi, char_bigrams(other.content, other.id)) >= text_threshold:
                dup = results[j]
                break
        if dup is not None:
            dropped.append((r.candidate.external_id, dup.candidate.external_id))
            continue
        kept.append(r)
        kept_idx.append(i)
    return kept, dropped


def explain(
    r: ScoredResult, window: TimeRange | None, recency: float, near: float, vias: Sequence[str] = ()
) -> str:
    """A short reason: which sources found it and each signal's value."""
    parts = []
    for s in r.sources:
        src = Source(s)
        raw = r.signals.get(s)
        rank = r.signals.get(f"{s}_rank")
        if src in (Source.RECENT, Source.STATES):
            val = "newest first"
        else:
            val = f"{_SCORE_NAMES[src]} {raw:.3f}" if raw is not None else ""
        parts.append(f"{s} ({val}{f', rank {int(rank)}' if rank else ''})")
    text = "found by " + " + ".join(parts) if parts else "no source"
    if vias:
        text += "; " + ", ".join(dict.fromkeys(vias))
    if window is not None:
        label = window.relative or window.text or "window"
        if near == 0:
            text += f"; inside {label}"
        elif near > 0:
            text += f"; near {label} (on its fuzzy edge, x{r.signals.get('near_window', 1.0):.2f})"
        else:
            text += f"; outside {label}"
    if "lex" in r.signals:
        text += f"; char n-gram overlap {r.signals['lex']:.2f}"
    if recency < 0.999:
        text += f"; recency x{recency:.2f}"
    return text


def fuse_first_wave(
    per_source: Mapping[Source, Sequence[Candidate]], preset: Preset
) -> dict[int, Fused]:
    """Fuse the first-wave sources (weighted or RRF; RRF scaled to [0, 1] so that thresholds
    mean the same thing); expansion sources are added by `expand`."""
    first = {s: c for s, c in per_source.items() if s not in EXPANSION_SOURCES}
    if preset.fusion == Fusion.RRF:
        fused = rrf(first, preset.weights, k=preset.rrf_k)
        best = max((f.score for f in fused.values()), default=1.0) or 1.0
        return {k: replace(f, score=f.score / best) for k, f in fused.items()}
    return fuse_weighted(first, preset.weights, preset.norms)


def rerank(
    per_source: Mapping[Source, Sequence[Candidate]],
    preset: Preset,
    *,
    now: datetime,
    window: TimeRange | None = None,
    limit: int = 10,
    query: str = "",
    diversify_by: str | None = None,
    per_bucket: int = 0,
    named_seeds: tuple[str, ...] = (),
) -> tuple[list[ScoredResult], dict[str, int]]:
    """Fuse, add what expansion reached, admit the top `rerank_top` by quotas (window first),
    add the character n-gram signal, decay by age, dedupe, threshold, diversify, label and
    explain. `named_seeds`: the memories the caller named as the conversation's (what
    their hops reach counts even where it matches nothing)."""
    fused, expanded = expand(
        fuse_first_wave(per_source, preset), per_source, preset, frozenset(named_seeds)
    )
    first = preset.window is WindowMode.FIRST and window is not None

    def placed(c: Candidate) -> float:
        """0 in the window, (0, 1] into a fuzzy window's soft edge, -1 outside."""
        return near_window(c.created_at, window) if first else 0.0

    ordered = sorted(
        fused.values(), key=lambda f: (placed(f.candidate) >= 0, f.score), reverse=True
    )
    before = len(ordered)
    top = admit(ordered, per_source, preset, max(preset.rerank_top, limit), expanded.answering)
    cands = [f.candidate for f in top]
    spans = highlights(query, cands, per_source)
    lex = lex_signal(query, *lex_inputs(cands, spans, expanded.chain_text), preset)
    scored = [_score(f, per_source, preset, now, placed(f.candidate), lex) for f in top]
    scored = [
        (a, replace(r, highlight=spans[r.candidate.id][0].bounds), b, c) for a, r, b, c in scored
    ]
    scored.sort(key=lambda x: (x[0], x[1].score), reverse=True)
    meta = {r.candidate.id: (near, rec) for _, r, rec, near in scored}
    # The threshold applies to everything but memories inside a window the query named and
    # memories a source the caller added found (the newest, the states): those were asked for.
    asked = {s.value for s in ADDABLE_SOURCES}
    passing = [
        r
        for inside, r, _, _ in scored
        if r.score >= preset.min_score or (first and inside) or asked.intersection(r.sources)
    ]
    diverse = bool(diversify_by and per_bucket > 0)
    kept, dropped = dedupe(passing, preset.dedupe_threshold, keep=None if diverse else limit)
    if diverse:
        kept = diversify(kept, diversify_by or "", per_bucket, limit)
    final = [
        _label(r, preset, window if first else None, *meta[r.candidate.id], expanded) for r in kept
    ]
    counts = {
        "before": before,
        "considered": len(top),
        "duplicates": len(dropped),
        "after": len(final[:limit]),
    }
    return final[:limit], counts


def _score(
    f: Fused,
    per_source: Mapping[Source, Sequence[Candidate]],
    preset: Preset,
    now: datetime,
    near: float,
    lex: Mapping[int, float],
) -> tuple[bool, ScoredResult, float, float]:
    """One admitted candidate's final score: fused, blended with the n-gram signal, damped on
    a fuzzy window's soft edge, decayed by age. Returns (in window, result, recency, near)."""
    cand, signals, score = f.candidate, dict(f.signals), f.score
    rec = recency_factor(
        cand.created_at,
        now,
        half_life_days=preset.recency_half_life_days,
        weight=preset.recency_weight,
    )
    sources: list[str] = [s.value for s in per_source if s.value in signals]
    signals["fused"] = score
    if lex:
        signals["lex"] = lex[cand.id]
        score = blend_lex(score, lex[cand.id], preset)
    signals["recency"] = rec
    if near > 0:  # on a fuzzy window's soft edge: the further out, the less it counts
        signals["near_window"] = 1.0 - (1.0 - NEAR_WINDOW_FLOOR) * near
        score *= signals["near_window"]
    return near >= 0, ScoredResult(cand, score * rec, signals, sources), rec, near


def _label(
    r: ScoredResult,
    preset: Preset,
    window: TimeRange | None,
    near: float,
    rec: float,
    expanded: Expanded,
) -> ScoredResult:
    """The result with its relevance label and its reason (window given only in window-first
    ranking)."""
    relevance = Relevance.HIGH if r.score >= preset.high_score and near == 0 else Relevance.MEDIUM
    if window is not None and near > 0:
        relevance = Relevance.NEAR_WINDOW
    elif window is not None and near < 0:
        relevance = Relevance.OUTSIDE_WINDOW
    reason = explain(r, window, rec, near, expanded.vias.get(r.candidate.id, ()))
    return replace(r, relevance=relevance, reason=reason)
