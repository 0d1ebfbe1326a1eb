"""Japanese (and English) tokenisation with spaCy + Sudachi: index tokens, keywords, entities.

Only the tokenizer runs on the hot path (SudachiPy, called directly where the pipeline's
tokenizer wraps it); the statistical NER costs about 20 ms and runs only when configured
(RETRIEVAL_NER=spacy).
"""

from __future__ import annotations

import logging
import re
import threading
import unicodedata
from collections.abc import Iterable
from typing import Any, NamedTuple

import Stemmer
from spacy.lang.en.stop_words import STOP_WORDS as SPACY_EN_STOP_WORDS

from retrieval.models import Entity

logger = logging.getLogger(__name__)

# Bump when the index terms or entities change: cached eval indexes are rebuilt, and a store
# indexed by an older version is told to re-tokenize (`retrieval retokenize`).
# 5: English phrases Sudachi reads as one katakana word are their words (want to -> want).
# 6: a memory's terms hold a script-neutral key per person's name (retrieval.text.name_keys).
# 7: a name's consonant skeleton is keyed by the script it was heard from (Latin or kana).
# 8: the changing attribute a memory states is stored with it (retrieval.analysis.facts).
TOKENIZER_VERSION = "8"

# Sudachi POS prefixes (token.tag_) whose words carry content.
_CONTENT_POS = ("名詞", "動詞-一般", "形容詞-一般", "形状詞")
_DROP_POS = ("名詞-数詞",)  # numbers are kept by the digit rule below, in their written form

# Words frequent enough to say nothing on their own; BM25's IDF handles the rest.
STOP_WORDS = frozenset(
    """
    こと もの ため よう これ それ あれ どれ ここ そこ どこ 事 物 為 様 方 中 上 下 所 時 頃
    する 為る ある 有る いる 居る なる 成る できる 出来る れる られる せる いう 言う
    思う おもう 教える 知る 何 誰 いつ 何時 なぜ どう どの どんな 如何 みたい
    何人 何歳 何年 何回 何個 何日 何月 何度 何番 何色 何語 何処 何故 幾つ
    a an the of to in on at for by with from and or but is are was were be been being it its
    this that these those what which who whom when where why how do does did done have has had
    s t d ll m re ve
    """.split()  # noqa: SIM905 - a word list reads better as words
) | frozenset(SPACY_EN_STOP_WORDS)

_LATIN_RE = re.compile(r"^[A-Za-z][A-Za-z0-9._+\-]*$")
_ASCII_ALNUM_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+\-]*$")
_LATIN_PHRASE_RE = re.compile(r"^[A-Za-z]+(?:[ '’][A-Za-z]+)+$")
_PHRASE_SPLIT_RE = re.compile(r"[ '’]")
_DIGITS_RE = re.compile(r"^[0-9]+([.,][0-9]+)?$")
_KATAKANA_RE = re.compile(r"^[\u30A0-\u30FFー]{2,}$")
# Longest slice handed to Sudachi at once (its limit is about 49 KB of UTF-8).
_MAX_CHUNK = 8000


# Lone surrogates and NUL cannot cross into Sudachi (Rust strings) or PostgreSQL; the edges
# refuse them in stored text, and a direct caller's query gets U+FFFD in their place.
_UNSAFE_RE = re.compile("[\ud800-\udfff\x00]")


def normalize_text(text: str) -> str:
    """NFKC (full-width Latin and digits to ASCII, half-width kana to full-width)."""
    return unicodedata.normalize("NFKC", _UNSAFE_RE.sub("\ufffd", text))


# A Snowball stemmer per thread (PyStemmer's objects keep a cache and are not thread-safe).
_STEMMERS = threading.local()


def english_norm(word: str) -> str:
    """Lower-cased and stemmed (Snowball English: painted, paints -> paint), applied identically
    to queries and documents. Model numbers and words with digits stay as written."""
    w = word.lower()
    return str(_stemmer().stemWord(w)) if w.isalpha() else w


