"""The service's own near-misses on the training sets: where it errs when the evidence is gone.

    python scripts/verifier/mine.py [--train ../shared/train] [--out service.jsonl] [--per 1]

Each training unit (a SQuAD 2.0 article's sentences, a FriendsQA scene's utterances, a
LongMemEval-S training question's user turns with its evidence turns) is stored in its own
namespace of the service (the embedded PostgreSQL or DATABASE_URL, as `retrieval eval` does;
namespaces `mine:*`, indexed once and reused), and every question of the unit is asked of it,
as a caller would. The first results that are not the evidence and do not hold the answer's text
are the memories the service would serve had the evidence been removed (it is removed from the
list after the search, not from the store: the ranking of the rest is the same up to the
reranker's normalisation):

- `service` (0): an answerable question (SQuAD, FriendsQA, LongMemEval) against the first
  `--per` results that are not its evidence. Noise: a sentence or a turn that answers in other
  words than the marked answer's (SQuAD marks one sentence; a dialogue says a thing twice; a
  LongMemEval assistant turn that repeats the user's fact is left out only when it holds the
  answer's words);
- `service_none` (0): a SQuAD question written to have no answer against the first `--per`
  results other than the plausible answer's sentence (that one is the `plausible` kind). Clean
  by construction within the paragraph; another paragraph of the article may, rarely, answer.

Every unit keeps the `split` and `group` train_sets gives it, so that a held-out unit's mined
pairs are held out too (their AUROC is the reader's figure on the service's errors).
scripts/verifier/pairs.py --service service.jsonl adds them to the pairs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import train_sets  # noqa: E402
from pairs import Builder  # noqa: E402

from retrieval.evaluation.harness import eval_settings  # noqa: E402
from retrieval.evaluation.indexing import clock_zone, ensure_index, sub_namespace  # noqa: E402
from retrieval.models import RetrievalOptions  # noqa: E402
from retrieval.settings import Settings  # noqa: E402

BASE = "mine"
# The results asked for: a near-miss is the first of them that is not the evidence.
ASK_LIMIT = 10


def _lme_time(s: str) -> str:
    """'2023/05/28 (Sun) 18:12' as ISO 8601 (UTC: LongMemEval gives no zone)."""
    return datetime.strptime(s[:10] + s[-6:], "%Y/%m/%d %H:%M").isoformat() + "+00:00"


def squad(path: Path) -> tuple[list[dict], list[dict]]:
    memories, questions = [], []
    for a, art in enumerate(train_sets._load(path)["data"]):  # type: ignore[index]
        ns, split = f"squad-{a}", train_sets.split_for(a)
        for p, para in enumerate(art["paragraphs"]):
            spans = train_sets.sentences(para["context"])
            ids = [f"p{p}s{i}" for i in range(len(spans))]
            memories += [{"namespace": ns, "id": ids[i], "content": s}
                         for i, (_, s) in enumerate(spans)]  # fmt: skip
            for qa in para["qas"]:
                q = {"namespace": ns, "split": split, "query": qa["question"].strip()}
                if qa.get("is_impossible"):
                    plaus = qa.get("plausible_answers", [])[:1]
                    skip = [ids[train_sets.sentence_at(spans, x["answer_start"])] for x in plaus]
                    questions.append({**q, "kind": "service_none", "skip": skip, "texts": []})
                    continue
                got = train_sets.squad_answer(qa, spans)
                if got is None:
                    continue  # the answer runs over two sentences, as train_sets leaves it
                i, texts = got
                questions.append({**q, "kind": "service", "skip": [ids[i]],
                                  "texts": sorted(texts)})  # fmt: skip
    return memories, questions


def friends(paths: list[Path]) -> tuple[list[dict], list[dict]]:
    memories, questions = [], []
    n = 0
    for path in paths:
        for ep in train_sets._load(path)["data"]:  # type: ignore[index]
            for scene in ep["paragraphs"]:
                ns, split = f"friends-{n}", train_sets.split_for(n)
                n += 1
                texts = train_sets.friends_texts(scene)
                memories += [{"namespace": ns, "id": str(i), "content": t,
                              "memory_type": "dialog", "source_type": "conversation"}
                             for i, t in enumerate(texts)]  # fmt: skip
                for qa in scene["qas"]:
                    ev, said = train_sets.friends_answer(qa, len(texts))
                    if not ev:
                        continue
                    questions.append({
                        "namespace": ns, "split": split, "query": qa["question"].strip(),
                        "kind": "service", "skip": [str(i) for i in ev], "texts": sorted(said),
                    })  # fmt: skip
    return memories, questions


def longmemeval(path: Path) -> tuple[list[dict], list[dict]]:
    """A question's user turns and its evidence turns (the assistants' long replies of every
    session would take hours to embed here; the evidence is removed anyway)."""
    memories, questions = [], []
    for n, r in enumerate(train_sets._load(path)):  # type: ignore[arg-type]
        ns, split = f"lmetrain-{r['qid']}", train_sets.split_for(n)
        ev = []
        for s, sess in enumerate(r["sessions"]):
            for t, turn in enumerate(sess["turns"]):
                if turn["role"] != "user" and not turn.get("has_answer"):
                    continue
                mid = f"{s}:{t}"
                memories.append({
                    "namespace": ns, "id": mid, "content": train_sets.lme_text(turn),
                    "created_at": _lme_time(sess["date"]), "thread": sess["id"],
                    "memory_type": "dialog", "source_type": "conversation",
                })  # fmt: skip
                if turn.get("has_answer"):
                    ev.append(mid)
        if ev:
            questions.append({
                "namespace": ns, "split": split, "query": r["question"], "kind": "service",
                "skip": ev, "answer": r.get("answer"), "texts": [],
                "now": _lme_time(r["question_date"]),
            })  # fmt: skip
    return memories, questions


def near_miss(q: dict, content: str, mid: str) -> bool:
    """Neither the evidence (or the plausible answer's sentence) nor a memory holding the answer
    (SQuAD, FriendsQA: the answer's text; LongMemEval: one of the answer's words)."""
    if mid in q["skip"] or any(t in content for t in q["texts"]):
        return False
    return not (q.get("answer") is not None and Builder.holds_answer(q["answer"], content))


async def ask(rt: Any, questions: list[dict], per: int) -> list[dict]:
    out = []
    for i, q in enumerate(questions):
        now = datetime.fromisoformat(q["now"]) if q.get("now") else None
        opts = RetrievalOptions(
            namespace=sub_namespace(BASE, q["namespace"]), limit=ASK_LIMIT, now=now,
            timezone=clock_zone(now), log_run=False,
        )  # fmt: skip
        res = await rt.orchestrator.retrieve(q["query"], opts)
        misses = [r for r in res.results if near_miss(q, r.content, r.id)]
        for rank, r in enumerate(misses[:per]):
            out.append({
                "split": q["split"], "kind": q["kind"], "group": q["namespace"],
                "question": q["query"], "memory": r.content, "label": 0,
                "served_rank": res.results.index(r) + 1, "miss_rank": rank + 1,
            })  # fmt: skip
        if i % 1000 == 999:
            print(f"asked {i + 1} of {len(questions)}", file=sys.stderr, flush=True)
    return out


async def mine(train: Path, work: Path, per: int) -> list[dict]:
    from retrieval.runtime import open_runtime

    memories, questions = [], []
    for m, q in (
        squad(train / "squad2_dev_half.json.gz"),
        friends([train / "friendsqa_dev.json.gz", train / "friendsqa_tst.json.gz"]),
        longmemeval(train / "longmemeval_train.jsonl.gz"),
    ):
        memories += m
        questions += q
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / "mine-memories.jsonl"
    text = "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in memories)
    if not corpus.exists() or corpus.read_text(encoding="utf-8") != text:
        corpus.write_text(text, encoding="utf-8")
    rt = await open_runtime(eval_settings(Settings(), ASK_LIMIT))
    try:
        t0 = time.perf_counter()
        await ensure_index(rt, corpus, BASE, None)
        print(f"{len(memories)} memories indexed in {time.perf_counter() - t0:.0f} s",
              file=sys.stderr, flush=True)  # fmt: skip
        return await ask(rt, questions, per)
    finally:
        await rt.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", type=Path, default=Path("../shared/train"))
    ap.add_argument("--out", type=Path, default=Path("service.jsonl"))
    ap.add_argument("--work", type=Path, default=Path(".mine"),
                    help="where the training units' corpus is written (default .mine)")  # fmt: skip
    ap.add_argument("--per", type=int, default=1, help="near-misses kept per question")
    a = ap.parse_args()
    rows = asyncio.run(mine(a.train, a.work, a.per))
    with a.out.open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    counts = Counter((r["split"], r["kind"]) for r in rows)
    for k in sorted(counts):
        print(*k, counts[k])


if __name__ == "__main__":
    main()
