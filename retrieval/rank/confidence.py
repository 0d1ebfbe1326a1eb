"""Each result's signals, read against the question: what the calibration's maps
(retrieval.rank.calibration) turn into its `confidence` in the final stage (retrieval.rank.final).

- `verifier`: the reader's logit (retrieval.rank.verifier), for the first `read` results;
- `coverage`: the share of the question's words the memory holds, each weighted by its IDF in
  the namespace (the keyword leg's term statistics): a word no memory of the namespace holds
  ("hamster" where only a cat was mentioned) weighs the most;
- `unmatched`: the largest IDF among the question's words the memory lacks, as a share of the
  largest there can be: 1.0 when the question turns on a word no memory holds;
- `unseen`: 1 when the memory lacks a word of the question that no memory of the namespace
  holds ("table" of "table tennis" where only tennis was mentioned), else 0;
- `asks`: 1 when the memory asks what the question asks (a sentence of it that asks holds one
  of the question's words: "assistant: When do you play tennis?" for "When do I play tennis?"),
  which its reply answers, not it;
- `who`: whose turn it is against whom the question asks about (retrieval.analysis.reading);
  absent where it does not apply;
- `kind`: -1 when the question asks for a kind of answer (a date, an amount, a frequency, a
  number) that the memory does not state, +1 when it does, 0 when it asks for none
  (retrieval.analysis.reading);
- `score`: the result's score.

The words held are read of the first COVERED results only; the maps (`read`, `unread`, `tail`,
each also without `who`) are chosen per result by what it has (Calibration.map_for).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from retrieval.analysis.answers import asks_any, topic_words
from retrieval.analysis.reading import asked, states, who
from retrieval.analysis.speaker import speaker_label
from retrieval.models import QueryIntent, ScoredResult, unit
from retrieval.rank.verifier import Verifier, memory_window

# How many of the first results the reader (the verifier) reads, by default: each one read is
# mapped with its logit (the `read` map), so that the final stage's promote reorders the first
# ones by what the reader says as well (RETRIEVAL_VERIFIER_RESULTS; docs/confidence.md). A pair
# costs ~3.6 ms on one thread; each is read alone (a padded batch costs more than its pairs).
READ_RESULTS = 1
# The words held (coverage, unmatched) are read of the first COVERED results (Sudachi on each,
# ~0.2 ms); the results below them are mapped from who said them, the kind and the score.
COVERED = 3

SIGNALS = ("verifier", "coverage", "unmatched", "unseen", "asks", "who", "kind", "score")


def coverage(
    keywords: Sequence[str], memory_terms: set[str], idf: Mapping[str, float], unseen: float
) -> tuple[float, float]:
    """The IDF-weighted share of the question's words the memory holds, a word the namespace
    never holds weighing `unseen` (the largest IDF it could have); and the largest IDF among
    those it lacks, as a share of `unseen` (1.0: a word no memory holds, as "hamster" where
    only a cat was mentioned). (1.0, 0.0) without keywords."""
    words = list(dict.fromkeys(k.lower() for k in keywords))
    if not words:
        return 1.0, 0.0
    weights = [idf.get(k, unseen) for k in words]
    total = sum(weights)
    held = sum(w for k, w in zip(words, weights, strict=True) if k in memory_terms)
    lacked = [w for k, w in zip(words, weights, strict=True) if k not in memory_terms]
    return held / total, min(max(lacked, default=0.0) / unseen, 1.0)


def signals_of(
    intent: QueryIntent,
    results: Sequence[ScoredResult],
    terms: Callable[[str], list[str]],
    idf: Mapping[str, float],
    unseen: float,
    verifier: Verifier | None,
    read: int = READ_RESULTS,
) -> list[dict[str, float]]:
    """Each result's signals (the verifier's for the first `read` only)."""
    kind = asked(intent)
    # A written date is asked of the memory's time, not its words (QueryIntent.time_terms).
    asked_words = [k for k in intent.keywords if k not in intent.time_terms]
    # What a memory that asks back would ask about: the question's words but its people's names
    # (every turn of a chat may end on "What about you, John?").
    topic = topic_words(intent.keywords, [n.text for n in intent.names])
    out: list[dict[str, float]] = []
    texts = []
    for r in results:
        c = r.candidate
        text = c.content[r.highlight[0] : r.highlight[1]] if r.highlight else c.content
        label = speaker_label(c.content)
        if r.highlight and r.highlight[0] > 0 and label:
            text = label + text
        window = memory_window(intent.query, text)
        texts.append(window)
        sig = {
            "score": unit(r.score),
            "kind": 0.0 if kind is None else (1.0 if states(kind, window) else -1.0),
        }
        said = who(intent, c.content, c.metadata)
        if said is not None:  # otherwise mapped by a map that does not read it (WHOEVER)
            sig["who"] = said
        if len(out) < COVERED:
            held = set(terms(window))
            if r.chain:
                # It replies to the question a seed asks: the words it turns on are the seed's
                # (「近くのカフェに決まったよ。」 for 「ヒスイの集まりはどこでやる？」).
                held |= set(terms(memory_window(intent.query, r.chain)))
            sig["coverage"], sig["unmatched"] = coverage(asked_words, held, idf, unseen)
            sig["unseen"] = 1.0 if sig["unmatched"] >= 1.0 else 0.0
            sig["asks"] = 1.0 if topic and asks_any(c.content, topic) else 0.0
        out.append(sig)
    if verifier is not None:
        for i in range(min(read, len(results))):
            out[i]["verifier"] = float(verifier.read(intent.query, [texts[i]])[0])
    return out
