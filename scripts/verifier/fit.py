"""Fit the confidence (retrieval.rank.calibration) on the dev sets, and print every signal's figures.

    python scripts/verifier/fit.py [--eval ../shared/eval] [--write] [--json rows.json]
        [--rows rows.json] [--read K] [--cv] [--stamp]

Runs the service in-process (the embedded PostgreSQL or DATABASE_URL, as `retrieval eval`
does; the harness's namespaces `fit-*`, indexed once and reused) with the reader (the verifier)
on, reading the first K results (`--read`, default 1), and asks:
- `adversarial`: adversarial_dev, the answerable LoCoMo questions and the adversarial ones;
- `abstain`: abstain_dev (the evidence of a third of the questions removed: noisy labels);
- `twins`: the pairs scripts/verifier/twins.py makes over locomo_dev, longmemeval_dev (the
  haystack of its first pair only: LME_NAMESPACES) and asks_dev.

Every question is `fit` or `dev` by its conversation: LoCoMo conv-26, conv-30 and conv-41 are
`fit` (the reader was trained on none of LoCoMo: scripts/verifier/pairs.py), everything else
(conv-42, LongMemEval, asks; the Japanese twins of temporal_hard_dev) `dev`. Each map (MAPS: its
inputs) is a logistic regression, L2 1.0, on the `fit` questions' first results' signals. The
thresholds are chosen on the maps a first result gets by default (FIRST: with the reader when
it is on by default): `high` so that at most HIGH_FALSE of each set's unanswerable questions
get it, `answers` the middle of the confidences whose balanced accuracy is within PLATEAU of the
best. The maps are fitted on the first result by score; the table printed (and, with --write,
kept in confidence.json with the signal code's fingerprint) on the first as served (after the
final stage reordered the first three: retrieval.rank.final.promote), on the `dev` questions,
which neither the reader nor the maps saw: AUROC of each signal alone and of the confidence,
false-high, high-when-found, per set.
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

from train import auroc  # noqa: E402
from twins import read_jsonl, twins  # noqa: E402

from retrieval.evaluation.harness import eval_settings  # noqa: E402
from retrieval.evaluation.indexing import clock_zone, ensure_index, sub_namespace  # noqa: E402
from retrieval.models import RetrievalOptions  # noqa: E402
from retrieval.rank.calibration import WHOEVER, Map, signal_fingerprint  # noqa: E402
from retrieval.rank.confidence import SIGNALS  # noqa: E402
from retrieval.rank.verifier import MODEL_DIR  # noqa: E402
from retrieval.settings import Settings  # noqa: E402

# Half the bar (10 % of each set's unanswerable questions `high`): a rate measured on a few dozen
# questions is ±4 % from the next conversation's.
HIGH_FALSE = 0.05
SETS = ("adversarial", "abstain", "twins")
# Japanese twins (`twins_ja`), made of these sets' questions over their one store: the first's
# fitted on (`fit`: the maps without `who`, which a store without speakers gets), the second's
# measured (`dev`). Sets the verifier was not trained on (multihop_dev it was).
JA_TWIN_SETS = ("temporal_dev", "temporal_hard_dev")
TABLE_SETS = (*SETS, "twins_ja")
# `answers`: the middle of the thresholds whose balanced accuracy is within PLATEAU of the best.
PLATEAU = 0.01
# Each map's inputs, and the splits it is fitted on: the LoCoMo conversations of `fit`, which
# the reader never saw. `unseen` rather than `unmatched`: in a leave-one-conversation-out over
# those conversations (--cv) the two did alike (0.774 / 0.769 adversarial, 0.650 / 0.643
# abstain, 0.894 / 0.881 twins), and the binary one carries over to small namespaces, where
# every word's IDF is near the largest.
# Each is fitted a second time without `who` (WHOEVER), for the results whose speaker does not
# apply (a question about no one, a memory that says nobody's).
MAPS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "read": (("verifier", "coverage", "unseen", "asks", "who", "kind", "score"), ("fit",)),
    "unread": (("coverage", "unseen", "asks", "who", "kind", "score"), ("fit",)),
    "tail": (("who", "kind", "score"), ("fit",)),
}
MAPS |= {
    f"{name}{WHOEVER}": (tuple(k for k in names if k != "who"), splits)
    for name, (names, splits) in MAPS.items()
}
# The map a first result gets by default: with the reader when it is on (Settings.verifier).
FIRST = "read" if Settings().verifier else "unread"
# The conversations the maps are fitted on: LoCoMo conversations the reader was not trained on
# (none of them); conv-42 is held out.
FIT_CONVERSATIONS = ("locomo-conv-26", "locomo-conv-30", "locomo-conv-41")
# A signal that is higher when nothing answers is read negated in the figures.
ORIENTED = {"unmatched": -1.0, "unseen": -1.0, "asks": -1.0}
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
    """`fit` (the maps' conversations) or `dev` (neither the reader's nor the maps')."""
    if namespace in JA_TWIN_SETS:
        return "fit" if namespace == JA_TWIN_SETS[0] else "dev"
    if any(namespace.endswith(c) or f"{c}-" in namespace for c in FIT_CONVERSATIONS):
        return "fit"
    return "dev"


async def ask_all(
    rt: Any, base: str, queries: list[dict], set_name: str, whole: bool = False
) -> list[dict]:
    """Each question's first results and their signals; `whole`: a corpus set indexed into
    `base` itself (its questions name the set, not a namespace of their own)."""
    print(f"asking {len(queries)} questions of {set_name} ({base})", file=sys.stderr, flush=True)
    rows = []
    for q in queries:
        now = q.get("now")
        when = datetime.fromisoformat(now) if now else None
        opts = RetrievalOptions(
            namespace=base if whole else sub_namespace(base, q["namespace"]), limit=10, now=when,
            timezone=clock_zone(when), log_run=False,
        )  # fmt: skip
        res = await rt.orchestrator.retrieve(q["query"], opts)
        top = res.results[0] if res.results else None
        ids = [r.id for r in res.results[:5]]
        # The maps are fitted on the first by score, before the confidence reordered the first
        # three (promote put it second); the table measures the first as served.
        promoted = top is not None and "confidence_promoted" in top.signals
        by_score = res.results[1] if promoted else top
        sig = {k: by_score.signals.get(f"confidence_{k}") for k in SIGNALS} if by_score else {}
        served = {k: top.signals.get(f"confidence_{k}") for k in SIGNALS} if top else {}
        rows.append({
            "qid": q["qid"], "set": set_name, "namespace": q["namespace"],
            "split": split_of(q["namespace"]), "answerable": q.get("answerable", True),
            "found5": bool(set(q.get("relevant", [])) & set(ids)),
            "signals": sig, "served": served, "promoted": promoted,
            "confidence": top.confidence if top else 0.0,
            "label": top.relevance.value if top else "none",
            "first": top.id if top else None, "trap": q.get("trap", []),
            "confidence_ms": res.metadata.stage_latency_ms.get("confidence", 0.0),
            "verified": sum("confidence_verifier" in r.signals for r in res.results),
            "results": [{"id": r.id, "score": r.score, "confidence": r.confidence,
                         "evidence": r.id in set(q.get("relevant", [])),
                         "signals": {k.removeprefix("confidence_"): v
                                     for k, v in r.signals.items() if k.startswith("confidence_")}}
                        for r in res.results],
        })  # fmt: skip
    return rows


async def collect(root: Path, read: int = 1) -> list[dict]:
    from retrieval.runtime import open_runtime

    # The reader on, whatever the default: the rows hold its logit, for the `read` map.
    on = {"verifier": True, "verifier_results": read}
    rt = await open_runtime(eval_settings(Settings(), 10).model_copy(update=on))
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
        for name in JA_TWIN_SETS:  # ジム -> プール
            await ensure_index(rt, root / name / "corpus.jsonl", f"fit-{name}", None)
            part = twins([root / name])
            rows += await ask_all(rt, f"fit-{name}", part, "twins_ja", whole=True)
        return rows
    finally:
        await rt.close()


def features(rows: list[dict], names: tuple[str, ...]) -> np.ndarray:
    return np.asarray([[r["signals"].get(k) or 0.0 for k in names] for r in rows], float)


def fit(rows: list[dict]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, (names, splits) in MAPS.items():
        # A map that reads `who` is fitted where it applies, its WHOEVER twin where it does not.
        applies = not name.endswith(WHOEVER)
        part = [
            r for r in rows if r["split"] in splits and r["signals"]
            and (r["signals"].get("who") is not None) == applies
        ]  # fmt: skip
        y = np.asarray([1.0 if r["answerable"] else 0.0 for r in part])
        w, b = logistic(features(part, names), y)
        out[name] = {"weights": {k: round(float(v), 5) for k, v in zip(names, w, strict=True)},
                     "intercept": round(b, 5)}  # fmt: skip
    fitted = [r for r in rows if r["split"] in MAPS[FIRST][1] and r["signals"]]
    conf = as_served(fitted, out, FIRST)
    # `high`: at most HIGH_FALSE of each set's unanswerable questions (the bar is each set's).
    high = 0.5
    for s in TABLE_SETS:
        un = sorted((c for c, r in zip(conf, fitted, strict=True)
                     if r["set"] == s and not r["answerable"]), reverse=True)  # fmt: skip
        if un:
            high = max(high, un[int(math.floor(HIGH_FALSE * len(un)))] + 1e-6)
    grid = np.linspace(0.05, 0.95, 91)
    balanced = []
    for t in grid:
        tpr = np.mean([c >= t for c, r in zip(conf, fitted, strict=True) if r["answerable"]])
        tnr = np.mean([c < t for c, r in zip(conf, fitted, strict=True) if not r["answerable"]])
        balanced.append((tpr + tnr) / 2)
    # The middle of the plateau, not its highest point: balanced accuracy is flat over a tenth
    # of the scale (0.684-0.702 from 0.65 to 0.75), and its argmax moved by 0.06 between fits.
    near = [float(t) for t, b in zip(grid, balanced, strict=True) if b >= max(balanced) - PLATEAU]
    answers = float(np.median(near))
    out["thresholds"] = {"high": round(float(high), 4), "answers": round(answers, 4)}
    return out


def conversation_of(r: dict) -> str:
    return r["namespace"].removeprefix("locomo-") if r["namespace"].startswith("locomo-") else ""


def cross_validate(rows: list[dict], names: tuple[str, ...]) -> dict[str, float]:
    """AUROC per set of a map on `names`, fitted on all but one of the conversations the
    `unread` map is fitted on and measured on that one, the mean over them (--cv)."""
    held = [r for r in rows if r["split"] in MAPS["unread"][1] and r["signals"]]
    convs = sorted({conversation_of(r) for r in held} - {""})
    out: dict[str, list[float]] = {s: [] for s in SETS}
    for c in convs:
        part = [r for r in held if conversation_of(r) != c]
        w, b = logistic(features(part, names), np.asarray([float(r["answerable"]) for r in part]))
        m = {"weights": dict(zip(names, w, strict=True)), "intercept": b}
        for s in SETS:
            test = [r for r in held if conversation_of(r) == c and r["set"] == s]
            conf = confidences(test, m)
            out[s].append(auroc([x for x, r in zip(conf, test, strict=True) if r["answerable"]],
                                [x for x, r in zip(conf, test, strict=True)
                                 if not r["answerable"]]))  # fmt: skip
    return {s: round(float(np.nanmean(v)), 3) for s, v in out.items()}


def as_served(rows: list[dict], maps: dict[str, Any], name: str) -> list[float]:
    """Each row's confidence from the map `name`, or its WHOEVER twin where `who` does not
    apply, as the service chooses (Calibration.map_for)."""
    return [
        confidences([r], maps[name if r["signals"].get("who") is not None else name + WHOEVER])[0]
        for r in rows
    ]


def confidences(rows: list[dict], m: dict[str, Any]) -> list[float]:
    """Each row's confidence from a map as the service computes it (calibration.Map); a signal
    the row lacks (None) reads 0."""
    f = Map(m["weights"], m["intercept"])
    return [f({k: v for k, v in r["signals"].items() if v is not None}) for r in rows]


def table(rows: list[dict], m: dict[str, Any]) -> dict[str, dict[str, Any]]:
    # The first result as served (after promote), its signals in place of the first by score's.
    rows = [{**r, "signals": r.get("served", r["signals"])} for r in rows]
    live = [r for r in rows if r["signals"]]
    for r, c, v in zip(live, as_served(live, m, FIRST), as_served(live, m, "read"),
                       strict=True):  # fmt: skip
        r["fitted"], r["fitted_read"] = c, v
    for r in rows:
        r.setdefault("fitted", 0.0)
        r.setdefault("fitted_read", 0.0)
    out: dict[str, dict[str, Any]] = {}
    for s in TABLE_SETS:
        part = [r for r in rows if r["set"] == s and r["split"] == "dev"]
        pos = [r for r in part if r["answerable"]]
        neg = [r for r in part if not r["answerable"]]
        cell: dict[str, Any] = {"answerable": len(pos), "unanswerable": len(neg)}
        for k in SIGNALS:
            sign = ORIENTED.get(k, 1.0)
            cell[k] = round(auroc([sign * (r["signals"].get(k) or 0.0) for r in pos],
                                  [sign * (r["signals"].get(k) or 0.0) for r in neg]), 3)  # fmt: skip
        cell["confidence"] = round(auroc([r["fitted"] for r in pos], [r["fitted"] for r in neg]), 3)
        cell["with_verifier"] = round(
            auroc([r["fitted_read"] for r in pos], [r["fitted_read"] for r in neg]), 3
        )
        hi = m["thresholds"]["high"]
        cell["false_high"] = round(float(np.mean([r["fitted"] >= hi for r in neg])), 3)
        found = [r for r in pos if r["found5"]]
        cell["high_when_found"] = round(float(np.mean([r["fitted"] >= hi for r in found])), 3)
        out[s] = cell
    return out


def markdown(m: dict[str, Any]) -> str:
    """The held-out figures as docs/confidence.md shows them."""
    cols = [*SIGNALS, "confidence", "with_verifier", "false_high", "high_when_found"]
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
    ap.add_argument("--read", type=int, default=1, help="the first results the reader reads")
    ap.add_argument(
        "--stamp",
        action="store_true",
        help="only write the signal code's fingerprint into the shipped confidence.json: for a "
        "change shown to leave every signal as it was (the rows of --json, before and after)",
    )
    ap.add_argument("--cv", action="store_true",
                    help="also print the leave-one-conversation-out AUROC of the unread map's "
                         "inputs and of them with `unmatched` for `unseen`")  # fmt: skip
    a = ap.parse_args()
    if a.stamp:
        path = MODEL_DIR / "confidence.json"
        shipped = json.loads(path.read_text())
        shipped["fingerprint"] = signal_fingerprint()
        path.write_text(json.dumps(shipped, indent=1) + "\n")
        print(f"stamped {path.name}: {shipped['fingerprint']}")
        return
    rows = json.loads(a.rows.read_text()) if a.rows else asyncio.run(collect(a.eval, a.read))
    for r in rows:  # rows read back are split as today
        r["split"] = split_of(r["namespace"])
    if a.json:
        a.json.write_text(json.dumps(rows, ensure_ascii=False))
    m = fit(rows)
    m["fingerprint"] = signal_fingerprint()
    m["dev"] = table(rows, m)
    m["note"] = (
        "fitted on LoCoMo conv-26, conv-30 and conv-41 (adversarial_dev, abstain_dev, twins) and "
        "temporal_dev's Japanese twins, none of which the reader was trained on; the figures "
        "(`dev`) are on conv-42, LongMemEval, asks and temporal_hard_dev's twins, which neither "
        "the reader nor these maps saw: AUROC of each signal alone and of the confidence; "
        "false_high and high_when_found at `thresholds.high`"
    )
    print(json.dumps(m, indent=1))
    print(markdown(m))
    ms = sorted(r.get("confidence_ms", 0.0) for r in rows)
    read = [r.get("verified", 0) for r in rows]
    if ms:
        pct = {p: round(ms[min(int(p / 100 * len(ms)), len(ms) - 1)], 2) for p in (50, 95, 99)}
        print(f"confidence stage ms over {len(ms)} requests: {pct}; "
              f"results read by the verifier: mean {np.mean(read):.2f}")  # fmt: skip
    if a.cv:
        names = MAPS["unread"][0]
        swapped = tuple("unmatched" if k == "unseen" else k for k in names)
        for n in (names, swapped):
            print(f"leave one conversation out, {', '.join(n)}: {cross_validate(rows, n)}")
    if a.write:
        (MODEL_DIR / "confidence.json").write_text(json.dumps(m, indent=1) + "\n")


if __name__ == "__main__":
    main()
