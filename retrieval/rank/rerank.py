"""The reranker: the legs' candidates fused, expanded and admitted, scored with the n-gram signal,
decayed by age, deduplicated, thresholded, diversified, labelled and explained — pure functions
over plain data."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

import numpy as np

from retrieval.analysis.strategy import statement_asked
from retrieval.embedding.base import normalise
from retrieval.models import (
    ADDABLE_SOURCES,
    EXPANSION_SOURCES,
    Candidate,
    Clock,
    Fused,
    Preset,
    QueryIntent,
    RetrievalOptions,
    ScoredResult,
    Source,
    TimeRange,
    WindowMode,
    WindowPlace,
)
from retrieval.rank.chat_side import speaker_share
from retrieval.rank.expansion import Expanded, expand
from retrieval.rank.fusion import fuse_first_wave
from retrieval.rank.latest import latest_first
from retrieval.rank.lexical import (
    blend_lex,
    char_bigrams,
    highlights,
    jaccard,
    lex_highlights,
    lex_inputs,
    lex_signal,
)
from retrieval.rank.window import (
    ELSEWHERE_SHARE,
    INSIDE,
    NEAR_WINDOW_FLOOR,
    Place,
    Scored,
    passes_range,
    place,
    recency_factor,
    window_first,
    window_misread,
)
from retrieval.text.passages import Span

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
    unit = normalise(np.stack([np.asarray(r.candidate.embedding) for r in results]))
    sims = unit @ unit.T
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
        clock = _by_clock(r.candidate, window)
        if near == 0:
            text += f"; inside {label}{clock}"
        elif near > 0:
            text += f"; near {label}{clock} (on its fuzzy edge, x{r.signals.get('near_window', 1.0):.2f})"
        elif "outside_window" in r.signals:
            text += (
                f"; outside {label}{clock} (x{r.signals['outside_window']:.2f}: below those inside)"
            )
        else:
            text += f"; outside {label}{clock}"
        if "told_elsewhere" in r.signals:
            text += f" (x{r.signals['told_elsewhere']:.2f}: its words place it elsewhere)"
    if r.candidate.event is not None:
        text += f"; {when(r.candidate)}"
    if "lex" in r.signals:
        text += f"; char n-gram overlap {r.signals['lex']:.2f}"
    if "unnamed" in r.signals:
        text += f"; names none of the people asked about (x{r.signals['unnamed']:.2f})"
    elif r.candidate.names:
        text += "; names " + ", ".join(r.candidate.names)
    if "other_speaker" in r.signals:
        text += f"; said by the other side of the chat (x{r.signals['other_speaker']:.2f})"
    if recency < 0.999:
        text += f"; recency x{recency:.2f}"
    for note in r.notes:
        text += f"; {note}"
    return text


def when(c: Candidate) -> str:
    """Both dates of a memory whose words place what it tells: "happened Sat 14 Feb 2026,
    told Mon 16 Feb 2026" (a span: its first and last day)."""
    ev = c.event
    assert ev is not None
    last = ev.end - timedelta(days=1)
    told = c.created_at.astimezone(ev.start.tzinfo)
    happened = (
        _day(ev.start) if last.date() <= ev.start.date() else f"{_day(ev.start)} to {_day(last)}"
    )
    return f"happened {happened}, told {_day(told)}"


def _day(d: datetime) -> str:
    return d.strftime("%a %d %b %Y")


def _by_clock(c: Candidate, window: TimeRange) -> str:
    """Which clock placed it: " (by when it happened)" / " (by when it was written)"."""
    clock = place(c, window).clock
    if clock == "event":
        return " (by when it happened)"
    if clock == "written" and c.event is not None:
        return " (by when it was written)"
    return ""


# A request that asks nothing beyond the defaults (ten results, no diversity, no seeds).
DEFAULT_OPTIONS = RetrievalOptions()


