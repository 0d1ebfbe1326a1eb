"""The words that frame a question rather than say what it asks.

"Do you remember: when did Melanie go to the museum?", "Remind me, what is my cat's name?",
"Quick question. …", 「テニスはいつしているか覚えてる？」, 「ねえ、…」: the frame asks the service to
recall; it names nothing to find. Left in, its words become keywords ("remember" matches every
turn that says "remember", and a question holding a word no memory holds reads as one about
something the store never mentions), and its "me" or "you" becomes the person asked about
("Remind me, …" is not a question about the user). `frame_spans` finds the frame at the
question's start (English, Japanese openers) and end (Japanese 「…か覚えてる？」), so that the
analyzer leaves it out of everything but the question's type.

A frame is only taken where the question goes on after it: "I forgot my password" keeps its
words ("I forgot" is a frame only before a full stop, a colon, a comma or a question word), and
a question that is all frame ("Do you remember?") keeps them.
"""

from __future__ import annotations

import re

_WH = r"(?=\s*(?:what|when|where|which|who|whom|whose|why|how|if|whether|did|do|does|is|are|was|were)\b)"
# Where an English frame ends: at punctuation, or before a question word.
_EN_END = r"(?:\s*[,.:;!?-]+\s*|" + _WH + r")"
# An opener is a frame before punctuation or a question word ("So what did …", "Well, …"), not
# before another word ("Well water …").
_EN_OPENER = re.compile(
    r"(?:hey|hi|hello|ok|okay|so|um+|uh+|well|btw|by the way|one more thing|"
    r"(?:a )?quick question|(?:just )?(?:curious|wondering)|question)" + _EN_END,
    re.IGNORECASE,
)
_EN_REQUEST = re.compile(
    r"(?:(?:please\s+)?(?:(?:can|could|would|will)\s+you\s+(?:please\s+)?)?"
    r"(?:remind\s+me|tell\s+me|help\s+me\s+remember)(?:\s+(?:of|about))?|"
    r"(?:do|did|would|can)\s+you\s+(?:happen\s+to\s+|still\s+)?(?:remember|recall|know)|"
    r"remember|recall)"
    r"(?:" + _EN_END + r"|\s+(?=\S))"
    r"|"
    r"(?:i\s+(?:forgot|forget|can'?t\s+remember|cannot\s+remember|don'?t\s+remember|"
    r"can'?t\s+recall|was\s+wondering)|i'?m\s+(?:trying\s+to\s+remember|wondering)|i\s+wonder)"
    + _EN_END,
    re.IGNORECASE,
)
_JA_OPENER = re.compile(
    r"(?:ねえ|ねぇ|あの|あのさ|えっと|えーと|ところで|そういえば|ちょっと(?:聞きたいんだけど|質問なんだけど|質問)|"
    r"質問(?:です|なんだけど)?|確認(?:です|なんだけど)?)[、,。！!\s]*"
)
_JA_CLOSER = re.compile(
    r"(?:覚えて(?:る|いる|います|ます)(?:か|かな)?|思い出せない(?:んだけど)?|忘れ(?:ちゃった|た)(?:んだけど)?|"
    r"知って(?:る|いる|います|ます)(?:か|かな)?|教えて(?:くれる|ください|下さい|ほしい)?)"
    r"[？?。！!\s]*$"
)


def frame_spans(text: str) -> list[tuple[int, int]]:
    """The spans of `text` that frame the question (see the module), in order; none when the
    question would be left empty."""
    spans: list[tuple[int, int]] = []
    pos = 0
    while True:
        start = pos + len(text[pos:]) - len(text[pos:].lstrip())
        m = (
            _EN_OPENER.match(text, start)
            or _EN_REQUEST.match(text, start)
            or _JA_OPENER.match(text, start)
        )
        if m is None or m.end() == start:
            break
        spans.append((start, m.end()))
        pos = m.end()
    end = len(text)
    tail = _JA_CLOSER.search(text, pos)
    if tail is not None:
        end = tail.start()
        spans.append((tail.start(), len(text)))
    if not text[pos:end].strip(" \t、,。.？?！!:;「」"):
        return []
    return spans
