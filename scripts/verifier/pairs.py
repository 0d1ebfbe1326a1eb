"""The reader's (question, memory, label) pairs, from ../shared/train and the dev sets of ../shared/eval.

    python scripts/verifier/pairs.py [--train ../shared/train] [--eval ../shared/eval]
        [--service service.jsonl] [--out pairs.jsonl] [--seed 13]

Every pair has a `split`: `train` (the reader is trained on these) or `dev` (its figures, and
never trained on). Whole conversations, scenes, articles and sets are held out:
- train: SQuAD 2.0, FriendsQA and the LongMemEval-S training questions (scripts/verifier/
  train_sets.py, which says each kind's noise), but one unit in DEV_EVERY of each; JSQuAD's
  first 700 dev questions and the first 350 of its semantic ones (jsquad), multihop_dev;
- dev: those held-out units; every LoCoMo conversation (CC BY-NC: measured on, never trained
  on, so that what ships is trained on permissive data only), the rest of JSQuAD's,
  longmemeval_dev, asks_dev.

Kinds of pairs (`kind`):
- `evidence` (1): a question and each memory its set marks as the answer;
- `near` (0): the memories a BM25 ranking over the namespace puts first that are not the
  evidence, not a turn beside it, and hold none of the answer's words (`answer` in LoCoMo):
  unannotated evidence is left out rather than taught as a miss;
- `trap` (0): an adversarial question (adversarial_dev) and the other speaker's turn it was
  built from; `adversarial` (0): the same question and its BM25 near-misses;
- `swap` (0): an answerable question whose one word the evidence holds (its rarest) replaced
  by a word of another set's vocabulary (SWAPS of them), against the same evidence ("hamster" for "cat" —
  the lexicon of scripts/verifier/twins.py is not used, so that its twins stay unseen);
- `who` (0): an answerable question about one speaker asked about the other (Caroline ->
  Melanie) against the first one's evidence turn, where the evidence does not name the other;
  in Japanese the same with a person's name swapped for another (multihop_dev);
- `service`, `service_none` (0), with `--service`: the service's own first results on the
  training sets with the evidence removed (scripts/verifier/mine.py, which says their noise),
  each in its unit's split.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import random
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_sets
from twins import read_jsonl

# LoCoMo conversations the reader is trained on: none (CC BY-NC; the map is fitted on them).
TRAIN_CONVERSATIONS: tuple[str, ...] = ()
JSQUAD_TRAIN = 700
JSQUAD_SEMANTIC_TRAIN = 350
# Swapped questions made of each answerable one (each with another word).
SWAPS = 2
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]{2,}")
_JA_NOUN = re.compile(r"[\u30a1-\u30fa\u30fc]{2,}|[\u4e00-\u9fff]{2,}")
_LABEL = re.compile(r"^\s*([A-Z][\w' .-]{0,30}):\s")
STOP = frozenset(
    re.findall(
        r"\w+",
        "the and for with that this what when where which who whom whose how "
        "did does was were are have has had you your about from into after before their "
        "there they them then than been being would could should some any many much more most "
        "other over also just like name names kind sort",
    )
)


class Ranker:
    """BM25 over a namespace's memories (lower-cased words of 3+ letters, character bigrams of
    Japanese): the near-misses a keyword search would put first."""

    def __init__(self, docs: list[dict]) -> None:
        self.docs = docs
        self.terms = [Counter(words(d["content"])) for d in docs]
        self.df: Counter[str] = Counter(t for ts in self.terms for t in ts)
        self.avg = sum(sum(t.values()) for t in self.terms) / max(len(docs), 1)

    def idf(self, term: str) -> float:
        n = len(self.docs)
        return math.log(1 + (n - self.df[term] + 0.5) / (self.df[term] + 0.5))

    def top(self, query: str, k: int) -> list[dict]:
        q = set(words(query))
        scored = []
        for d, tf in zip(self.docs, self.terms, strict=True):
            dl = sum(tf.values())
            s = sum(
                self.idf(t) * tf[t] * 2.2 / (tf[t] + 1.2 * (0.25 + 0.75 * dl / self.avg))
                for t in q
                if t in tf
            )
            if s > 0:
                scored.append((s, d))
        scored.sort(key=lambda x: -x[0])
        return [d for _, d in scored[:k]]


def words(text: str) -> list[str]:
    low = text.lower()
    out = [w.strip("'") for w in _WORD.findall(low) if w not in STOP]
    for run in _JA_NOUN.findall(text):
        out.extend(run[i : i + 2] for i in range(max(len(run) - 1, 1)))
    return out


def _turn_no(mid: str) -> tuple[str, int] | None:
    m = re.match(r"(.*):(\d+)$", mid)
    return (m.group(1), int(m.group(2))) if m else None


def beside(mid: str, evidence: list[str]) -> bool:
    """Whether memory `mid` is an evidence turn or the turn before or after one."""
    t = _turn_no(mid)
    for e in evidence:
        u = _turn_no(e)
        if mid == e or (t and u and t[0] == u[0] and abs(t[1] - u[1]) <= 1):
            return True
    return False


def answer_words(answer: object) -> set[str]:
    return {w for w in words(str(answer or "")) if len(w) > 3}


def swap_word(query: str, evidence: str, rank: Ranker) -> str | None:
    """The question's rarest word that the evidence holds (None without one)."""
    ev = set(words(evidence))
    # sorted: a tie is broken the same way in every run (a set's order follows the hash seed)
    have = [
        w for w in sorted(set(_WORD.findall(query))) if w.lower() in ev and w.lower() not in STOP
    ]
    have = [w for w in have if not w[:1].isupper()]  # not a name
    if have:
        return max(have, key=lambda w: rank.idf(w.lower()))
    ja = [w for w in _JA_NOUN.findall(query) if w in evidence]
    return max(ja, key=len) if ja else None


