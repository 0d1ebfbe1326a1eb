"""The latest fact: a question about the present (retrieval.analysis.tense) puts the newest of
the memories that state the same thing first.

"Where do I live now?" with "moved to Osaka" (2023) and "moved to Kyoto" (2024): both are about
one thing, and the newer one answers. No model decides what "the same thing" is. Two memories
state it when they name the same relations as the question (my move, not my parents'; 兄's
city, not mine), their vectors are close (cosine >= CHAIN_COS), and they share words: a
content word that few of the candidates hold (Osaka, 美容院, アレグラ), or the relation itself
when the question names one (兄); without a shared word, only very close ones that are both
among the question's nearest (a docomo contract and a switch to ahamo). Vectors alone do not
tell it: on multilingual-e5 a phone contract and a visit to a chiropractor sit at 0.92. The
attribute a memory states (retrieval.analysis.facts: residence, car, doctor, …) decides where
it is read: two memories stating two attributes are never one fact, and two stating the one
the question asks for are one at cosine >= FACT_COS, across languages, without a shared word.
From each of the best results (a seed, itself about the question's relations) the memories
that state the same thing form a chain, whose scores are handed out again newest first (the
newest takes the chain's best), each member saying so in its reason (a chain longer than
MAX_CHAIN is a topic, not a fact, and is left alone). A question about the past is left alone.
"""

from __future__ import annotations

import functools
import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from retrieval.analysis.chars import word_runs
from retrieval.analysis.facts import fact_key
from retrieval.analysis.tense import relations_in
from retrieval.cache import ByteLRU
from retrieval.embedding.base import normalise
from retrieval.models import Source
from retrieval.rank.lexical import LEX_MAX_CHARS
from retrieval.rank.window import Scored, window_first
from retrieval.text.nlp import STOP_WORDS, english_norms

# Two memories stating one thing are at least this close (multilingual-e5: a move to Osaka and
# one to Kyoto 0.87; unrelated memories of a store 0.75-0.80 on average, some far closer).
CHAIN_COS = 0.85
# ... and without a shared word, this close, and both among the NEAREST results to the question
# (a phone contract with docomo and a switch to ahamo: 0.90, no word in common).
CLOSE_COS = 0.9
NEAREST = 10
# Two memories stating the attribute the question asks for (retrieval.analysis.facts) are one
# fact at this cosine or closer: across Japanese and English such pairs sit at 0.81-0.85, and a
# store's unrelated memories at 0.80 on average; the attribute's words decide, the vectors only
# keep a misread word from joining two things that have nothing in common.
FACT_COS = 0.78
# A shared content word says "the same thing" when at most this many candidates hold it.
RARE_DF = 3
# A fact restated over time is a handful of memories; more than this many "stating the same
# thing" among a question's candidates is a topic (a conversation that keeps coming back to
# it), and putting a topic's newest line first answers nothing (LoCoMo: chains of 7 and 13
# turns put a chat line about something else above the answer). Such a chain is left alone.
MAX_CHAIN = 4
# The best results a chain may start from.
SEEDS = 3


def latest_first(
    scored: list[Scored], relations: Sequence[str], joins: str | None = None
) -> list[Scored]:
    """`scored` (best first) with each chain in time order, newest first (see the module);
    `joins`: the attribute the question asks for when a newer statement of it replaces the
    older (retrieval.analysis.strategy.statement_asked), which joins memories by itself."""
    if len(scored) < 2:
        return scored
    about = frozenset(relations)
    contents = [r.candidate.content for _, r, _, _ in scored]
    owners = [r.candidate.id for _, r, _, _ in scored]
    # Read lazily, cheapest first: whose fact a memory states only where its vector is close
    # enough, the rare words only where no relation decides (long turns make both costly).
    whose = functools.cache(lambda i: _relations_of(owners[i], contents[i]) == about)
    facts = [r.candidate.fact for _, r, _, _ in scored]
    states = functools.cache(lambda i: _fact_of(owners[i], contents[i], facts[i]))
    words: list[frozenset[str]] = []
    vecs = normalise(np.stack([np.asarray(r.candidate.embedding) for _, r, _, _ in scored]))
    near = _nearest_to_the_question(scored)
    taken: set[int] = set()
    out = list(scored)
    seeds = list(itertools.islice((i for i in range(len(scored)) if whose(i)), SEEDS))
    if joins is not None:
        # ... and the best that states it (its key names whose it is) is a seed too.
        first = next((i for i in range(len(scored)) if states(i) == joins), None)
        if first is not None:
            seeds.append(first)
    least = FACT_COS if joins is not None else CHAIN_COS
    for seed in seeds:
        if seed in taken:
            continue
        close = vecs @ vecs[seed]
        chain = []
        for i in range(len(scored)):
            if i in taken or not close[i] >= least or not whose(i):
                continue
            if i == seed or (joins is not None and states(seed) == joins == states(i)):
                chain.append(i)  # the seed, or the attribute asked for: one fact
                continue
            if not close[i] >= CHAIN_COS:
                continue
            mine, its = states(i), states(seed)
            if mine is not None and its is not None and mine != its:
                continue  # two attributes, or two people's: two facts
            if about or (mine == its and close[i] >= CLOSE_COS and i in near and seed in near):
                chain.append(i)
                continue
            if not words:
                words = _rare_words(owners, contents)
            if words[i] & words[seed]:
                chain.append(i)
        taken.update(chain)
        if 1 < len(chain) <= MAX_CHAIN:
            out = _in_time_order(out, chain)
    return window_first(out)


