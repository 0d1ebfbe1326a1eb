"""Questions about the present, and whose fact a text states.

A question about the present ("where do I live now?", "Who is my dentist?", 今の携帯のキャリアは？,
兄は今どこに住んでる？) wants the newest of the memories that state the same thing at different
times (retrieval.rank.latest); a question about the past (where did I live in 2023?, 大阪に住んで
いた頃) does not. Decided from the words, not a model:

- a marker of now: now, these days, currently, still, 今, いま, 現在, 最近, いつも, 普段 …;
- or, in English, with no marker of the past, a present-tense question about the asker (my, I,
  or the household: we, our) asked with is / are / do (Who is my dentist?, Which provider do
  we use?). In Japanese a marker is needed: the non-past
  progressive is as often a clause's (進めている案件の予算) as the question's;
- or, in either language, a question (a question mark or a question word: not a search
  phrase such as ジムで筋トレ) for an attribute that changes over time
  (retrieval.analysis.facts: where one lives, one's car, doctor, electricity supplier) with
  nothing past in it (no past verb, no 前 / 以前 / 昔): 住まいはどこ？, Who teaches me piano?;
- and never with a named window that is over (2023年, last month), nor in a question about what
  would have been (would … if), nor in one that adds up (the total, altogether, 合計, 全部で):
  a sum is made of every memory that holds a part, not of the newest.

A question asking for a suggestion for the asker's own time ahead ("I've got some free time
tonight, any documentary recommendations?", 今夜ひまなんだけど、おすすめの映画ある？) names when
the asker will act, not when the memories that answer it were made (`plans_ahead`): its window
is not read. Not when anything in it is past (did, last, watched, 観た), which names memories.

Whose fact: the relations a text names (my wife, 兄, 母, a teammate) — a question about my
brother's city is not answered by my own move, nor mine by my parents'.
"""

from __future__ import annotations

import re

from retrieval.text.nlp import Token

_EN_NOW = re.compile(
    r"\b(?:now|nowadays|these days|currently|at the moment|at present|right now|still|"
    r"any ?more|today)\b",
    re.IGNORECASE,
)
_EN_PAST = re.compile(
    r"\b(?:was|were|did|had|used to|ago|last|previous(?:ly)?|former(?:ly)?|first|"
    r"originally|before|earlier|back then|once|then)\b",
    re.IGNORECASE,
)
# "'s" is "is" after a question word or a pronoun (what's, it's); after a noun it is a
# possessive (my master's thesis), which says nothing of the time.
_EN_PRESENT_ASK = re.compile(
    r"\b(?:is|are|am|do|does)\b|\b(?:what|who|where|when|how|which|it|that|there|here|he|she)"
    r"'s\b|'re\b|'m\b",
    re.IGNORECASE,
)
# The asker, or the household the asker speaks for ("Which internet provider do we use at home?").
_EN_ME = re.compile(r"\b(?:my|i|me|mine|we|us|our|ours)\b", re.IGNORECASE)
# A question about what would be, had things gone otherwise ("Would she still want it if she
# hadn't ...?"): about no time at all, whatever its "still" or "now".
_EN_HYPOTHETICAL = re.compile(
    r"\b(?:would|could|might)\b.*\bif\b|\bif\b.*\b(?:would|could|might)\b", re.IGNORECASE
)
# A question that adds up what several memories hold ("the total amount I spent on the bag and
# the skincare", 合わせていくら): each part is in its own memory, older ones included.
_EN_SUM = re.compile(r"\b(?:total|in all|altogether|combined|sum)\b", re.IGNORECASE)
_JA_SUM = re.compile(r"合計|合わせて|全部で|総額|累計")
# 今 alone (今年, 今週, 今日 are words of their own to Sudachi), いま, 現在, 最近 …
_JA_NOW = frozenset(
    "今 いま 現在 最近 近頃 このごろ この頃 普段 ふだん いつも 今も まだ 現状 目下".split()  # noqa: SIM905
)

# A question, not a search phrase (ジムで筋トレ names the gym and asks nothing): a question mark,
# or a question word.
_ASKS = re.compile(
    r"[?？]|どこ|どれ|どの|何|なに|なん|誰|だれ|いつ|どう|どんな|"
    r"\b(?:who|what|which|where|when|how|whose)\b",
    re.IGNORECASE,
)

