"""The side of the chat a question asks for (retrieval.analysis.speaker), in scores."""

from __future__ import annotations

from retrieval.analysis.speaker import turn_speaker
from retrieval.models import Candidate

# In a chat between a user and an assistant, a turn of the other side than the question asks
# for keeps this share of its score: the assistant's answer that repeats the user's words is not
# where the user's fact is, and the user's question is not what the assistant said. It stays a
# result, below the turns of the side asked for.
OTHER_SPEAKER_SHARE = 0.5


def speaker_share(c: Candidate, asked: str | None) -> float:
    """OTHER_SPEAKER_SHARE for a turn said by the other side than `asked` (by its metadata role
    or its label), else 1."""
    if asked is None:
        return 1.0
    said_by = turn_speaker(c.content, c.metadata)
    return OTHER_SPEAKER_SHARE if said_by is not None and said_by != asked else 1.0