def article(pid: str) -> str:
    """The article of a JSQuAD passage (jsquad-a99901p2) or a JaQuAD one (jaquad-de-000-00)."""
    return pid.rsplit("p", 1)[0] if pid.startswith("jsquad-") else pid.rsplit("-", 1)[0]


def replace_once(text: str, old: str, new: str) -> str:
    if old.isascii():
        return re.sub(rf"\b{re.escape(old)}\b", new, text, count=1)
    return text.replace(old, new, 1)


class Builder:
    def __init__(self, root: Path, seed: int) -> None:
        self.root, self.rng, self.out = root, random.Random(seed), []  # type: ignore[var-annotated]
        self.vocab_en: list[str] = []
        self.vocab_ja: list[str] = []

    def add(self, split: str, kind: str, group: str, q: str, memory: str, label: int) -> None:
        self.out.append({"split": split, "kind": kind, "group": group, "question": q,
                         "memory": memory, "label": label})  # fmt: skip

    @staticmethod
    def ranker(docs: list[dict]) -> Ranker:
        return Ranker(docs)

    @staticmethod
    def holds_answer(answer: object, text: str) -> bool:
        return bool(answer_words(answer) & set(words(text)))

    def swap(self, split: str, group: str, q: str, evidence: str, rank: Ranker) -> None:
        """`swap` (0): the question's rarest word the evidence holds replaced by a word of the
        training sets' vocabulary that the evidence lacks, against the same evidence."""
        word = swap_word(q, evidence, rank)
        if not word or not word.isascii():
            return
        low = evidence.lower()
        new = self.rng.choice(self.vocab_en)
        while new in low or new == word.lower():
            new = self.rng.choice(self.vocab_en)
        self.add(split, "swap", group, replace_once(q, word, new), evidence, 0)

    def training_sets(self, root: Path) -> None:
        """SQuAD 2.0, FriendsQA, LongMemEval-S training questions (train_sets)."""
        counts: Counter[str] = Counter()
        with gzip.open(root / "squad2_dev_half.json.gz", "rt", encoding="utf-8") as f:
            for art in json.load(f)["data"]:
                for para in art["paragraphs"]:
                    counts.update(w for w in _WORD.findall(para["context"].lower()))
        self.vocab_en = [
            w for w, c in counts.most_common(6000)[500:] if len(w) > 3 and w not in STOP
        ]
        train_sets.build(self, root)

    def conversations(self) -> None:
        """LoCoMo (answerable and adversarial), LongMemEval, asks."""
        mems = read_jsonl(self.root / "adversarial_dev" / "memories.jsonl")
        queries = read_jsonl(self.root / "adversarial_dev" / "queries.jsonl")
        for name in ("longmemeval_dev", "asks_dev"):
            mems += read_jsonl(self.root / name / "memories.jsonl")
            queries += read_jsonl(self.root / name / "queries.jsonl")
        by_ns: dict[str, list[dict]] = defaultdict(list)
        for m in mems:
            by_ns[m["namespace"]].append(m)
        by_id = {m["id"]: m for m in mems}
        # Words for swaps come from the other half's vocabulary: a train swap never draws a word
        # of the held-out conversations, and the other way round.
        vocab: dict[str, Counter[str]] = defaultdict(Counter)
        for ns, ms in by_ns.items():
            for m in ms:
                vocab[self.split_of(ns)].update(w for w in _WORD.findall(m["content"].lower()))
        rankers = {ns: Ranker(ms) for ns, ms in by_ns.items()}
        for q in queries:
            ns = q["namespace"]
            split, rank = self.split_of(ns), rankers[ns]
            text = q["query"]
            other = "dev" if split == "train" else "train"
            pool = [
                w for w, c in vocab[other].most_common(4000) if len(w) > 3 and w not in STOP
            ] or self.vocab_en  # fmt: skip
            if q.get("answerable") is False:
                for t in q.get("trap", []):
                    self.add(split, "trap", ns, text, by_id[t]["content"], 0)
                for d in rank.top(text, 3):
                    if d["id"] not in q.get("trap", []):
                        self.add(split, "adversarial", ns, text, d["content"], 0)
                continue
            ev = [e for e in q["relevant"] if e in by_id]
            if not ev:
                continue
            for e in ev[:3]:
                self.add(split, "evidence", ns, text, by_id[e]["content"], 1)
            banned = answer_words(q.get("answer"))
            near = [
                d for d in rank.top(text, 12)
                if not beside(d["id"], q["relevant"]) and not banned & set(words(d["content"]))
            ]  # fmt: skip
            for d in near[:3]:
                self.add(split, "near", ns, text, d["content"], 0)
            first = by_id[ev[0]]["content"]
            word = swap_word(text, first, rank)
            if word and word.isascii():
                for new in self.rng.sample([w for w in pool if w not in first.lower()], SWAPS):
                    self.add(split, "swap", ns, replace_once(text, word, new), first, 0)
            self.who(split, ns, text, first, by_ns[ns])

    def who(self, split: str, ns: str, text: str, evidence: str, memories: list[dict]) -> None:
        """The question asked about the other speaker, against the first one's turn."""
        label = _LABEL.match(evidence)
        if not label:
            return
        speaker = label.group(1)
        speakers = {m.group(1) for d in memories[:200] if (m := _LABEL.match(d["content"]))}
        others = sorted(speakers - {speaker, "user", "assistant"})
        if speaker in ("user", "assistant") or len(others) != 1:
            return
        if not re.search(rf"\b{re.escape(speaker)}\b", text):
            return
        if re.search(rf"\b{re.escape(others[0])}\b", evidence):
            return
        swapped = re.sub(rf"\b{re.escape(speaker)}\b", others[0], text)
        self.add(split, "who", ns, swapped, evidence, 0)

    @staticmethod
    def split_of(ns: str) -> str:
        return "train" if ns in TRAIN_CONVERSATIONS else "dev"

    def jsquad(self) -> None:
        """JSQuAD: the gold passage (1), two passages of the same article or a BM25 ranking that
        are not (0), and a noun swap against the gold passage (0)."""
        corpus = {d["id"]: d for d in read_jsonl(self.root / "jsquad" / "corpus.jsonl")}
        qrels = {}
        for name in ("qrels_dev.tsv", "qrels_semantic_dev.tsv"):
            for line in (self.root / "jsquad" / name).read_text().splitlines():
                parts = line.split("\t")
                if len(parts) >= 3:
                    qrels[parts[0]] = parts[-2] if len(parts) == 4 else parts[1]
        articles: dict[str, list[str]] = defaultdict(list)
        for pid in corpus:
            articles[article(pid)].append(pid)
        queries = [
            (q, "train" if i < JSQUAD_TRAIN else "dev")
            for i, q in enumerate(read_jsonl(self.root / "jsquad" / "queries_dev.jsonl"))
        ] + [
            (q, "train" if i < JSQUAD_SEMANTIC_TRAIN else "dev")
            for i, q in enumerate(read_jsonl(self.root / "jsquad" / "queries_semantic_dev.jsonl"))
        ]
        nouns = [n for d in list(corpus.values())[::7] for n in _JA_NOUN.findall(d["text"])]
        for q, split in queries:
            gold = qrels.get(q["id"])
            if gold not in corpus:
                continue
            group = f"jsquad-{split}"
            text, passage = q["text"], corpus[gold]["text"]
            self.add(split, "evidence", group, text, passage, 1)
            same = [p for p in articles[article(gold)] if p != gold]
            if same:
                rank = Ranker([{"content": corpus[p]["text"], "id": p} for p in same])
                for d in rank.top(text, 2):
                    self.add(split, "near", group, text, d["content"], 0)
            word = swap_word(text, passage, Ranker([{"content": passage, "id": gold}]))
            if word:
                new = self.rng.choice([n for n in nouns if n not in passage and len(n) > 1])
                self.add(split, "swap", group, replace_once(text, word, new), passage, 0)

    def multihop(self) -> None:
        """multihop_dev (Japanese): a question naming a person against a memory naming them (1),
        and the same question about someone else (0)."""
        corpus = read_jsonl(self.root / "multihop_dev" / "corpus.jsonl")
        names = sorted({n for d in corpus for n in re.findall(r"([一-龥]{2,4})さん", d["content"])})
        for d in corpus:
            for n in re.findall(r"([一-龥]{2,4})さん", d["content"])[:1]:
                q = self.rng.choice(["{}さんと何を話した？", "{}さんとの打ち合わせはどうだった？",
                                     "{}さんについて覚えていること", "{}さんはどこに行った？"])  # fmt: skip
                self.add("train", "evidence", "multihop", q.format(n), d["content"], 1)
                other = self.rng.choice([x for x in names if x not in d["content"]])
                self.add("train", "who", "multihop", q.format(other), d["content"], 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", type=Path, default=Path("../shared/train"))
    ap.add_argument("--eval", type=Path, default=Path("../shared/eval"))
    ap.add_argument("--out", type=Path, default=Path("pairs.jsonl"))
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--service", type=Path, default=None,
                    help="the service's near-misses (scripts/verifier/mine.py's output)")  # fmt: skip
    a = ap.parse_args()
    b = Builder(a.eval, a.seed)
    b.training_sets(a.train)
    if a.service is not None:
        for line in a.service.read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            b.add(r["split"], r["kind"], r["group"], r["question"], r["memory"], r["label"])
    b.conversations()
    b.jsquad()
    b.multihop()
    with a.out.open("w", encoding="utf-8") as f:
        for r in b.out:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    counts = Counter((r["split"], r["kind"], r["label"]) for r in b.out)
    for k in sorted(counts):
        print(*k, counts[k])


if __name__ == "__main__":
    main()
