"""Fusion: each source's scores normalised, then summed with the preset's weights, or reciprocal
rank fusion; the first wave's candidates fused into one list (expansion adds the hops after)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from retrieval.models import EXPANSION_SOURCES, Candidate, Fused, Fusion, Norm, Preset, Source


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
