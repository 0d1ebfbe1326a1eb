"""Questions asked inside a frame ("Can you remind me: …", "Hey, do you recall …") against the same
questions asked plainly: MRR@10 of each, and of the framed ones with the frame read as words
(retrieval.analysis.frame turned off), on the answerable LoCoMo dev questions.

    python scripts/framed_questions.py [--eval ../shared/eval] [--seed 3]

Runs the service in-process (the embedded PostgreSQL or DATABASE_URL, as `retrieval eval` does)
on adversarial_dev's memories (namespace `fit-adv`, indexed once, shared with
scripts/verifier/fit.py). Each question gets one frame of FRAMES at random (seeded). These
wordings are not the twins' lead-ins (scripts/verifier/twins.py) nor the tests'.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import retrieval.analysis.analyzer as analyzer_module  # noqa: E402
from retrieval.evaluation.harness import eval_settings  # noqa: E402
from retrieval.evaluation.indexing import clock_zone, ensure_index, sub_namespace  # noqa: E402
from retrieval.models import RetrievalOptions  # noqa: E402
from retrieval.settings import Settings  # noqa: E402

FRAMES = (
    "Can you remind me: {q}",
    "Hey, do you recall {lq}",
    "I was wondering, {lq}",
    "Do you happen to know {lq}",
    "So, {lq}",
    "I can't remember. {q}",
)
BASE = "fit-adv"


async def mrr(rt: Any, questions: list[tuple[dict, str]]) -> float:
    total = 0.0
    for q, text in questions:
        now = datetime.fromisoformat(q["now"])
        opts = RetrievalOptions(
            namespace=sub_namespace(BASE, q["namespace"]), limit=10, now=now,
            timezone=clock_zone(now), log_run=False,
        )  # fmt: skip
        res = await rt.orchestrator.retrieve(text, opts)
        for i, r in enumerate(res.results):
            if r.id in q["relevant"]:
                total += 1 / (i + 1)
                break
    return total / max(len(questions), 1)


async def run(root: Path, seed: int) -> dict[str, float]:
    from retrieval.runtime import open_runtime

    adv = root / "adversarial_dev"
    qs = [json.loads(line) for line in (adv / "queries.jsonl").read_text().splitlines() if line]
    qs = [q for q in qs if q["answerable"]]
    rng = random.Random(seed)
    framed = []
    for q in qs:
        frame = rng.choice(FRAMES)
        framed.append((q, frame.format(q=q["query"], lq=q["query"][0].lower() + q["query"][1:])))
    rt = await open_runtime(eval_settings(Settings(), 10))
    try:
        await ensure_index(rt, adv / "memories.jsonl", BASE, None)
        out = {"questions": len(qs), "plain": await mrr(rt, [(q, q["query"]) for q in qs])}
        out["framed"] = await mrr(rt, framed)
        read = analyzer_module.frame_spans
        analyzer_module.frame_spans = lambda text: []  # the frame read as words, as before
        try:
            out["framed_frame_as_words"] = await mrr(rt, framed)
        finally:
            analyzer_module.frame_spans = read
        return {k: round(v, 4) for k, v in out.items()}
    finally:
        await rt.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--eval", type=Path, default=ROOT.parent / "shared" / "eval")
    ap.add_argument("--seed", type=int, default=3)
    a = ap.parse_args()
    print(json.dumps(asyncio.run(run(a.eval, a.seed))))


if __name__ == "__main__":
    main()
