"""A long memory's passages: spans of its content on sentence boundaries, each embedded on its own
so that every part of the memory can be found by meaning.

A memory whose content is at most SPLIT_ABOVE characters has no passages: its one vector (title
and content: the recipe, retrieval.ingest.recipe) already sees all of it. A longer one is cut
into passages of about PASSAGE_CHARS characters, never more than PASSAGE_MAX_CHARS: sentences
(Japanese 。！？, English . ! ? before a space, line breaks) are packed in order, a passage ends
early at a paragraph break once it holds half its share, and a short last sentence is repeated
at the start of the next passage (the overlap) so that a statement cut from its context is found
with it. A sentence longer than a passage is cut at a comma or space, else at the limit.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

# A memory's content longer than this gets passages (the span its single vector covers).
SPLIT_ABOVE = 2000
# A passage holds about this many characters, and at most PASSAGE_MAX_CHARS: in Japanese about
# 300-450 of e5's tokens, one of its 512-token windows.
PASSAGE_CHARS = 400
PASSAGE_MAX_CHARS = 600
# The last sentence of a passage opens the next one too when it is at most this long.
OVERLAP_MAX_CHARS = 150

# A sentence ends after 。！？ (with closing brackets or quotes), after . ! ? followed by a space,
# or at a line break. Group "nl" is the run of line breaks, when that is the end.
_END = re.compile(
    r"[。！？!?．]+[」』）)\]”’\"']*"
    r"|(?<=[A-Za-z0-9)\]\"'”’])[.!?]+[)\]\"'”’]*(?=\s)"
    r"|(?P<nl>\n[ \t\u3000]*)+"
)
_SOFT_CUT = re.compile(r"[、，,；;：:\s]")
# Where a match of _END can start (its alternatives' first characters; the lookbehind takes
# none). Scanning for these and trying _END only there finds what _END.finditer finds, in half
# the time: finditer tries the lookbehind at every character (a longdoc article: 0.73 -> 0.39 ms).
_END_FIRST = re.compile(r"[。！？!?．.\n]")


@dataclass(frozen=True)
class Span:
    """Characters [start, end) of a text; `para_end`: a paragraph break (blank line) follows."""

    start: int
    end: int
    para_end: bool = False

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def bounds(self) -> tuple[int, int]:
        return (self.start, self.end)


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _cut_long(text: str, start: int, end: int, para_end: bool) -> list[Span]:
    """A sentence longer than a passage, cut at the last comma or space before each limit."""
    out = []
    while end - start > PASSAGE_MAX_CHARS:
        limit = start + PASSAGE_MAX_CHARS
        cut = max(
            (m.end() for m in _SOFT_CUT.finditer(text, start + PASSAGE_MAX_CHARS // 2, limit)),
            default=limit,
        )
        s, e = _trim(text, start, cut)
        if e > s:
            out.append(Span(s, e))
        start = cut
    s, e = _trim(text, start, end)
    if e > s:
        out.append(Span(s, e, para_end))
    return out


def sentence_ends(text: str) -> Iterator[re.Match[str]]:
    """_END.finditer(text), faster: _END tried only where one of its matches can start."""
    pos = 0
    while (c := _END_FIRST.search(text, pos)) is not None:
        m = _END.match(text, c.start())
        if m is None:
            pos = c.start() + 1
        else:
            yield m
            pos = m.end()


def sentences(text: str) -> list[Span]:
    """The text's sentences in order, without surrounding white space; none longer than
    PASSAGE_MAX_CHARS."""
    out: list[Span] = []
    start = 0
    for m in sentence_ends(text):
        end = m.end()
        if m.group("nl") is not None:
            breaks = m.group(0).count("\n") >= 2
            got = _cut_long(text, start, m.start(), breaks)
            if not got and breaks and out:  # the break after a sentence's 。
                out[-1] = Span(out[-1].start, out[-1].end, True)
            out.extend(got)
        else:
            out.extend(_cut_long(text, start, end, False))
        start = end
    out.extend(_cut_long(text, start, len(text), True))
    if out and not out[-1].para_end:
        out[-1] = Span(out[-1].start, out[-1].end, True)
    return out


def split_passages(text: str) -> list[Span]:
    """The passages of a content longer than SPLIT_ABOVE, in order (none for a shorter one)."""
    return pack(text) if len(text) > SPLIT_ABOVE else []


def pack(text: str) -> list[Span]:
    """The text's sentences packed into passages, in order."""
    sents = sentences(text)
    out: list[Span] = []
    i = 0
    while i < len(sents):
        j = i
        while j + 1 < len(sents):
            size = sents[j].end - sents[i].start
            if size >= PASSAGE_CHARS or (sents[j].para_end and size >= PASSAGE_CHARS // 2):
                break
            if sents[j + 1].end - sents[i].start > PASSAGE_MAX_CHARS:
                break
            j += 1
        out.append(Span(sents[i].start, sents[j].end, sents[j].para_end))
        last = sents[j]
        overlap = j > i and not last.para_end and last.size <= OVERLAP_MAX_CHARS
        i = j if overlap else j + 1
    return out