def english_norms(words: Iterable[str]) -> dict[str, str]:
    """english_norm() of each word, the stemmer called once for them all."""
    out = {w: w.lower() for w in words}
    alpha = [w for w, low in out.items() if low.isalpha()]
    if alpha:
        for w, stem in zip(alpha, _stemmer().stemWords([out[w] for w in alpha]), strict=True):
            out[w] = str(stem)
    return out


def _stemmer() -> Any:
    """This thread's Snowball English stemmer."""
    stemmer = getattr(_STEMMERS, "en", None)
    if stemmer is None:
        stemmer = _STEMMERS.en = Stemmer.Stemmer("english")
    return stemmer


# Kana and kanji: a text holding any is Japanese (Latin words inside it are loanwords or names).
_JAPANESE_RE = re.compile("[\u3040-\u30ff\u3400-\u9fff]")


class Token(NamedTuple):
    """One morpheme: surface, normal form, Sudachi tag (名詞-固有名詞-…), UD POS (spaCy path),
    and for a person's name (a 人名 tag) its reading in katakana."""

    surface: str
    norm: str
    tag: str
    pos: str
    reading: str = ""


class JapaneseNLP:
    """A loaded spaCy pipeline used for tokens (always) and named entities (optionally)."""

    def __init__(self, model: str = "ja_ginza", *, ner: bool = False) -> None:
        import spacy

        try:
            self._nlp: Any = spacy.load(model)
        except OSError as exc:
            raise RuntimeError(
                f"spaCy model {model!r} is not installed; install it (e.g. pip install ja-ginza) "
                "or set RETRIEVAL_SPACY_MODEL"
            ) from exc
        self.model_name = model
        self.ner_enabled = ner and "ner" in self._nlp.pipe_names
        self._lock = threading.Lock()
        # spaCy's Japanese tokenizer wraps a SudachiPy tokenizer; through spaCy every call also
        # builds readings, inflections, split-mode sub-tokens and a Doc, none of which is read
        # here (3.3x the time: 5.35 against 1.64 ms a JSQuAD passage, measured). Where the
        # pipeline's tokenizer is that one, its SudachiPy tokenizer (same dictionary, same
        # split mode) is called directly: the same surfaces, normal forms and tags (checked on
        # 3,036 passages and questions, tests/text/test_nlp.py).
        inner = getattr(self._nlp.tokenizer, "tokenizer", None)
        self._sudachi: Any = inner if callable(getattr(inner, "tokenize", None)) else None
        self._tags: dict[int, str] = {}

    def tokens(self, text: str) -> list[Token]:
        """Sudachi morphemes of text (NFKC-normalised first)."""
        return self._tokens(text, direct=self._sudachi is not None)

    def _tag(self, morpheme: Any) -> str:
        """A morpheme's tag as spaCy writes it, cached by part-of-speech id (a dictionary has a
        few thousand; building the string each time was a tenth of a write's time)."""
        tag = "-".join(x for x in morpheme.part_of_speech()[:4] if x != "*")
        self._tags[morpheme.part_of_speech_id()] = tag
        return tag

    def spacy_tokens(self, text: str) -> list[Token]:
        """The same through spaCy's tokenizer: the reference the direct path must equal."""
        return self._tokens(text, direct=False)

    def _tokens(self, text: str, *, direct: bool) -> list[Token]:
        text = normalize_text(text)
        out: list[Token] = []
        for start in range(0, len(text), _MAX_CHUNK):
            chunk = text[start : start + _MAX_CHUNK]
            if direct:
                tags = self._tags
                with self._lock:  # Sudachi tokenizers are not thread-safe
                    morphemes = []
                    for m in self._sudachi.tokenize(chunk):
                        tag = tags.get(m.part_of_speech_id()) or self._tag(m)
                        # A name's reading (retrieval.text.name_keys); only names pay for it.
                        reading = m.reading_form() if "人名" in tag else ""
                        morphemes.append((m.surface(), m.normalized_form(), tag, reading))
                out.extend(
                    Token(surface, norm or surface, tag, "", reading)
                    for surface, norm, tag, reading in morphemes
                    if surface and not surface.isspace()
                )
                continue
            with self._lock:
                doc = self._nlp.tokenizer(chunk)
            out.extend(
                Token(
                    t.text,
                    t.norm_ or t.text,
                    t.tag_ or "",
                    t.pos_ or "",
                    (t.morph.get("Reading") or [""])[0] if "人名" in (t.tag_ or "") else "",
                )
                for t in doc
                if not t.is_space
            )
        return out

    def terms(self, text: str) -> list[str]:
        """Index/search terms: content-word normalized forms, Latin words folded, numbers."""
        return terms_from_tokens(self.tokens(text))

    def entities(self, text: str, toks: list[Token] | None = None) -> list[Entity]:
        """Named entities: spaCy NER when enabled, else proper-noun and Latin-name runs."""
        if self.ner_enabled:
            with self._lock, self._nlp.select_pipes(enable=["tok2vec", "ner"]):
                doc = self._nlp(normalize_text(text))
            return [Entity(e.text, e.label_) for e in doc.ents]
        return cheap_entities(toks if toks is not None else self.tokens(text))


