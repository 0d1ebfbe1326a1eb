"""Questions about the present, and whose fact a text states.

A question about the present ("where do I live now?", "Who is my dentist?", 今の携帯のキャリアは？,
兄は今どこに住んでる？) wants the newest of the memories that state the same thing at different
times (retrieval.rank.latest); a question about the past (where did I live in 2023?, 大阪に住んで
いた頃) does not. Decided from the words, not a model:

- a marker of now: now, these days, currently, still, 今, いま, 現在, 最近, いつも, 普段 …;
- or, in English, with no marker of the past, a present-tense question about the asker (my, I)
  asked with is / are / do (Who is my dentist?). In Japanese a marker is needed: the non-past
  progressive is as often a clause's (進めている案件の予算) as the question's;
- and never with a named window that is over (2023年, last month), nor in a question about what
  would have been (would … if).

Whose fact: the relations a text names (my wife, 兄, 母, a teammate) — a question about my
brother's city is not answered by my own move, nor mine by my parents'.
"""

from __future__ import annotations

import re

from retrieval.analysis.nlp import Token

_EN_NOW = re.compile(
    r"\b(?:now|nowadays|these days|currently|at the moment|at present|right now|still|"
    r"any ?more|today)\b",
    re.IGNORECASE,
)
_EN_PAST = re.compile(
    r"\b(?:was|were|did|had|used to|ago|last|previous(?:ly)?|former(?:ly)?|first|"
    r"originally|before|back then|once|then)\b",
    re.IGNORECASE,
)
_EN_PRESENT_ASK = re.compile(r"\b(?:is|are|am|do|does)\b|'s\b|'re\b|'m\b", re.IGNORECASE)
_EN_ME = re.compile(r"\b(?:my|i|me|mine)\b", re.IGNORECASE)
# A question about what would be, had things gone otherwise ("Would she still want it if she
# hadn't ...?"): about no time at all, whatever its "still" or "now".
_EN_HYPOTHETICAL = re.compile(
    r"\b(?:would|could|might)\b.*\bif\b|\bif\b.*\b(?:would|could|might)\b", re.IGNORECASE
)
# 今 alone (今年, 今週, 今日 are words of their own to Sudachi), いま, 現在, 最近 …
_JA_NOW = frozenset(
    "今 いま 現在 最近 近頃 このごろ この頃 普段 ふだん いつも 今も まだ 現状 目下".split()  # noqa: SIM905
)

# Relations a fact can belong to, each with its words in both languages (a Japanese word
# matched inside the text, with lookarounds where it hides in other words: 大丈夫, 弟子).
_RELATIONS: dict[str, str] = {
    "parents": r"両親|ご両親|\bparents?\b",
    "mother": r"(?<!祖)母(?!国|校|語)|お母さん|ママ|\bmother\b|\bmom\b|\bmum\b",
    "father": r"(?<!祖|神)父(?!兄)|お父さん|パパ|\bfather\b|\bdad\b",
    "brother": r"兄(?!弟子)|(?<!師|門|兄)弟(?!子)|\bbrothers?\b",
    "sister": r"姉|妹|\bsisters?\b",
    "spouse": r"妻|(?<![丈工農漁])夫(?!婦人|人)|嫁|旦那|奥さん|\bwife\b|\bhusband\b|\bspouse\b",
    "child": r"娘|息子|子供|子ども|\bdaughters?\b|\bsons?\b|\bkids?\b|\bchild(?:ren)?\b",
    "grandparent": r"祖母|祖父|おばあちゃん|おじいちゃん|\bgrand(?:mother|father|ma|pa)\b",
    "partner": r"彼女|彼氏|恋人|\bgirlfriend\b|\bboyfriend\b|\bpartner\b",
    "colleague": r"同僚|上司|部下|先輩|後輩|\bcolleagues?\b|\bco-?workers?\b|\bboss\b|"
    r"\bteammates?\b",
    "friend": r"友達|友人|\bfriends?\b",
}
_RELATION_RES = {k: re.compile(v, re.IGNORECASE) for k, v in _RELATIONS.items()}


def relations_in(text: str) -> frozenset[str]:
    """The relations a text names (wife, 兄 -> brother, a teammate -> colleague)."""
    return frozenset(k for k, rx in _RELATION_RES.items() if rx.search(text))


def _japanese_present(toks: list[Token]) -> bool:
    """A marker of now (今, いま, 現在, 最近, いつも). The non-past progressive alone does not
    say it: 進めている案件の予算 asks about a project, not about now."""
    return any(t.surface in _JA_NOW or t.norm in _JA_NOW for t in toks)


def asks_about_now(text: str, toks: list[Token], *, past_window: bool) -> bool:
    """Whether a question asks about the present (see the module's doc); `past_window`: the
    question names a window that is over (2023年, last month)."""
    if past_window:
        return False
    if text.isascii():
        if _EN_HYPOTHETICAL.search(text):
            return False
        if _EN_NOW.search(text):
            return True
        if _EN_PAST.search(text):
            return False
        return bool(_EN_PRESENT_ASK.search(text) and _EN_ME.search(text))
    return _japanese_present(toks)