def rerank(
    per_source: Mapping[Source, Sequence[Candidate]],
    preset: Preset,
    intent: QueryIntent,
    options: RetrievalOptions = DEFAULT_OPTIONS,
    *,
    now: datetime,
    window: TimeRange | None = None,
) -> tuple[list[ScoredResult], int]:
    """Fuse, add what expansion reached, admit the top `rerank_top` by quotas (window first,
    unless no memory with the question's words lies in it: rank.window.window_misread),
    add the character n-gram signal, decay by age, dedupe, threshold, diversify, label and
    explain. From the question (`intent`): its text (the n-gram signal), whether it asks about
    now (its newest fact goes first, retrieval.rank.latest; `relations`: whose fact), the
    people it names, whose turns answer it (retrieval.analysis.speaker). From the request
    (`options`): the limit, diversity, and the memories the caller named as the
    conversation's (`seed_ids`: what their hops reach counts even where it matches nothing)."""
    limit, query, speaker = options.limit, intent.query, intent.speaker
    diversify_by, per_bucket = options.diversify_by, options.per_bucket
    named_seeds = options.seed_ids
    names = tuple(n.text for n in intent.names)
    fused, expanded = expand(
        fuse_first_wave(per_source, preset), per_source, preset, frozenset(named_seeds)
    )
    hard, clock = options.time_range, options.time_clock
    if hard is not None and clock is not Clock.WRITTEN:  # the range by another clock
        fused = {k: f for k, f in fused.items() if passes_range(f.candidate, hard, clock)}
    misread = preset.window is WindowMode.FIRST and window_misread(per_source, window)
    first = preset.window is WindowMode.FIRST and window is not None and not misread

    def placed(c: Candidate) -> Place:
        """Where it lies against the window (rank.window.place; inside when none is first)."""
        return place(c, window) if first else INSIDE

    ordered = sorted(
        fused.values(), key=lambda f: (placed(f.candidate).near >= 0, f.score), reverse=True
    )
    before = len(ordered)
    top = admit(ordered, per_source, preset, max(preset.rerank_top, limit), expanded.answering)
    cands = [f.candidate for f in top]
    spans = lex_highlights(query, cands, per_source)
    named = {c.external_id: c.names for c in per_source.get(Source.TRIGRAM, ()) if c.names}
    # A name it holds in another script (Michael for マイケル) counts as held.
    held = {c.id: named[c.external_id] for c in cands if c.external_id in named}
    texts, cleaned = lex_inputs(cands, spans, expanded.chain_text)
    lex = lex_signal(query, texts, cleaned, preset, held, names)
    scored = [_score(f, per_source, preset, now, placed(f.candidate), lex) for f in top]
    scored = _whose(_about_the_people(scored, named, per_source), intent, speaker)
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
    kept = _below_the_window(kept, {i for i, (near, _) in meta.items() if near >= 0})
    results = _highlighted(kept[:limit], spans, query, per_source)
    if misread and window is not None:
        return _set_aside(results, window, meta, expanded), before
    shown = window if first else None
    return [_label(r, shown, *meta[r.candidate.id], expanded) for r in results], before


def _highlighted(
    results: list[ScoredResult],
    spans: Mapping[int, tuple[Span, str]],
    query: str,
    per_source: Mapping[Source, Sequence[Candidate]],
) -> list[ScoredResult]:
    """The results, each with its highlight: the n-gram signal's (`spans`), else made now
    (only the results shown need one: lexical.lex_highlights)."""
    missing = [r.candidate for r in results if r.candidate.id not in spans]
    made = {**spans, **highlights(query, missing, per_source)} if missing else spans
    return [replace(r, highlight=made[r.candidate.id][0].bounds) for r in results]


def _whose(scored: list[Scored], intent: QueryIntent, speaker: str | None) -> list[Scored]:
    """In score order (window first): a question about now's newest fact first
    (rank.latest), then the side of the chat asked for (_by_the_speaker: a newer thank-you of
    the user's that restates the assistant's number does not take the number's place)."""
    scored = window_first(scored)
    if intent.present:
        scored = latest_first(scored, intent.relations, statement_asked(intent))
    return _by_the_speaker(scored, speaker)


def _set_aside(
    results: list[ScoredResult],
    window: TimeRange,
    meta: Mapping[int, tuple[float, float]],
    expanded: Expanded,
) -> list[ScoredResult]:
    """The results of a window set aside (window_misread), in their order: each still labelled
    and explained by where it lies against the window (outside it, on its edge), its reason
    ending with why the window did not order them."""
    label = window.relative or window.text or "the window"
    note = f"{label} set aside: none of the memories with the question's words lies in it"
    out = []
    for r in results:
        near = place(r.candidate, window).near
        x = _label(r, window, near, meta[r.candidate.id][1], expanded)
        out.append(replace(x, reason=f"{x.reason}; {note}"))
    return out


