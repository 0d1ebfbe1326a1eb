"""What a write learns of a memory's text besides its vector: its index terms (Sudachi normal
forms, English stems, and a script-neutral key per person's name), the names it mentions and
the changing attribute it states (retrieval.analysis.facts), off the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from retrieval.analysis.facts import stored_fact
from retrieval.text.name_keys import is_name_key, name_keys
from retrieval.text.nlp import JapaneseNLP, Token, memory_entities, terms_from_tokens

# Terms, entities and the attribute stated ("" for none) of one text: what reading a memory
# yields.
Indexed = tuple[list[str], list[tuple[str, float]], str]
# Analyses a batch of texts (True where the item's entities are to be extracted).
Indexer = Callable[[list[str], list[bool]], Awaitable[list[Indexed]]]


def index_terms(toks: list[Token]) -> list[str]:
    """What a memory is indexed under: its words' terms, then its names' script-neutral keys
    (retrieval.text.name_keys)."""
    return terms_from_tokens(toks) + name_keys(toks)


def word_count(terms: list[str]) -> int:
    """A memory's length for BM25: its words' terms (not its name keys)."""
    return sum(1 for t in terms if not is_name_key(t))


def index_texts(nlp: JapaneseNLP, texts: list[str], want_entities: list[bool]) -> list[Indexed]:
    """Index terms, (where wanted) entities and the attribute stated of each text: the
    CPU-bound part of a write."""
    out: list[Indexed] = []
    for text, want in zip(texts, want_entities, strict=True):
        toks = nlp.tokens(text)
        found = memory_entities(text, toks) if want else []
        out.append((index_terms(toks), found, stored_fact(text)))
    return out


def in_threads(nlp: JapaneseNLP) -> Indexer:
    """Analyse on the default executor, one text at a time (the event loop stays free)."""

    async def run(texts: list[str], want: list[bool]) -> list[Indexed]:
        loop = asyncio.get_running_loop()
        return [
            (await loop.run_in_executor(None, index_texts, nlp, [t], [w]))[0]
            for t, w in zip(texts, want, strict=True)
        ]

    return run