def _is_content(tok: Token) -> bool:
    if _DIGITS_RE.match(tok.surface):
        return True
    if _ASCII_ALNUM_RE.match(tok.surface):
        return True
    if tok.tag.startswith(_DROP_POS):
        return False
    if tok.tag:
        return tok.tag.startswith(_CONTENT_POS)
    return tok.pos in {"NOUN", "PROPN", "VERB", "ADJ", "NUM"}


# "which book", "what kind of restaurant", "how many cats": the noun an English question asks
# about (its words in between are no nouns of their own).
_EN_FOCUS_RE = re.compile(
    r"\b(?:which|what|how many|how much)\s+(?:(?:kind|sort|type)s?\s+of\s+)?([a-z][a-z\-]+)",
    re.IGNORECASE,
)


class Focus(NamedTuple):
    """What a question asks about: the word as written, and its search term."""

    word: str
    term: str


def question_focus(text: str, toks: list[Token]) -> Focus | None:
    """What a question asks about: in Japanese its last common noun that is a search term (締切
    in 「…の締切はいつ？」, 予算 in 「…の予算を教えて」), in English the noun after which / what /
    how many ("which book"); None without one."""
    if text.isascii():
        m = _EN_FOCUS_RE.search(text)
        if m is None or m.group(1).lower() in STOP_WORDS:
            return None
        return Focus(m.group(1), english_norm(m.group(1)))
    for tok in reversed(toks):
        if tok.tag.startswith("名詞-普通名詞") and _is_content(tok):
            latin = _ASCII_ALNUM_RE.match(tok.surface)
            term = english_norm(tok.surface) if latin else tok.norm.lower()
            if term not in STOP_WORDS and tok.surface not in STOP_WORDS:
                return Focus(tok.surface, term)
    return None


def terms_from_tokens(toks: list[Token]) -> list[str]:
    """Map tokens to terms; Latin words give their stem (and, inside Japanese text, Sudachi's
    katakana reading)."""
    out: list[str] = []
    japanese = any(_JAPANESE_RE.search(t.surface) for t in toks)
    for tok in toks:
        if not _is_content(tok):
            continue
        if _LATIN_PHRASE_RE.match(tok.surface):
            # Sudachi reads some English phrases as one word ("want to" -> ウォントゥ, "don't" ->
            # ドント): their words are terms as if written apart, the katakana reading is not one.
            for word in _PHRASE_SPLIT_RE.split(tok.surface):
                if word.lower() not in STOP_WORDS:
                    out.append(english_norm(word))
            continue
        if _ASCII_ALNUM_RE.match(tok.surface):
            if tok.surface.lower() in STOP_WORDS:
                continue
            out.append(english_norm(tok.surface))
            # Sudachi reads many English words as katakana (Intent -> インテント), so a Japanese
            # memory written in katakana still matches a query written in Latin script. In
            # English text the reading only repeats the word (go -> ゴー, support -> サポート).
            if japanese and tok.norm and tok.norm != tok.surface and _KATAKANA_RE.match(tok.norm):
                out.append(tok.norm)
            continue
        term = tok.norm.lower()
        if term in STOP_WORDS or tok.surface in STOP_WORDS:
            continue
        out.append(term)
    return out