def _score(
    f: Fused,
    per_source: Mapping[Source, Sequence[Candidate]],
    preset: Preset,
    now: datetime,
    where: Place,
    lex: Mapping[int, float],
) -> tuple[bool, ScoredResult, float, float]:
    """One admitted candidate's final score: fused, blended with the n-gram signal, damped on
    a fuzzy window's soft edge (or when written inside but told of another time), decayed by
    age. Returns (in window, result, recency, near)."""
    cand, signals, score, near = f.candidate, dict(f.signals), f.score, where.near
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
    if where.elsewhere:  # written inside, but its words place what it tells elsewhere
        signals["told_elsewhere"] = ELSEWHERE_SHARE
        score *= ELSEWHERE_SHARE
    return near >= 0, ScoredResult(cand, score * rec, signals, sources), rec, near


def _below_the_window(results: list[ScoredResult], inside: set[int]) -> list[ScoredResult]:
    """Window-first order, in the scores: every result outside the window (its id not in
    `inside`) is scaled by one factor so that the best of them scores no more than the weakest
    inside, their order among themselves kept. The score returned is then the one the list is
    ordered by."""
    ins = [r.score for r in results if r.candidate.id in inside]
    outs = [r.score for r in results if r.candidate.id not in inside]
    if not ins or not outs or max(outs) <= min(ins):
        return results
    factor = max(min(ins), 0.0) / max(outs)
    return [
        r
        if r.candidate.id in inside
        else replace(r, score=r.score * factor, signals={**r.signals, "outside_window": factor})
        for r in results
    ]


# A question that names people the store knows (its names leg found memories naming them, in
# any script) is about them: a memory that names none of them, and was not reached from one
# that does, keeps this share of its score. 佐藤さんのお土産 is not 青木さんのお土産, however
# close their words; among the memories naming 佐藤 the topic still decides.
UNNAMED_SHARE = 0.5


def _about_the_people(
    scored: list[tuple[bool, ScoredResult, float, float]],
    named: Mapping[str, tuple[str, ...]],
    per_source: Mapping[Source, Sequence[Candidate]],
) -> list[tuple[bool, ScoredResult, float, float]]:
    """Scores of memories that name none of the question's people (`named`: those that do, by
    external id), and were not reached by a hop from one that does, multiplied by
    UNNAMED_SHARE (said in their reasons)."""
    if not named:
        return scored
    reached = {
        c.id
        for s in EXPANSION_SOURCES
        for c in per_source.get(s, ())
        if c.hop is not None and c.hop.seed in named
    }
    out = []
    for inside, r, rec, near in scored:
        c = r.candidate
        if c.external_id in named:
            r = replace(r, candidate=replace(c, names=named[c.external_id]))
        elif c.id not in reached:
            signals = {**r.signals, "unnamed": UNNAMED_SHARE}
            r = replace(r, score=r.score * UNNAMED_SHARE, signals=signals)
        out.append((inside, r, rec, near))
    return out


def _by_the_speaker(scored: list[Scored], speaker: str | None) -> list[Scored]:
    """Scores of turns of the other speaker than `speaker` (by their role or label) multiplied by
    rank.speaker.OTHER_SPEAKER_SHARE (said in their reasons; memories with no label keep
    theirs), in the order of the scores, window first."""
    if speaker is None:
        return scored
    out = []
    for inside, r, rec, near in scored:
        share = speaker_share(r.candidate, speaker)
        if share < 1.0:
            signals = {**r.signals, "other_speaker": share}
            r = replace(r, score=r.score * share, signals=signals)
        out.append((inside, r, rec, near))
    return window_first(out)


def _label(
    r: ScoredResult,
    window: TimeRange | None,
    near: float,
    rec: float,
    expanded: Expanded,
) -> ScoredResult:
    """The result with where it lies against the window (given only in window-first ranking:
    inside, on its fuzzy edge, outside) and its reason. How likely it answers, its label, is the
    final stage's (retrieval.rank.final)."""
    place = None
    if window is not None:
        place = (
            WindowPlace.NEAR
            if near > 0
            else WindowPlace.OUTSIDE
            if near < 0
            else WindowPlace.INSIDE
        )
    reason = explain(r, window, rec, near, expanded.vias.get(r.candidate.id, ()))
    chain = expanded.chain_text.get(r.candidate.id)
    return replace(r, window=place, reason=reason, chain=chain)