# Words for before, in a question without a past verb (前の職場は？, 以前の住所).
_JA_BEFORE = frozenset("前 以前 昔 当時 元 もと かつて".split())  # noqa: SIM905

# Relations a fact can belong to, each with its words in Japanese (a pattern matched inside the
# text, with lookarounds where it hides in other words: 大丈夫, 弟子) and in English (whole
# words, in any case).
_RELATIONS: dict[str, tuple[str, str]] = {
    "parents": (r"両親|ご両親", "parent parents"),
    "mother": (r"(?<!祖)母(?!国|校|語)|お母さん|ママ", "mother mom mum"),
    "father": (r"(?<!祖|神)父(?!兄)|お父さん|パパ", "father dad"),
    "brother": (r"兄(?!弟子)|(?<!師|門|兄)弟(?!子)", "brother brothers"),
    "sister": (r"姉|妹", "sister sisters"),
    "spouse": (r"妻|(?<![丈工農漁])夫(?!婦人|人)|嫁|旦那|奥さん", "wife husband spouse"),
    "child": (r"娘|息子|子供|子ども", "daughter daughters son sons kid kids child children"),
    "grandparent": (
        r"祖母|祖父|おばあちゃん|おじいちゃん",
        "grandmother grandfather grandma grandpa",
    ),
    "partner": (r"彼女|彼氏|恋人", "girlfriend boyfriend partner"),
    "colleague": (
        r"同僚|上司|部下|先輩|後輩",
        "colleague colleagues co-worker co-workers coworker coworkers boss teammate teammates",
    ),
    "friend": (r"友達|友人", "friend friends"),
}
_RELATION_RES = {
    k: re.compile(rf"{ja}|\b(?:{'|'.join(map(re.escape, en.split()))})\b", re.IGNORECASE)
    for k, (ja, en) in _RELATIONS.items()
}
# An ASCII text can hold no Japanese word, and it names an English one exactly when one of its
# runs of word characters is that word ("co-worker", two runs, is looked for as such): one
# pass over its words instead of eleven searches, which took ~1 ms for a 2,000-character turn
# (the reranker reads fifty). tests/analysis/test_tense.py compares the two.
_ENGLISH_WORDS = {w: k for k, (_, en) in _RELATIONS.items() for w in en.split() if "-" not in w}
_ENGLISH_HYPHENATED = {
    k: re.compile(rf"\b(?:{'|'.join(w for w in en.split() if '-' in w)})\b")
    for k, (_, en) in _RELATIONS.items()
    if "-" in en
}
_WORD_RUN = re.compile(r"\w+")


def relations_in(text: str) -> frozenset[str]:
    """The relations a text names (wife, 兄 -> brother, a teammate -> colleague)."""
    if not text.isascii():
        return frozenset(k for k, rx in _RELATION_RES.items() if rx.search(text))
    low = text.lower()
    found = {_ENGLISH_WORDS[w] for w in set(_WORD_RUN.findall(low)) if w in _ENGLISH_WORDS}
    found.update(k for k, rx in _ENGLISH_HYPHENATED.items() if "-" in low and rx.search(low))
    return frozenset(found)


# Asking for a suggestion: "any recommendations?", "Any ideas?", "what should I …", おすすめ.
_EN_ADVICE = re.compile(
    r"\b(?:recommend\w*|suggest\w*|ideas?|advice|tips?|what should i|where should i)\b",
    re.IGNORECASE,
)
_JA_ADVICE = re.compile(
    r"おすすめ|オススメ|お勧め|お薦め|アドバイス|提案|アイデア|何がいい|どうしたらいい"
)
# A verb in the past in English ("watched", "tried"): a word ending in -ed.
_EN_ED = re.compile(r"\b[a-z]{2,}ed\b", re.IGNORECASE)


# English verbs whose past is not in -ed (went, saw, bought): the common ones, each only in its
# past form (not "read", "put", "cut", "hit", "set", whose past is their present).
_EN_IRREGULAR_PAST = re.compile(
    r"\b(?:went|saw|got|made|took|came|ate|drank|ran|met|bought|brought|thought|found|gave|"
    r"told|said|left|felt|kept|began|won|lost|wrote|sat|stood|spent|sent|built|paid|heard|held|"
    r"flew|drove|rode|swam|sang|broke|chose|forgot|fell|grew|knew|threw|wore|caught|taught|"
    r"fought|sold|slept|lent|became|woke|understood|spoke|stole|hid|bit|shook|led|fed|"
    r"dealt|meant|dug|hung|lit|sought|struck|swore|tore|wept|overslept|gotten|seen|done|"
    r"been|taken|given|eaten|written|driven|flown)\b",
    re.IGNORECASE,
)


