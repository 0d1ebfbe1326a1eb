"""Expansion: how much what a hop reached counts (the hop legs only fetch it), and the seeds the
second wave starts from."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from retrieval.models import (
    ANSWERS_QUESTION,
    EXPANSION_SOURCES,
    Candidate,
    Fused,
    Hop,
    Preset,
    Source,
)
from retrieval.rank.chat_side import speaker_share
from retrieval.rank.fusion import fuse_first_wave
from retrieval.rank.lexical import blend_lex, lex_highlights, lex_inputs, lex_signal

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


# Seeds pass on (their fused score / the best one's) to this power.
SEED_SHARPNESS = 4.0


def choose_seeds(
    per_source: Mapping[Source, list[Candidate]],
    preset: Preset,
    given: tuple[str, ...] = (),
    query: str = "",
    speaker: str | None = None,
) -> tuple[tuple[str, float], ...]:
    """The first wave's best `expand_seeds` candidates, scored as the reranker scores them
    (fused, then the character n-gram signal on the best `rerank_top`, a long memory's on its
    highlight as far as the first wave can tell, then the side of the chat asked for) and
    scaled so the best is 1; after the memories the caller named (the conversation's own
    memories), which count as 1."""
    fused = sorted(
        fuse_first_wave(per_source, preset).values(), key=lambda f: f.score, reverse=True
    )
    top = [(f.candidate, f.score) for f in fused[: preset.rerank_top]]
    cands = [c for c, _ in top]
    lex = (
        lex_signal(query, *lex_inputs(cands, lex_highlights(query, cands, per_source)), preset)
        if preset.lex_weight > 0
        else {}
    )
    scored = [
        (c, (blend_lex(s, lex[c.id], preset) if lex else s) * speaker_share(c, speaker))
        for c, s in top
    ]
    best = sorted(scored, key=lambda x: x[1], reverse=True)[: preset.expand_seeds]
    high = best[0][1] if best and best[0][1] > 0 else 1.0
    seeds = {x: 1.0 for x in given}
    for c, score in best:
        # Sharpened: a runner-up that matched half the query (山口翔太 for 山口健太) must not
        # pass on nearly as much as the seed that matched all of it.
        seeds.setdefault(c.external_id, (max(score, 0.0) / high) ** SEED_SHARPNESS)
    return tuple(seeds.items())