def _nearest_to_the_question(scored: list[Scored]) -> set[int]:
    """The NEAREST results closest to the question by the vector leg's cosine."""
    cos = [(r.signals.get(Source.VECTOR.value, -1.0), i) for i, (_, r, _, _) in enumerate(scored)]
    return {i for c, i in sorted(cos, reverse=True)[:NEAREST] if c > -1.0}


def _in_time_order(out: list[Scored], chain: list[int]) -> list[Scored]:
    """The chain's scores handed out newest first (the best to the newest, the next to the one
    before it, ...), each member's reason saying so."""
    by_time = sorted(chain, key=lambda i: out[i][1].candidate.created_at, reverse=True)
    scores = sorted((out[i][1].score for i in chain), reverse=True)
    newest = out[by_time[0]][1].candidate.external_id
    got = list(out)
    for k, (i, score) in enumerate(zip(by_time, scores, strict=True)):
        inside, r, rec, near = out[i]
        note = (
            f"the newest of {len(chain)} memories stating this (a question about now)"
            if k == 0
            else f"older than {newest}, which states this too (a question about now)"
        )
        older = None if k == 0 else newest
        got[i] = (
            inside,
            replace(r, score=score, notes=(*r.notes, note), superseded_by=older),
            rec,
            near,
        )
    return got


# What latest_first() reads of a memory, kept under (what, memory id, text): whose fact it
# states and its content words. Candidates repeat across a conversation's questions, and a
# long turn costs ~0.2 ms and ~0.3 ms to read; keyed by the memory, no entry serves two tenants.
READ_CACHE_BYTES = 16 * 1024 * 1024
_READ: ByteLRU[frozenset[str]] = ByteLRU(
    READ_CACHE_BYTES,
    lambda k, v: 200 + len(k[2]) + 80 * len(v),  # type: ignore[index]
    memory_at=1,
)


def _relations_of(owner: int, text: str) -> frozenset[str]:
    return _READ.get_or_compute(("relations", owner, text), lambda: relations_in(text))


def _fact_of(owner: int, text: str, stored: str | None) -> str | None:
    """The attribute and person a memory states (retrieval.analysis.facts), or None: as read
    when it was written (`stored`), or read now for a memory written before that was done."""
    if stored is not None:
        return stored or None
    got = _READ.get_or_compute(
        ("fact", owner, text), lambda: frozenset(k for k in [fact_key(text)] if k)
    )
    return next(iter(got), None)


def _content_words(owners: list[int], texts: list[str]) -> list[frozenset[str]]:
    """Each text's content words (stop words and short English words left out, English ones
    stemmed), the texts not held computed together (each distinct English word stemmed once:
    fifty turns of 2,000 characters hold ~7,000 words and a few hundred distinct ones)."""
    keys = [("words", o, t) for o, t in zip(owners, texts, strict=True)]
    got = [_READ.get(k) for k in keys]
    todo = [i for i, g in enumerate(got) if g is None]
    # Content words without a tokenizer (Latin ones stemmed below), katakana, kanji compounds.
    found = {i: word_runs(texts[i][:LEX_MAX_CHARS]) for i in todo}
    latin = {w.lower() for ws in found.values() for w in ws if w.isascii()}
    stems = english_norms(w for w in latin if w not in STOP_WORDS and len(w) >= 4)
    for i, ws in found.items():
        made = frozenset({stems.get(w.lower(), "") if w.isascii() else w.lower() for w in ws})
        got[i] = made - {""}
        _READ.put(keys[i], got[i])  # type: ignore[arg-type]
    return [g or frozenset() for g in got]


def _rare_words(owners: list[int], texts: list[str]) -> list[frozenset[str]]:
    """Each text's content words (Osaka, 美容院, アレグラ: no stop words) that at most RARE_DF of
    the texts hold: what it is about, not the language it is in."""
    words = _content_words(owners, texts)
    df = Counter(w for ws in words for w in ws)
    return [frozenset(w for w in ws if df[w] <= RARE_DF) for ws in words]
