"""Twins: an answerable question beside one that nothing answers, made by changing the one word it
turns on to a sibling the store never mentions (cat -> hamster, 原宿 -> 新宿, ジム -> プール).

    python scripts/verifier/twins.py SETDIR... [--out twins.jsonl] [--seed 7]

Each SETDIR holds `queries.jsonl` (qid, query, namespace, now, relevant) and `memories.jsonl`
(or `.gz`; namespace, id, content), as ../shared/eval's conversation sets do (locomo_dev,
longmemeval_dev, asks_dev). For every answerable question holding a word of a sibling group that
its namespace mentions, the twin swaps it for a sibling that no memory of the namespace holds;
both are written, the original `answerable: true` with its evidence, the twin `answerable:
false`. Wordings vary (a seeded choice of lead-ins: "Do you remember …", 「…か覚えてる？」), the
same for a pair, so a pair differs by its word only.

These twins measure the confidence (scripts/verifier/fit.py); the verifier is trained on
another kind (scripts/verifier/pairs.py swaps in a word drawn from another set's vocabulary),
so that the lexicon here is not what it learns.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
from collections import defaultdict
from pathlib import Path

# Sibling groups: words a question may turn on, each group of one kind.
SIBLINGS_EN = (
    ("cat", "dog", "hamster", "rabbit", "parrot", "turtle", "goldfish", "guinea pig"),
    ("guitar", "violin", "piano", "drums", "cello", "saxophone", "ukulele", "flute"),
    ("tennis", "table tennis", "badminton", "squash", "golf", "volleyball", "basketball"),
    ("soccer", "football", "baseball", "rugby", "hockey", "cricket"),
    ("yoga", "pilates", "karate", "boxing", "swimming", "running", "cycling", "hiking"),
    ("painting", "pottery", "photography", "knitting", "gardening", "sculpting", "calligraphy"),
    ("camera", "film", "vinyl record", "stamp", "coin", "comic book", "postcard"),
    ("sister", "brother", "mother", "father", "aunt", "uncle", "cousin", "grandmother"),
    ("car", "bike", "motorcycle", "scooter", "van", "truck"),
    ("coffee", "tea", "wine", "beer", "juice", "smoothie"),
    ("pizza", "sushi", "pasta", "tacos", "curry", "ramen", "salad"),
    ("novel", "poem", "song", "podcast", "blog", "documentary"),
    ("Paris", "London", "Rome", "Berlin", "Madrid", "Lisbon", "Prague", "Vienna"),
    ("Tokyo", "Osaka", "Kyoto", "Seoul", "Bangkok", "Singapore", "Sydney"),
    ("beach", "mountain", "lake", "forest", "desert", "island"),
    ("red", "blue", "green", "yellow", "purple", "orange"),
    ("nurse", "teacher", "lawyer", "engineer", "chef", "pilot", "architect"),
    ("museum", "library", "gym", "park", "zoo", "aquarium", "theater"),
    ("birthday", "wedding", "graduation", "anniversary", "retirement"),
)
SIBLINGS_JA = (
    ("猫", "犬", "ハムスター", "ウサギ", "インコ", "金魚"),
    ("ギター", "バイオリン", "ピアノ", "ドラム", "チェロ", "サックス"),
    ("テニス", "卓球", "バドミントン", "ゴルフ", "バレーボール", "バスケ"),
    ("サッカー", "野球", "ラグビー", "ホッケー"),
    ("ヨガ", "ピラティス", "空手", "ボクシング", "水泳", "ランニング"),
    ("ジム", "プール", "公園", "図書館", "カフェ", "美術館", "映画館"),
    ("原宿", "新宿", "渋谷", "池袋", "品川", "上野", "浅草"),
    ("東京", "大阪", "京都", "札幌", "福岡", "名古屋", "仙台", "横浜"),
    ("姉", "兄", "妹", "弟", "母", "父", "祖母", "叔父"),
    ("車", "自転車", "バイク", "電車", "バス"),
    ("コーヒー", "紅茶", "ワイン", "ビール", "日本酒"),
    ("寿司", "ラーメン", "カレー", "パスタ", "ピザ", "天ぷら"),
    ("予算", "納期", "人数", "会場"),
    ("映画", "ドラマ", "小説", "漫画", "アニメ"),
)
LEADS_EN = ("", "Do you remember: ", "Quick question. ", "Remind me, ", "I forgot. ")
LEADS_JA = (("", ""), ("", "か覚えてる？"), ("ちょっと聞きたいんだけど、", ""), ("ねえ、", ""))

_JA = re.compile("[\u3040-\u30ff\u3400-\u9fff]")
# A Japanese question that ends on its question word takes 「か覚えてる？」 after it.
_JA_ASKING = ("いつ", "どこ", "何", "誰", "だれ", "どれ", "いくら", "どう", "どんな", "いくつ")


def read_jsonl(path: Path) -> list[dict]:
    """A JSONL file, or its .gz beside it."""
    if not path.exists() and Path(f"{path}.gz").exists():
        path = Path(f"{path}.gz")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:  # type: ignore[operator]
        return [json.loads(line) for line in f if line.strip()]


def _latin(word: str) -> str:
    """The pattern of a Latin-script word, whole, its plural allowed (the ending its group 1)."""
    return rf"\b{re.escape(word)}(s|es)?\b"


def _holds(text: str, word: str) -> bool:
    """Whether `text` mentions `word`: as a whole word (any case, plural allowed) in Latin
    script, as a substring in Japanese."""
    if _JA.search(word):
        return word in text
    return re.search(_latin(word), text, re.IGNORECASE) is not None


def _plural(word: str) -> str:
    """An English noun's plural, enough for the sibling groups ("guinea pig" -> "guinea pigs",
    "goldfish" as it is)."""
    if word.endswith(("fish", "s")):
        return word
    if word.endswith(("sh", "ch", "x")):
        return word + "es"
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def _like(seen: str, word: str) -> str:
    """`word` capitalised as `seen` was ("Turtles" -> "Hamsters")."""
    return word[:1].upper() + word[1:] if seen[:1].isupper() else word


def _reworded(query: str, swap: tuple[str, str] | None, lead: int) -> str:
    """The question with a word swapped (None: as it is) and lead-in `lead` put before it."""
    q = query
    if swap is not None:
        old, new = swap
        if _JA.search(old):
            q = q.replace(old, new, 1)
        else:
            q = re.sub(
                _latin(old),
                lambda m: _like(m.group(0), _plural(new) if m.group(1) else new),
                q,
                count=1,
                flags=re.IGNORECASE,
            )
    if _JA.search(query):
        head, tail = LEADS_JA[lead % len(LEADS_JA)]
        if tail:
            q = q.rstrip("？?。")
            # 「…はいつ」 + 「か覚えてる？」; else 「…の名前、覚えてる？」 (not 「…の名前はか覚えてる？」)
            if not q.endswith(_JA_ASKING):
                q, tail = q.removesuffix("は") + "、", tail.removeprefix("か")
            q += tail
        return head + q
    head = LEADS_EN[lead % len(LEADS_EN)]
    lower = head and q[:1].isupper() and q[1:2].islower()  # "What …", not "I …"
    return head + (q[0].lower() + q[1:] if lower else q)


def read_set(setdir: Path) -> tuple[list[dict], list[dict]]:
    """A set's memories and questions as a conversation set holds them (namespace, id, content;
    qid, query, namespace, now, relevant); a corpus set (corpus.jsonl, queries.jsonl of id, text,
    now, and qrels.tsv: temporal_dev, multihop_dev) is read as one namespace named for its folder."""
    if (setdir / "memories.jsonl").exists() or (setdir / "memories.jsonl.gz").exists():
        return read_jsonl(setdir / "memories.jsonl"), read_jsonl(setdir / "queries.jsonl")
    ns = setdir.name
    relevant: dict[str, list[str]] = defaultdict(list)
    for line in (setdir / "qrels.tsv").read_text().splitlines():
        qid, mid, grade = line.split("\t")[:3]
        if float(grade) > 0:
            relevant[qid].append(mid)
    memories = [{**m, "namespace": ns} for m in read_jsonl(setdir / "corpus.jsonl")]
    queries = [
        {"qid": q["id"], "query": q["text"], "namespace": ns, "now": q.get("now"),
         "relevant": relevant.get(q["id"], [])}
        for q in read_jsonl(setdir / "queries.jsonl")
    ]  # fmt: skip
    return memories, queries


def twins(setdirs: list[Path], seed: int = 7) -> list[dict]:
    """Pairs of (answerable, twin) question records over the sets (see the module)."""
    rng = random.Random(seed)
    out: list[dict] = []
    for setdir in setdirs:
        memories, queries = read_set(setdir)
        store: dict[str, str] = defaultdict(str)
        for m in memories:
            store[m["namespace"]] += "\n" + m["content"]
        for q in queries:
            if not q.get("relevant") or q.get("answerable") is False:
                continue
            text, ns = q.get("query") or q.get("text", ""), q["namespace"]
            groups = SIBLINGS_JA if _JA.search(text) else SIBLINGS_EN
            options = [
                (w, [s for s in g if s != w and not _holds(store[ns], s)])
                for g in groups
                for w in g
                if _holds(text, w) and _holds(store[ns], w)
            ]
            options = [(w, s) for w, s in options if s]
            if not options:
                continue
            word, siblings = rng.choice(options)
            new, lead = rng.choice(siblings), rng.randrange(8)
            base = {k: q[k] for k in ("namespace", "now", "category") if k in q}
            pair = f"{setdir.name}:{q['qid']}"
            out.append({
                **base, "qid": f"{q['qid']}-orig", "pair": pair, "query": _reworded(text, None, lead),
                "relevant": q["relevant"], "answerable": True, "set": f"twins-{setdir.name}",
            })  # fmt: skip
            out.append({
                **base, "qid": f"{q['qid']}-twin", "pair": pair,
                "query": _reworded(text, (word, new), lead), "relevant": [], "answerable": False,
                "set": f"twins-{setdir.name}", "swap": [word, new],
            })  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("setdirs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=Path("twins.jsonl"))
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    made = twins(a.setdirs, a.seed)
    with a.out.open("w", encoding="utf-8") as f:
        for r in made:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"{len(made) // 2} pairs -> {a.out}")


if __name__ == "__main__":
    main()
