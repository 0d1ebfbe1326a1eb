"""Names across scripts: 佐藤, サトウ, Sato and Satoh are one key; マイケル and Michael meet too.

Every person-like name a text holds gets script-neutral keys, at write time for a memory (they
are index terms of their own, beside its words: `retrieval retokenize` gives stored memories
theirs) and at query time for the question's names, which the names leg looks up:

- a name's **reading** in Latin letters: Sudachi's reading of a Japanese name (佐藤 -> サトウ),
  the kana itself (マイケル), or for a Latin-script word the word (Sato) and its likely katakana
  (David -> ダビッド, from `e2k`'s model of English spelling), each folded so that spellings of
  one sound agree: long vowels (サトウ, Satoh, Satou -> sato; オオタ, Ohta -> ota), doubled
  consonants (デビッド -> debido);
- for names from kana or Latin letters (foreign names, whose katakana varies: マイケル /
  ミチェル, メラニー / メロニー), also the **consonant skeleton** (mkr), matched with less
  credit, and only across scripts: a skeleton heard from Latin letters is keyed apart from one
  heard from kana, and a question's name looks up the other script's. Two Latin words (Tilly,
  Tell: tr) or two kana names that share their consonants are not one name written twice (on
  LoCoMo, "Tilly" found every turn that began "Tell me" or "Totally").

Names are person-like tokens: Sudachi's 人名 (surname, given name, foreign name) and capitalised
Latin words. Each token is keyed alone, so that name order (Yamada Taro, 山田太郎) and
honorifics (さん, 様, -san, 先生: tokens of their own, not names) do not matter.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from retrieval.models import QueryName
from retrieval.text.nlp import STOP_WORDS, Token, terms_from_tokens

# Index terms of name keys: a prefix no word's term has (Sudachi never makes one token of kanji
# and Latin letters), so that the keyword leg's questions never meet them by accident.
READING_PREFIX = "人名"
SOUND_PREFIX = "人音"
# The script a skeleton was heard from: Latin letters (ラ) or kana (カ).
LATIN_SOUND = SOUND_PREFIX + "ラ"
KANA_SOUND = SOUND_PREFIX + "カ"
# A skeleton shorter than this (Anna, Nina: n) says too little to key on.
MIN_SKELETON = 2
# Titles and honorifics written in Latin letters (Dr. Patel, Kimura-san): not names.
LATIN_TITLES = frozenset(
    "mr mrs ms miss dr prof sir madam san sama kun chan sensei senpai sempai shi dono".split()  # noqa: SIM905
)

# Katakana -> Hepburn romaji. Two-character sounds first (キャ, ティ, ファ), then one.
_DIGRAPHS = {
    **{k + s: v for k, row in {
        "キ": "k", "ギ": "g", "シ": "sh", "ジ": "j", "チ": "ch", "ニ": "n", "ヒ": "h", "ビ": "b",
        "ピ": "p", "ミ": "m", "リ": "r",
    }.items() for s, v in (("ャ", row + ("a" if row in ("sh", "j", "ch") else "ya")),
                           ("ュ", row + ("u" if row in ("sh", "j", "ch") else "yu")),
                           ("ョ", row + ("o" if row in ("sh", "j", "ch") else "yo")))},
    "シェ": "she", "ジェ": "je", "チェ": "che", "ティ": "ti", "ディ": "di", "トゥ": "tu",
    "ドゥ": "du", "テュ": "tyu", "デュ": "dyu", "ファ": "fa", "フィ": "fi", "フェ": "fe",
    "フォ": "fo", "フュ": "fyu", "ウィ": "wi", "ウェ": "we", "ウォ": "wo", "ヴァ": "va",
    "ヴィ": "vi", "ヴェ": "ve", "ヴォ": "vo", "ツァ": "tsa", "ツィ": "tsi", "ツェ": "tse",
    "ツォ": "tso", "クァ": "kwa", "グァ": "gwa", "イェ": "ye", "スィ": "si", "ズィ": "zi",
}  # fmt: skip
# The syllables read better as one string than as a list of 86.
_SYLLABLES = "a i u e o ka ki ku ke ko ga gi gu ge go sa shi su se so za ji zu ze zo ta chi tsu te to da ji zu de do na ni nu ne no ha hi fu he ho ba bi bu be bo pa pi pu pe po ma mi mu me mo ya yu yo ra ri ru re ro wa i e o n vu a i u e o ya yu yo wa"  # noqa: E501
_MONO = dict(
    zip(
        "アイウエオカキクケコガギグゲゴサシスセソザジズゼゾタチツテトダヂヅデドナニヌネノ"
        "ハヒフヘホバビブベボパピプペポマミムメモヤユヨラリルレロワヰヱヲンヴァィゥェォャュョヮ",
        _SYLLABLES.split(" "),
        strict=True,
    )
)
_KANA_RE = re.compile(r"^[\u3041-\u309F\u30A0-\u30FFー]+$")
_LATIN_NAME_RE = re.compile(r"^[A-Z][a-z]+$|^[A-Z]{2}[a-z]*$")


def romaji(kana: str) -> str:
    """Hepburn romaji of kana (hiragana read as katakana); ッ and ー leave their mark to fold()
    (a doubled consonant, a repeated vowel)."""
    kata = "".join(chr(ord(c) + 0x60) if "\u3041" <= c <= "\u3096" else c for c in kana)
    out: list[str] = []
    i = 0
    while i < len(kata):
        two = kata[i : i + 2]
        if two in _DIGRAPHS:
            out.append(_DIGRAPHS[two])
            i += 2
            continue
        c = kata[i]
        if c == "ッ":
            out.append("q")  # doubles the next consonant; fold() drops it
        elif c == "ー":
            out.append(out[-1][-1] if out and out[-1][-1] in "aeiou" else "")
        else:
            out.append(_MONO.get(c, ""))
        i += 1
    return "".join(out)


def fold(word: str) -> str:
    """One spelling per sound: Latin letters only, lower case, long vowels and doubled
    consonants single (Satoh, Satou, サトウ -> sato; Ohta, オオタ -> ota; debiddo -> debido)."""
    s = re.sub(r"[^a-z]", "", word.lower()).replace("q", "")
    s = re.sub(r"(?<=[aeiou])h(?![aeiouy])", "", s)  # Ohta, Satoh: a long vowel
    s = s.replace("ou", "o").replace("ei", "e")
    s = re.sub(r"([aeiou])\1+", r"\1", s)
    s = re.sub(r"([bcdfgjklmprstvwxz])\1+", r"\1", s)
    return re.sub(r"m(?=[bp])", "n", s)  # Namba / Nanba


def skeleton(word: str) -> str:
    """The consonants of a folded spelling, in classes that katakana blurs (b/v, r/l, s/z/th/sh,
    f/h, ts/t, ch/k/c/q: the spelling model reads Michael ミチェル where people write
    マイケル) -> mkr for both."""
    s = fold(word)
    s = re.sub(r"sh|ch|ts|th", lambda m: {"sh": "s", "ch": "k", "ts": "t", "th": "s"}[m[0]], s)
    s = s.translate(str.maketrans("vlzfqc", "brshkk"))
    s = re.sub(r"[aeiouyw]", "", s)
    return re.sub(r"(.)\1+", r"\1", s)


class _Katakana:
    """English spelling -> likely katakana (`e2k`'s character model), loaded on first use
    (~0.1 s); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._model: Any = None

    def __call__(self, word: str) -> str:
        with self._lock:
            if self._model is None:
                from e2k import C2K

                self._model = C2K()
            return str(self._model(word))


_KATAKANA = _Katakana()


@lru_cache(maxsize=65536)
def latin_keys(word: str, *, asked: bool = False) -> frozenset[str]:
    """Keys of one Latin-script name (its own folded spelling, and its likely katakana's); its
    skeleton as heard from Latin letters, or `asked` (a question's name) as kana would have it."""
    low = word.lower()
    keys = {READING_PREFIX + fold(low)}
    r = romaji(_KATAKANA(low))
    keys.add(READING_PREFIX + fold(r))
    if len(sk := skeleton(r)) >= MIN_SKELETON:
        keys.add((KANA_SOUND if asked else LATIN_SOUND) + sk)
    return frozenset(k for k in keys if len(k) > len(READING_PREFIX) + 1)


@lru_cache(maxsize=65536)
def reading_keys(reading: str, kana_written: bool, asked: bool = False) -> frozenset[str]:
    """Keys of one Japanese name from its reading; a name written in kana (a foreign name,
    マイケル) also gets its skeleton, as heard from kana, or `asked` as Latin letters would
    have it."""
    r = romaji(reading)
    keys = {READING_PREFIX + fold(r)}
    if kana_written and len(sk := skeleton(r)) >= MIN_SKELETON:
        keys.add((LATIN_SOUND if asked else KANA_SOUND) + sk)
    return frozenset(k for k in keys if len(k) > len(READING_PREFIX) + 1)


def is_name_key(term: str) -> bool:
    return term.startswith((READING_PREFIX, SOUND_PREFIX))


def person_tokens(toks: Iterable[Token]) -> list[Token]:
    """The tokens that name a person (or may: a capitalised Latin word that is no stop word
    and no title)."""
    out = []
    for t in toks:
        japanese = (
            not t.surface.isascii()
            and "人名" in t.tag
            and bool(t.reading)
            and bool(_KANA_RE.match(t.reading))
        )
        latin = (
            bool(_LATIN_NAME_RE.match(t.surface))
            and t.surface.lower() not in STOP_WORDS
            and t.surface.lower() not in LATIN_TITLES
        )
        if japanese or latin:
            out.append(t)
    return out


def token_keys(t: Token, *, asked: bool = False) -> frozenset[str]:
    """The keys of one person token: a memory's index terms, or `asked`, what a question's
    name looks up."""
    if t.surface.isascii():
        return latin_keys(t.surface, asked=asked)
    return reading_keys(t.reading, bool(_KANA_RE.match(t.surface)), asked)


def name_keys(toks: Iterable[Token]) -> list[str]:
    """Every key of every person-like token of a text, once each, in order: a memory's name
    index terms."""
    out: dict[str, None] = {}
    for t in person_tokens(toks):
        out.update(dict.fromkeys(sorted(token_keys(t))))
    return list(out)


def query_names(toks: Iterable[Token]) -> list[QueryName]:
    """The question's person-like names (one entry per surface), each with its keyword terms
    and its keys."""
    seen: dict[str, QueryName] = {}
    for t in person_tokens(toks):
        if t.surface not in seen:
            keys = tuple(sorted(token_keys(t, asked=True)))
            if keys:
                seen[t.surface] = QueryName(t.surface, tuple(terms_from_tokens([t])), keys)
    return list(seen.values())
