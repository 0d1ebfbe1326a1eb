"""What a write learns of a memory's text besides its vector: its index terms (Sudachi normal
forms, English stems, and a script-neutral key per person's name), the names it mentions, the
changing attribute it states (retrieval.analysis.facts) and when what it tells happened
(retrieval.analysis.time.events, read against when it was written), off the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import NamedTuple

from retrieval.analysis.facts import stored_fact
from retrieval.analysis.time.events import EventTime, read_event
from retrieval.text.name_keys import is_name_key, name_keys
from retrieval.text.nlp import JapaneseNLP, Token, memory_entities, terms_from_tokens


class Indexed(NamedTuple):
    """What reading a memory yields: its terms, entities, the attribute stated ("" for none)
    and its event (None: its words place none, or it was not read: no clock given)."""

    terms: list[str]
    entities: list[tuple[str, float]]
    fact: str
    event: EventTime | None = None


# The instant each text was written, to read its event against, and whether its kind tells of
# its writer's life (retrieval.analysis.time.events.told_by_its_kind); None: not to be read
# (the caller gave the event).
Clocks = Sequence[tuple[datetime, bool] | None]
# Analyses a batch of texts (True where the item's entities are to be extracted; each one's
# clock).
Indexer = Callable[[list[str], list[bool], Clocks], Awaitable[list[Indexed]]]


def index_terms(toks: list[Token]) -> list[str]:
    """What a memory is indexed under: its words' terms, then its names' script-neutral keys
    (retrieval.text.name_keys)."""
    return terms_from_tokens(toks) + name_keys(toks)


def word_count(terms: list[str]) -> int:
    """A memory's length for BM25: its words' terms (not its name keys)."""
    return sum(1 for t in terms if not is_name_key(t))


def index_texts(
    nlp: JapaneseNLP, texts: list[str], want_entities: list[bool], clocks: Clocks | None = None
) -> list[Indexed]:
    """Index terms, (where wanted) entities, the attribute stated and (where a clock is given)
    the event of each text: the CPU-bound part of a write."""
    out: list[Indexed] = []
    when = clocks if clocks is not None else [None] * len(texts)
    for text, want, clock in zip(texts, want_entities, when, strict=True):
        toks = nlp.tokens(text)
        found = memory_entities(text, toks) if want else []
        event = read_event(text, clock[0], personal=clock[1]) if clock is not None else None
        out.append(Indexed(index_terms(toks), found, stored_fact(text), event))
    return out


def in_threads(nlp: JapaneseNLP) -> Indexer:
    """Analyse on the default executor, one text at a time (the event loop stays free)."""

    async def run(texts: list[str], want: list[bool], clocks: Clocks) -> list[Indexed]:
        loop = asyncio.get_running_loop()
        return [
            (await loop.run_in_executor(None, index_texts, nlp, [t], [w], [c]))[0]
            for t, w, c in zip(texts, want, clocks, strict=True)
        ]

    return run