# A Japanese verb or copula in the past at the end of a clause (あった, 勝った, 行ったっけ, 何だった).
_JA_TOLD_PAST = re.compile(r"(?:た|だ)(?:の|っけ|か|よね?|ね)?(?:[?？。!！、]|\s|$)")


def told_in_the_past(text: str) -> bool:
    """Whether a text (a question, or a memory: retrieval.analysis.time.events) tells of the
    past: an English past marker (did, was, ago, last …), a verb in -ed or a common irregular
    past (went, saw, bought); a Japanese verb in the past (水曜日に何があった？). A bare weekday
    in it is the last one before today (retrieval.analysis.time)."""
    if text.isascii():
        return bool(_EN_PAST.search(text) or _EN_ED.search(text) or _EN_IRREGULAR_PAST.search(text))
    return _JA_TOLD_PAST.search(text) is not None


def plans_ahead(text: str, toks: list[Token]) -> bool:
    """Whether a question asks for a suggestion and says nothing past (see the module's doc):
    its time, if it names one not over, is the asker's plan, not a window of memories."""
    if text.isascii():
        return bool(
            _EN_ADVICE.search(text) and not _EN_PAST.search(text) and not _EN_ED.search(text)
        )
    return bool(_JA_ADVICE.search(text)) and not any(t.norm == "た" for t in toks)


def _japanese_present(toks: list[Token]) -> bool:
    """A marker of now (今, いま, 現在, 最近, いつも). The non-past progressive alone does not
    say it: 進めている案件の予算 asks about a project, not about now."""
    return any(t.surface in _JA_NOW or t.norm in _JA_NOW for t in toks)


def _japanese_past(toks: list[Token]) -> bool:
    """A verb in the past (た: 住んでいた, だった) or a word for before (前, 以前, 昔, 当時)."""
    return any(t.norm == "た" or t.surface in _JA_BEFORE for t in toks)


def asks_about_now(
    text: str, toks: list[Token], *, past_window: bool, about_a_fact: bool = False
) -> bool:
    """Whether a question asks about the present (see the module's doc); `past_window`: the
    question names a window that is over (2023年, last month); `about_a_fact`: it asks for an
    attribute of someone's that can change (retrieval.analysis.facts: 住まいはどこ？, Who
    teaches me piano?), which, said with nothing past, is asked of now."""
    if past_window or _JA_SUM.search(text) or _EN_SUM.search(text):
        return False
    if text.isascii():
        if _EN_HYPOTHETICAL.search(text):
            return False
        if _EN_NOW.search(text):
            return True
        if _EN_PAST.search(text):
            return False
        if _EN_PRESENT_ASK.search(text) and _EN_ME.search(text):
            return True
        return about_a_fact and _ASKS.search(text) is not None and not _EN_ED.search(text)
    if _japanese_present(toks):
        return True
    return about_a_fact and _ASKS.search(text) is not None and not _japanese_past(toks)


# A question about two moments: the time between them, or which came first ("How many days had
# passed between the Sunday mass and the Ash Wednesday service?", "Which did I do first, …?",
# 引っ越しと転職、どちらが先？, 何日経った).
_EN_TWO_MOMENTS = re.compile(
    r"\bbetween\b.+\band\b|\bwhich\b.*\bfirst\b|\bbefore or after\b|"
    r"\bhow (?:many|long)\b.*\b(?:since|after|before|passed|elapsed|between)\b",
    re.IGNORECASE,
)
_JA_TWO_MOMENTS = re.compile(
    r"(?:どちら|どっち)が(?:先|後)|何(?:日|週間|か月|ヶ月|年)(?:経|たっ|間|後|前)"
)


def relates_two_moments(text: str, window_words: str | None) -> bool:
    """Whether a question asks about the time between two moments or their order: its window
    (`window_words`, the words it was read from) names one of them, not where the answer lies.
    A window that is itself the span between two dates ("between May and August",
    6月から8月まで) is not such a question's."""
    words = (window_words or "").lower()
    if any(w in words for w in ("between", "since", "から", "以来", "…")):
        return False
    if text.isascii():
        return _EN_TWO_MOMENTS.search(text) is not None
    return _JA_TWO_MOMENTS.search(text) is not None