_ENTITY_LABELS = (
    ("人名", "Person"),
    ("地名", "Place"),
    ("組織名", "Organization"),
)


def cheap_entities(toks: list[Token]) -> list[Entity]:
    """Runs of proper nouns (Sudachi 固有名詞) or capitalised Latin words, merged."""
    ents: list[Entity] = []
    run: list[Token] = []
    label = ""

    def flush() -> None:
        nonlocal run, label
        if run:
            sep = " " if all(_LATIN_RE.match(t.surface) for t in run) else ""
            ents.append(Entity(sep.join(t.surface for t in run), label or "ProperNoun"))
        run, label = [], ""

    for tok in toks:
        latin = _LATIN_RE.match(tok.surface)
        if latin and (tok.surface.lower() in STOP_WORDS or not tok.surface[:1].isupper()):
            # Sudachi tags some English words as proper nouns (was, did, eat, last): in Latin
            # letters only a capital says name
            flush()
        elif "固有名詞" in tok.tag:
            tok_label = next((lab for key, lab in _ENTITY_LABELS if key in tok.tag), "ProperNoun")
            if not run or not label:
                label = tok_label
            run.append(tok)
        elif (
            _LATIN_RE.match(tok.surface)
            and tok.surface[:1].isupper()
            and tok.surface.lower() not in STOP_WORDS
        ):
            run.append(tok)
        else:
            flush()
    flush()
    return ents


_QUOTED_RE = re.compile(r"[「『]([^」』\n]{1,40})[」』]")
_KATAKANA_NAME_RE = re.compile(r"[\u30A1-\u30FA\u30FC]{3,}")
_LATIN_NAME_RE = re.compile(
    r"(?<![A-Za-z0-9])"
    r"(?:[A-Za-z]+[\-_]?[0-9][A-Za-z0-9\-]*|[A-Z][A-Za-z0-9]*(?:[ \-][A-Z][A-Za-z0-9]*)*)"
    r"(?![A-Za-z0-9])"
)
MAX_ENTITIES = 20


def normalize_entity(name: str) -> str:
    """One spelling per entity: NFKC, Latin lower-cased, spaces folded."""
    return " ".join(normalize_text(name).lower().split())


# How much two memories naming the same thing say about each other, by how the name was found:
# a quoted name (「ヒスイ」) is what a memory is about; a place (京都) is shared by unrelated ones.
ENTITY_WEIGHTS = {"quoted": 1.0, "name": 0.8, "place": 0.4}


def memory_entities(text: str, toks: list[Token]) -> list[tuple[str, float]]:
    """Names a memory mentions, normalised, each with its weight: quoted names (「…」),
    proper-noun runs (Sudachi; places count less), katakana words of three or more characters
    and Latin names or model numbers. Common ones are told apart at query time by their
    document frequency."""
    text = normalize_text(text)
    found = [(m.group(1), ENTITY_WEIGHTS["quoted"]) for m in _QUOTED_RE.finditer(text)]
    found += [
        (e.text, ENTITY_WEIGHTS["place" if e.label == "Place" else "name"])
        for e in cheap_entities(toks)
        if len(e.text) >= 2
    ]
    found += [(m.group(0), ENTITY_WEIGHTS["name"]) for m in _KATAKANA_NAME_RE.finditer(text)]
    found += [
        (m.group(0), ENTITY_WEIGHTS["name"])
        for m in _LATIN_NAME_RE.finditer(text)
        if len(m.group(0)) >= 3
    ]
    out: dict[str, float] = {}
    for name, weight in found:
        n = normalize_entity(name)
        if n and n not in STOP_WORDS:
            out[n] = max(out.get(n, 0.0), weight)
    return list(out.items())[:MAX_ENTITIES]
