"""Text as character n-grams and content words read it, without a tokenizer: `clean` (what the
n-gram signal, the highlights and the reader's window compare) and `word_runs` (the words a
memory is about, for telling two memories of one fact apart)."""

from __future__ import annotations

import re
import unicodedata

# What clean() drops: anything but letters and digits (str.isalnum), "_" included.
_NON_WORD = re.compile(r"[\W_]+")
# The same for an ASCII text (NFKC leaves ASCII as it is): bytes.translate drops them some five
# times faster than the pattern (a LongMemEval turn: 46 -> 10 us).
_ASCII_NON_WORD = bytes(c for c in range(128) if not chr(c).isalnum())
# Content words without a tokenizer: Latin words, katakana words, kanji compounds.
_WORD_RUN = re.compile(r"[A-Za-z][A-Za-z0-9\-]{2,}|[\u30A1-\u30FAー]{2,}|[\u4E00-\u9FFF々]{2,}")


def clean(text: str) -> str:
    """The text as character n-grams read it: NFKC, lower case, letters and digits only."""
    if text.isascii():
        return text.encode().translate(None, _ASCII_NON_WORD).lower().decode()
    return _NON_WORD.sub("", unicodedata.normalize("NFKC", text).lower())


def word_runs(text: str) -> set[str]:
    """The text's Latin words of three letters or more, katakana words and kanji compounds, as
    written."""
    return set(_WORD_RUN.findall(text))
