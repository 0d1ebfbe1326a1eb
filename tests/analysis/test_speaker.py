"""Whose turns answer a question, and whose a turn is."""

import pytest

from retrieval.analysis.speaker import ASSISTANT, USER, asked_speaker, turn_speaker


@pytest.mark.parametrize(
    ("question", "speaker"),
    [
        # what the assistant said
        ("what's the phone number of the tourism board that you provided me earlier?", ASSISTANT),
        ("I was going through our previous conversation about humor, remind me of it", ASSISTANT),
        ("Can you remind me what we discussed about the budget?", ASSISTANT),
        ("Which hotel had you recommended for Kyoto?", ASSISTANT),
        ("前に教えてくれた店の名前は？", ASSISTANT),
        ("あなたが勧めた本は何だった？", ASSISTANT),
        ("この前の会話で出たレシピは？", ASSISTANT),
        # the asker's own life, even when it asks the assistant's opinion now
        ("I've been feeling like my cookies need something extra. Any advice?", USER),
        ("Do you think it might be my living room?", USER),
        ("I mentioned cooking something for my friend. What was it?", USER),
        ("What was my previous occupation?", USER),
        ("What did my wife and I decide when we talked about moving?", USER),
        ("私が先月買った靴は？", USER),
        ("先日の話で私が言った店は？", USER),
        # neither
        ("What is Caroline's identity?", None),
        ("ジョンが飼い始めた犬の名前は？", None),
    ],
)
def test_whose_turns_answer_a_question(question, speaker):
    assert asked_speaker(question) == speaker


@pytest.mark.parametrize(
    ("content", "speaker"),
    [
        ("user: I've been experimenting with turbinado sugar", USER),
        ("Assistant: Turbinado sugar is a great choice!", ASSISTANT),
        ("  assistant : spaced", ASSISTANT),
        ("ユーザー：今日はジムに行った", USER),
        ("アシスタント: いいですね", ASSISTANT),
        # a speaker's own name, a label further in, or none
        ("Caroline: Hey Mel!", None),
        ("I told the user: no", None),
        ("ジムで筋トレをした", None),
    ],
)
def test_a_turns_speaker_is_its_own_label(content, speaker):
    assert turn_speaker(content) == speaker


def test_a_turns_role_in_its_metadata_comes_first():
    assert turn_speaker("Turbinado sugar is a great choice!", {"role": "assistant"}) == ASSISTANT
    assert turn_speaker("assistant: quoted", {"role": "User"}) == USER
    # any other role or value is no speaker's: the label decides
    assert turn_speaker("user: hi", {"role": "system"}) == USER
    assert turn_speaker("hi", {"role": 3}) is None and turn_speaker("hi", {}) is None
