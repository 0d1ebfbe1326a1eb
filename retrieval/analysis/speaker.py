"""Whose turns answer a question, in a chat between a user and an assistant.

A store of such a chat holds both sides: the user's turns ("user: I've been experimenting with
turbinado sugar …") and the assistant's, often long answers that repeat the user's words and add
a great many of their own. A question about the asker's own life ("my cookies need something
extra", "What was my previous occupation?") is answered by what the user said; the answer that
followed mentions everything and is found by every leg, but it is not where the user's fact is.
A question about what the assistant said ("the phone number you provided me", "our previous
chat about the campaign", 前に教えてくれた店) is answered by the assistant's turns.

Decided from the words, not a model:
- the assistant's: "you" with a verb of telling in the past (you told / said / mentioned /
  recommended / suggested / provided / gave / shared / listed / explained / wrote), "our
  previous conversation", "what we discussed" in a question put to the assistant ("can you
  remind me …"; "my wife and I … when we talked" is the user's); in Japanese 教えてくれた, 勧めてくれた,
  あなたが…言った, 前の会話;
- the user's: otherwise, a question in the first person (I, my, me; 私, 僕, 俺, 自分);
- neither (None): everything else. "Do you think it might be my living room?" asks for an
  opinion now, not for words said before: it is the user's.

A memory's speaker is its metadata's `role` ("user", "assistant": the roles of a request's
`recent_conversation`), or else its turn's own label ("user: …", "assistant: …"; ユーザー,
アシスタント), as a chat is stored turn by turn (`turn_speaker`); a memory with neither has none,
and no question moves it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

USER = "user"
ASSISTANT = "assistant"

_TELLING = (
    r"told|said|mentioned|recommended|suggested|provided|gave|shared|listed|explained|wrote|"
    r"described|advised|proposed|offered|helped|came up with|showed|taught|sent|found"
)
_EN_ASSISTANT = re.compile(
    rf"\byou(?: had| have|'ve|'d)?(?: \w+ly)? (?:{_TELLING})\b"
    r"|\bour (?:\w+ )?(?:conversation|chat|discussion|exchange)s?\b",
    re.IGNORECASE,
)
# "what we discussed" is the assistant's only in a question put to it ("can you remind me what we
# discussed"); "when my wife and I … we talked about moving" is not.
_EN_WE_TALKED = re.compile(r"\b(?:we|you and I) (?:discussed|talked|chatted|spoke)\b", re.I)
_EN_YOU = re.compile(r"\byou\b", re.IGNORECASE)
_JA_ASSISTANT = re.compile(
    r"(?:教え|勧め|すすめ|薦め|提案し|言っ|話し|挙げ|書い|紹介し|説明し)て(?:くれ|もらっ)た"
    r"|あなた(?:が|は).{0,20}(?:言|教|勧|提案|話|挙げ|書)"
    # 前の会話, not 先日の話 (a story told by anyone)
    r"|(?:前|以前|この前|さっき|先日)の(?:会話|やりとり|やり取り|チャット)"
)
# English persons, written once: the asker's first person here, and the whole-turn reading of
# retrieval.analysis.reading (first persons singular and plural, second).
EN_I = r"i|i'm|i've|i'd|i'll|me|my|mine|myself"
EN_WE = r"we|we're|we've|we'd|our|ours|us"
EN_YOU = r"you|your|yours|you're|you've|yourself"
_EN_ME = re.compile(rf"\b(?:{EN_I})\b", re.IGNORECASE)
_JA_ME = re.compile(r"私|わたし|僕|ぼく|俺|自分")

# A turn's label: the speaker's name and a colon at its start.
_LABELS = {"user": USER, "ユーザー": USER, "assistant": ASSISTANT, "アシスタント": ASSISTANT}
_TURN_LABEL = re.compile(r"\s*(user|assistant|ユーザー|アシスタント)\s*[:：]", re.IGNORECASE)


# Any speaker's label at a turn's start ("Caroline: ", "user: ", "メラニー: "): its name, group 1.
SPEAKER_LABEL = re.compile(r"\s*([^\s:：][^:：\n]{0,30})[:：]\s")


def speaker_label(text: str) -> str | None:
    """The turn's speaker label as written, separator and space included ("Caroline: "), or
    None: what a reader keeps before a part of the turn cut from its middle."""
    m = SPEAKER_LABEL.match(text)
    return m.group(0) if m else None


def labelled(text: str) -> tuple[str, str] | None:
    """A turn's speaker ("Caroline") and what it says after its label, or None without one."""
    m = SPEAKER_LABEL.match(text)
    return (m.group(1).strip(), text[m.end() :]) if m else None


def asked_speaker(text: str) -> str | None:
    """Whose turns answer the question (USER, ASSISTANT or None: see the module's doc)."""
    if _EN_ASSISTANT.search(text) or _JA_ASSISTANT.search(text):
        return ASSISTANT
    if _EN_WE_TALKED.search(text) and _EN_YOU.search(text):
        return ASSISTANT
    if _EN_ME.search(text) or _JA_ME.search(text):
        return USER
    return None


def turn_speaker(content: str, metadata: Mapping[str, Any] | None = None) -> str | None:
    """A memory's speaker: its metadata's role, else the one its text names at its start
    ("assistant: …" -> ASSISTANT), or None."""
    role = (metadata or {}).get("role")
    if isinstance(role, str) and role.lower() in (USER, ASSISTANT):
        return role.lower()
    m = _TURN_LABEL.match(content)
    return _LABELS[m.group(1).lower()] if m else None
