"""The last stage of the read path: the results' final order, score and label, and whether
anything answers, all four decided here and nowhere else.

The reranker (retrieval.rank.rerank) orders and explains the results; the confidence
(retrieval.rank.confidence) reads each one's signals; then `finish`:
- maps the signals to each result's `confidence` (the calibration's maps);
- `promote`: the surest of the first PROMOTE_AMONG passes the first when clearly surer;
- `never_rises`: the one place the score a caller sees is made to follow the list's order;
- `label`: `high`, `medium` or `low` on one scale, from the confidence (from the score for a
  service without a calibration), and `answered` from the first result's label, so that the
  two agree by construction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from retrieval.models import Answered, Relevance, ScoredResult
from retrieval.rank.calibration import Calibration

# Below this score a result is `low`, whatever its confidence: little found it.
WEAK_SCORE = 0.05
# Where the confidence reorders (promote): the surest of the first PROMOTE_AMONG passes the first
# when its confidence is PROMOTE_MARGIN higher and its score at least PROMOTE_CLOSE of the first's.
# On the answerable LoCoMo questions (MRR@10, the maps' conversations conv-26/30/41 and the
# held-out conv-42): 0.629 -> 0.649, 0.555 -> 0.573, 0.577 -> 0.594 (docs/confidence.md).
PROMOTE_AMONG = 3
PROMOTE_CLOSE = 0.8
PROMOTE_MARGIN = 0.1
STRONG = frozenset({Relevance.HIGH, Relevance.MEDIUM})


@dataclass(frozen=True)
class Final:
    """The answer's results in their final order, each with its score, confidence and label,
    and whether anything answers (None without a calibration)."""

    results: list[ScoredResult]
    answered: Answered | None


def label(
    score: float, confidence: float | None, calibration: Calibration | None, high_score: float
) -> Relevance:
    """A result's label: `high` from the calibration's `high` threshold, `medium` from its
    `answers` threshold, `low` below; a score under WEAK_SCORE is `low` whatever the confidence.
    Without a calibration (RETRIEVAL_CONFIDENCE=false), from the score: `high` from the
    strategy's `high_score`, `medium` from WEAK_SCORE."""
    if score < WEAK_SCORE:
        return Relevance.LOW
    if calibration is None or confidence is None:
        return Relevance.HIGH if score >= high_score else Relevance.MEDIUM
    if confidence >= calibration.high:
        return Relevance.HIGH
    return Relevance.MEDIUM if confidence >= calibration.answers else Relevance.LOW


def finish(
    results: Sequence[ScoredResult],
    sigs: Sequence[Mapping[str, float]] | None,
    calibration: Calibration | None,
    *,
    high_score: float,
    ordered: bool = True,
) -> Final:
    """The final results and whether anything answers. `sigs`: each result's signals (the
    confidence's), None without a calibration. `ordered`: the list is in score order (not
    diversified on purpose), so the score is made never to rise down it."""
    out = list(results)
    if calibration is not None and sigs is not None:
        out = [_assessed(r, s, calibration) for r, s in zip(out, sigs, strict=True)]
        out = promote(out)
    if ordered:
        out = never_rises(out)
    out = [replace(r, relevance=label(r.score, r.confidence, calibration, high_score)) for r in out]
    if calibration is None:
        return Final(out, None)
    if not out:
        return Final(out, Answered(False, 0.0, calibration.answers))
    first = out[0]
    return Final(
        out, Answered(first.relevance in STRONG, first.confidence or 0.0, calibration.answers)
    )


def _assessed(r: ScoredResult, s: Mapping[str, float], calibration: Calibration) -> ScoredResult:
    conf = calibration.map_for(s)(s)
    signals = {**r.signals, **{f"confidence_{k}": v for k, v in s.items()}}
    return replace(r, confidence=conf, signals=signals)


def promote(results: list[ScoredResult]) -> list[ScoredResult]:
    """The results, the surest of the first PROMOTE_AMONG put first when it is clearly surer
    than the first (PROMOTE_MARGIN) and not far below it by score (PROMOTE_CLOSE): "When do I
    play tennis?" puts the user's "I play tennis on Sundays" before the assistant asking "When
    do you play tennis?". Only one that lies where the first lies against the question's window
    (inside, near, outside) is put first: the window's order stands. Its reason says so; its
    score becomes the first's by never_rises (a tie)."""
    head = results[:PROMOTE_AMONG]
    if len(head) < 2:
        return results
    # never past the window: one outside it (or on its edge) does not pass one inside
    same = [i for i in range(len(head)) if head[i].window == head[0].window]
    best = max(same, key=lambda i: head[i].confidence or 0.0)
    first, surer = head[0], head[best]
    if (
        best == 0
        or surer.score < PROMOTE_CLOSE * first.score
        or (surer.confidence or 0.0) < (first.confidence or 0.0) + PROMOTE_MARGIN
    ):
        return results
    why = (
        f"put first by its confidence ({surer.confidence:.2f} against "
        f"{first.confidence or 0.0:.2f} for {first.candidate.external_id or first.candidate.id})"
    )
    lifted = replace(
        surer,
        reason=f"{surer.reason}; {why}" if surer.reason else why,
        signals={**surer.signals, "confidence_promoted": 1.0},
    )
    return [lifted, *results[:best], *results[best + 1 :]]


def never_rises(results: list[ScoredResult]) -> list[ScoredResult]:
    """The results with each score raised to the best below it, so that the score never rises
    down the list: the one place this holds. Only a result put above a better-scored one
    (promote) changes: it ties the score it passed."""
    out = list(results)
    best = float("-inf")
    for i in range(len(out) - 1, -1, -1):
        if out[i].score < best:
            out[i] = replace(out[i], score=best)
        best = max(best, out[i].score)
    return out
