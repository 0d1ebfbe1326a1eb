"""Query Analyzer: query type, time range, keywords and entities, rules first."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from pathlib import Path
from zoneinfo import ZoneInfo

from retrieval.analysis.answers import asked_kind
from retrieval.analysis.facts import fact_key
from retrieval.analysis.frame import frame_spans
from retrieval.analysis.speaker import ASSISTANT, asked_speaker
from retrieval.analysis.tense import asks_about_now, plans_ahead, relations_in, told_in_the_past
from retrieval.analysis.time.calendar_ja import national_holidays
from retrieval.analysis.time.expressions import parse_time, strip_spans
from retrieval.models import Entity, QueryIntent, QueryType, TimeRange
from retrieval.text.name_keys import LATIN_TITLES, query_names
from retrieval.text.nlp import (
    STOP_WORDS,
    JapaneseNLP,
    normalize_text,
    question_focus,
    terms_from_tokens,
)

_TYPE_ORDER = (
    QueryType.COMPARATIVE,
    QueryType.PROCEDURAL,
    QueryType.CONCEPTUAL,
    QueryType.TEMPORAL,
    QueryType.FACTUAL,
)
# Model numbers (letters and digits: RTX-4090, pg_trgm, GPT-4; not a word and its full stop),
# capitalised Latin names, and katakana words of three or more characters; common ones are
# dropped by the trigram source.
_NAME_LIKE = re.compile(
    r"[A-Za-z]+[0-9._\-]+[A-Za-z0-9._\-]*(?<![._\-])|[A-Za-z]+_[A-Za-z0-9_]+|\b[A-Z][A-Za-z]{2,}\b|[\u30A0-\u30FF]{3,}"
)


@dataclass(frozen=True)
class CueDictionary:
    """Cue words per query type, plus words that raise importance; loaded from JSON."""

    cues: dict[QueryType, tuple[re.Pattern[str], ...]]
    importance: tuple[str, ...]

    @classmethod
    def load(cls, path: Path | None = None) -> CueDictionary:
        """Read the packaged dictionary, or the file at path (same shape)."""
        if path is None:
            raw = resources.files("retrieval").joinpath("data/dictionary.json").read_text("utf-8")
        else:
            raw = Path(path).read_text("utf-8")
        data = json.loads(raw)
        cues: dict[QueryType, tuple[re.Pattern[str], ...]] = {}
        for qt in QueryType:
            words = data.get(qt.value, [])
            if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
                raise ValueError(f"dictionary entry {qt.value!r} must be a list of strings")
            cues[qt] = tuple(_cue_pattern(w) for w in words)
        return cls(cues, tuple(data.get("importance", [])))


def _cue_pattern(word: str) -> re.Pattern[str]:
    if word.isascii():
        return re.compile(r"\b" + re.escape(word) + r"\b", re.IGNORECASE)
    return re.compile(re.escape(word))


def classify(text: str, dictionary: CueDictionary, *, has_time: bool) -> QueryType:
    """First query type whose cue occurs; time-scoped statements default to temporal."""
    for qt in _TYPE_ORDER:
        if any(p.search(text) for p in dictionary.cues[qt]):
            return qt
    return QueryType.TEMPORAL if has_time else QueryType.FACTUAL


class QueryAnalyzer:
    """analyze(query, now) -> QueryIntent. Thread-safe; call it from a worker thread."""

    def __init__(
        self,
        nlp: JapaneseNLP,
        *,
        timezone: str = "Asia/Tokyo",
        recent_days: int = 14,
        dictionary: CueDictionary | None = None,
    ) -> None:
        self.nlp = nlp
        self.tz = ZoneInfo(timezone)
        self.recent_days = recent_days
        self.dictionary = dictionary or CueDictionary.load()
        # The holiday calendar loads on first use (~0.2 s): not inside the first query naming one.
        national_holidays(datetime.now(self.tz).year)

    def analyze(
        self, query: str, now: datetime | None = None, tz: ZoneInfo | None = None
    ) -> QueryIntent:
        """Classify, resolve time words against now (in the calendar of tz, default the
        analyzer's), extract keywords and entities."""
        text = normalize_text(query).strip()
        zone = tz or self.tz
        now = now or datetime.now(zone)
        tp = parse_time(text, now, zone, self.recent_days, past=told_in_the_past(text))
        # Relative time words (先週, 最近) describe when, not what: keep them out of the keyword
        # legs. Written dates (1910年, 2025年3月) stay: in a question they are often content.
        relative = [(s, e) for s, e in tp.spans if not any(ch.isdigit() for ch in text[s:e])]
        # "Do you remember: …", 「…か覚えてる？」 ask to recall and name nothing (analysis/frame).
        left_out = relative + frame_spans(text)
        body = strip_spans(text, left_out) if left_out else text
        toks = self.nlp.tokens(body)
        window = tp.range
        if window is not None and _from_today(window, now, zone) and plans_ahead(body, toks):
            window = None  # "free time tonight, any recommendations?": a plan, not a window
        qtype = classify(text, self.dictionary, has_time=window is not None)
        # Honorifics written in Latin letters (Tanaka-san, Kuroda-sensei) are no keywords.
        keywords = _unique([t for t in terms_from_tokens(toks) if t not in LATIN_TITLES])
        written = [text[s:e] for s, e in tp.spans if any(ch.isdigit() for ch in text[s:e])]
        time_terms = {t for w in written for t in self.nlp.terms(w)} if written else set()
        focus = question_focus(body, toks)
        entities: list[Entity] = self.nlp.entities(body, toks)
        names = _unique(
            [e.text for e in entities if len(e.text) >= 2]
            # A capitalised question word or sentence opener (When, Did) is no name.
            + [
                m.group(0)
                for m in _NAME_LIKE.finditer(body)
                if m.group(0).lower() not in STOP_WORDS
            ]
        )
        speaker = asked_speaker(body)
        fact = fact_key(body, asked=True)
        importance = 0.5 + 0.1 * min(len(entities), 2) + (0.1 if window else 0.0)
        if any(w in text for w in self.dictionary.importance):
            importance += 0.2
        return QueryIntent(
            query=query,
            query_type=qtype,
            keywords=tuple(keywords),
            entities=tuple(entities),
            time_range=window,
            time_hints=tuple(tp.hints),
            time_terms=tuple(k for k in keywords if k in time_terms),
            importance=round(min(importance, 1.0), 2),
            language="en" if text.isascii() else "ja",
            name_terms=tuple(names[:8]),
            name_index_terms=tuple(" ".join(self.nlp.terms(n)) for n in names[:8]),
            focus=focus.word if focus else None,
            focus_term=focus.term if focus else None,
            names=tuple(query_names(toks)),
            # What the assistant said is a past conversation's, not the latest fact.
            present=speaker != ASSISTANT
            and asks_about_now(
                body, toks, past_window=_past(window), about_a_fact=fact is not None
            ),
            relations=tuple(sorted(relations_in(body))),
            fact=fact,
            asks=asked_kind(body, toks, focus.term if focus else None),
            speaker=speaker,
        )


def _from_today(window: TimeRange, now: datetime, zone: ZoneInfo) -> bool:
    """A window that begins today or later (tonight, tomorrow, next week), not one that began
    before (this week, 9月以降)."""
    local = now.replace(tzinfo=zone) if now.tzinfo is None else now.astimezone(zone)
    today = local.replace(hour=0, minute=0, second=0, microsecond=0)
    return window.start is not None and window.start >= today


def _past(window: TimeRange | None) -> bool:
    """A window that names a time over (2023年, last month), not the recent days (最近)."""
    return window is not None and window.relative != "recent"


def _unique(items: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for it in items:
        if it not in seen:
            seen.add(it)
            out.append(it)
    return out
