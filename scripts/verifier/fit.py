"""Fit the confidence (retrieval.rank.confidence) on the dev sets, and print every signal's figures.

    python scripts/verifier/fit.py [--eval ../shared/eval] [--write] [--json rows.json]

Runs the service in-process (the embedded PostgreSQL or DATABASE_URL, as `retrieval eval`
does; the harness's namespaces `fit-*`, indexed once and reused) with the verifier on, and asks:
- `adversarial`: adversarial_dev, the answerable LoCoMo questions and the adversarial ones;
- `abstain`: abstain_dev (the evidence of a third of the questions removed: noisy labels);
- `twins`: the pairs scripts/verifier/twins.py makes over locomo_dev, longmemeval_dev (the
  haystack of its first pair only: LME_NAMESPACES) and asks_dev.

Every question is `train` or `dev` by its conversation, as the verifier's pairs are
(scripts/verifier/pairs.py): LoCoMo conv-26 and conv-30 are train, everything else (conv-41,
conv-42, LongMemEval, asks) dev. The maps are fitted on the train questions' first results only
(a logistic regression, L2 1.0, on `SIGNALS`); the thresholds are chosen there too: `high` so
that at most HIGH_FALSE of the train split's unanswerable questions get it, `answers` the
confidence of best balanced accuracy. The table printed (and, with --write, kept in
confidence.json) is measured on the dev questions: AUROC of each signal alone and of the
confidence, false-high, high-when-found, per set.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pairs import TRAIN_CONVERSATIONS  # noqa: E402
from train import auroc  # noqa: E402
from twins import read_jsonl, twins  # noqa: E402

from retrieval.evaluation.harness import eval_settings  # noqa: E402
from retrieval.evaluation.indexing import clock_zone, ensure_index, sub_namespace  # noqa: E402
from retrieval.models import RetrievalOptions  # noqa: E402
from retrieval.rank.confidence import SIGNALS  # noqa: E402
from retrieval.rank.verifier import MODEL_DIR  # noqa: E402
from retrieval.settings import Settings  # noqa: E402

HIGH_FALSE = 0.07
# A signal that is higher when nothing answers is read negated in the figures.
ORIENTED = {"unmatched": -1.0}
LME_NAMESPACES = 1
L2 = 1.0


def logistic(x: np.ndarray, y: np.ndarray, l2: float = L2) -> tuple[np.ndarray, float]:
    """Weights and intercept of an L2-regularised logistic regression (Newton's method; the
    intercept is not penalised)."""
    X = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros(X.shape[1])
    reg = np.eye(X.shape[1]) * l2
    reg[-1, -1] = 0.0
    for _ in range(50):
        p = 1 / (1 + np.exp(-X @ w))
        grad = X.T @ (p - y) + reg @ w
        hess = X.T @ (X * (p * (1 - p))[:, None]) + reg
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w[:-1], float(w[-1])


def split_of(namespace: str) -> str:
    return "train" if any(namespace.endswith(c) or f"{c}-" in namespace
                          for c in TRAIN_CONVERSATIONS) else "dev"  # fmt: skip


async def ask_all(rt: Any, base: str, queries: list[dict], set_name: str) -> list[dict]:
    print(f"asking {len(queries)} questions of {set_name} ({base})", file=sys.stderr, flush=True)
    rows = []
    for q in queries:
        now = q.get("now")
        when = datetime.fromisoformat(now) if now else None
        opts = RetrievalOptions(
            namespace=sub_namespace(base, q["namespace"]), limit=10, now=when,
            timezone=clock_zone(when), log_run=False,
        )  # fmt: skip
        res = await rt.orchestrator.retrieve(q["query"], opts)
        top = res.results[0] if res.results else None
        ids = [r.id for r in res.results[:5]]
        sig = {k: top.signals.get(f"confidence_{k}") for k in SIGNALS} if top else {}
        rows.append({
            "qid": q["qid"], "set": set_name, "namespace": q["namespace"],
            "split": split_of(q["namespace"]), "answerable": q.get("answerable", True),
            "found5": bool(set(q.get("relevant", [])) & set(ids)),
            "signals": sig, "confidence": top.confidence if top else 0.0,
            "label": top.relevance.value if top else "none",
            "first": top.id if top else None, "trap": q.get("trap", []),
            "confidence_ms": res.metadata.stage_latency_ms.get("confidence", 0.0),
            "verified": sum("confidence_verifier" in r.signals for r in res.results),
        })  # fmt: skip
    return rows


async def collect(root: Path) -> list[dict]:
    from retrieval.runtime import open_runtime

    rt = await open_runtime(eval_settings(Settings(), 10))
    try:
        rows: list[dict] = []
        adv = root / "adversarial_dev"
        await ensure_index(rt, adv / "memories.jsonl", "fit-adv", None)
        rows += await ask_all(rt, "fit-adv", read_jsonl(adv / "queries.jsonl"), "adversarial")
        abl = root / "abstain_dev"
        await ensure_index(rt, abl / "memories.jsonl", "fit-abl", None)
        rows += await ask_all(rt, "fit-abl", read_jsonl(abl / "queries.jsonl"), "abstain")
        pairs = twins([root / "locomo_dev", root / "longmemeval_dev", root / "asks_dev"])
        # Embedding a long chat's ~500 turns of ~1,000 characters takes ~10 minutes here: the
        # first LME_NAMESPACES of the pairs' haystacks.
        lme = set(
            list(dict.fromkeys(q["namespace"] for q in pairs if q["namespace"].startswith("lme-")))[
                :LME_NAMESPACES
            ]
        )
        pairs = [q for q in pairs if not q["namespace"].startswith("lme-") or q["namespace"] in lme]
        await ensure_index(rt, root / "longmemeval_dev" / "memories.jsonl.gz", "fit-lme", None,
                           only=lme)  # fmt: skip
        await ensure_index(rt, root / "asks_dev" / "memories.jsonl", "fit-asks", None)
        for prefix, base in (("locomo-", "fit-adv"), ("lme-", "fit-lme"), ("asks", "fit-asks")):
            part = [q for q in pairs if q["namespace"].startswith(prefix)]
            rows += await ask_all(rt, base, part, "twins")
        return rows
    finally:
        await rt.close()


def features(rows: list[dict], names: tuple[str, ...]) -> np.ndarray:
    return np.asarray([[r["signals"].get(k) or 0.0 for k in names] for r in rows], float)


def fit(rows: list[dict]) -> dict[str, Any]:
    train = [r for r in rows if r["split"] == "train" and r["signals"]]
    y = np.asarray([1.0 if r["answerable"] else 0.0 for r in train])
    out: dict[str, Any] = {}
    for name, names in (
        ("read", SIGNALS),
        ("unread", tuple(s for s in SIGNALS if s != "verifier")),
        ("tail", ("who", "kind", "score")),
    ):
        w, b = logistic(features(train, names), y)
        out[name] = {"weights": {k: round(float(v), 5) for k, v in zip(names, w, strict=True)},
                     "intercept": round(b, 5)}  # fmt: skip
    conf = confidences(train, out["read"])
    un = sorted((c for c, r in zip(conf, train, strict=True) if not r["answerable"]), reverse=True)
    high = un[int(math.floor(HIGH_FALSE * len(un)))] + 1e-6 if un else 0.5
    best, answers = -1.0, 0.5
    for t in np.linspace(0.05, 0.95, 91):
        tpr = np.mean([c >= t for c, r in zip(conf, train, strict=True) if r["answerable"]])
        tnr = np.mean([c < t for c, r in zip(conf, train, strict=True) if not r["answerable"]])
        if (tpr + tnr) / 2 > best:
            best, answers = (tpr + tnr) / 2, float(t)
    out["thresholds"] = {"high": round(float(high), 4), "answers": round(answers, 4)}
    return out


def confidences(rows: list[dict], m: dict[str, Any]) -> list[float]:
    out = []
    for r in rows:
        z = m["intercept"] + sum(w * (r["signals"].get(k) or 0.0) for k, w in m["weights"].items())
        out.append(1 / (1 + math.exp(-z)))
    return out


def table(rows: list[dict], m: dict[str, Any]) -> dict[str, dict[str, Any]]:
    conf = confidences(rows, m["read"])
    for r, c in zip(rows, conf, strict=True):
        r["fitted"] = c
    out: dict[str, dict[str, Any]] = {}
    for s in ("adversarial", "abstain", "twins"):
        part = [r for r in rows if r["set"] == s and r["split"] == "dev"]
        pos = [r for r in part if r["answerable"]]
        neg = [r for r in part if not r["answerable"]]
        cell: dict[str, Any] = {"answerable": len(pos), "unanswerable": len(neg)}
        for k in SIGNALS:
            sign = ORIENTED.get(k, 1.0)
            cell[k] = round(auroc([sign * (r["signals"].get(k) or 0.0) for r in pos],
                                  [sign * (r["signals"].get(k) or 0.0) for r in neg]), 3)  # fmt: skip
        cell["confidence"] = round(auroc([r["fitted"] for r in pos], [r["fitted"] for r in neg]), 3)
        hi = m["thresholds"]["high"]
        cell["false_high"] = round(float(np.mean([r["fitted"] >= hi for r in neg])), 3)
        found = [r for r in pos if r["found5"]]
        cell["high_when_found"] = round(float(np.mean([r["fitted"] >= hi for r in found])), 3)
        out[s] = cell
    return out


def markdown(m: dict[str, Any]) -> str:
    """The held-out figures as docs/confidence.md shows them."""
    cols = [*SIGNALS, "confidence", "false_high", "high_when_found"]
    lines = ["| set (dev part) | answerable / not | " + " | ".join(cols) + " |",
             "|---|---|" + "---|" * len(cols)]  # fmt: skip
    for name, cell in m["dev"].items():
        vals = " | ".join(f"{cell[c]:.3f}" for c in cols)
        lines.append(f"| {name} | {cell['answerable']} / {cell['unanswerable']} | {vals} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--eval", type=Path, default=ROOT.parent / "shared" / "eval")
    ap.add_argument("--rows", type=Path, help="read the rows of an earlier run instead of asking")
    ap.add_argument("--json", type=Path, help="write the rows asked")
    ap.add_argument("--write", action="store_true", help="write confidence.json")
    a = ap.parse_args()
    rows = json.loads(a.rows.read_text()) if a.rows else asyncio.run(collect(a.eval))
    if a.json:
        a.json.write_text(json.dumps(rows, ensure_ascii=False))
    m = fit(rows)
    m["dev"] = table(rows, m)
    m["note"] = (
        "fitted on LoCoMo conv-26 and conv-30 (adversarial_dev, abstain_dev, twins); the figures "
        "(`dev`) are on conv-41, conv-42, LongMemEval and asks, which neither the verifier nor "
        "this map saw: AUROC of each signal alone and of the confidence; false_high and "
        "high_when_found at `thresholds.high`"
    )
    print(json.dumps(m, indent=1))
    print(markdown(m))
    ms = sorted(r.get("confidence_ms", 0.0) for r in rows)
    read = [r.get("verified", 0) for r in rows]
    if ms:
        pct = {p: round(ms[min(int(p / 100 * len(ms)), len(ms) - 1)], 2) for p in (50, 95, 99)}
        print(f"confidence stage ms over {len(ms)} requests: {pct}; "
              f"results read by the verifier: mean {np.mean(read):.2f}")  # fmt: skip
    if a.write:
        (MODEL_DIR / "confidence.json").write_text(json.dumps(m, indent=1) + "\n")


if __name__ == "__main__":
    main()
