"""The rows a corpus is written as, hashed: a change of the write path that must not change what
is stored (a refactor) prints the same digests before and after.

It writes, through `Writer.store` in batches as the API does, a conversation of the LoCoMo dev
set (threads and reply_to links: turns embedded after the turn they follow), the packaged sample
memories and a few long documents (passages), then writes one batch again (unchanged memories
keep their rows; one changed text is embedded again), and prints a digest of each table's rows
for the namespace: the memories (text, terms, attribute), their vectors, entities, links and
passages.

    .venv/bin/python scripts/write_fingerprint.py [--eval-dir ../shared/eval]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TABLES = {
    "memories": """SELECT external_id, content, title, memory_type, source_type, metadata::text,
                          created_at, expires_at, thread, search_tokens, token_count, fact
                   FROM memories WHERE namespace = $1 ORDER BY external_id""",
    "vectors": """SELECT m.external_id, v.embedding::text FROM memory_vectors v
                  JOIN memories m ON m.id = v.memory_id WHERE m.namespace = $1
                  ORDER BY m.external_id""",
    "entities": """SELECT m.external_id, e.entity, e.weight FROM memory_entities e
                   JOIN memories m ON m.id = e.memory_id WHERE m.namespace = $1
                   ORDER BY m.external_id, e.entity""",
    "links": """SELECT from_external, to_external, label FROM memory_links
                WHERE namespace = $1 ORDER BY 1, 2, 3""",
    "passages": """SELECT m.external_id, p.ord, p.start_char, p.end_char, p.embedding::text
                   FROM memory_passages p JOIN memories m ON m.id = p.memory_id
                   WHERE m.namespace = $1 ORDER BY 1, 2""",
}


def _corpus(eval_dir: Path) -> list[dict]:
    out = []
    with (eval_dir / "locomo_dev" / "memories.jsonl").open() as fh:
        for line in fh:
            d = json.loads(line)
            if d.pop("namespace") == "locomo-conv-26" and len(out) < 240:
                out.append(d)
    sample = (ROOT / "retrieval" / "data" / "sample_memories.jsonl").read_text("utf-8")
    out += [json.loads(line) for line in sample.splitlines()[:120]]
    with (eval_dir / "longdoc_dev" / "corpus.jsonl").open() as fh:
        for n, line in enumerate(fh):
            if n >= 4:
                break
            d = json.loads(line)
            out.append(
                {
                    "id": f"doc-{n}",
                    "title": d["title"],
                    "content": d["content"][:6000],
                    "created_at": "2025-01-01T00:00:00+09:00",
                }
            )
    return out


async def _digests(conn, ns: str) -> dict[str, str]:
    out = {}
    for name, sql in TABLES.items():
        rows = await conn.fetch(sql, ns)
        text = "\n".join(repr(tuple(r)) for r in rows)
        out[name] = f"{len(rows)} rows {hashlib.sha256(text.encode()).hexdigest()[:16]}"
    return out


async def main(eval_dir: Path) -> None:
    from retrieval.cli.common import opened
    from retrieval.ingest.memory_in import MemoryIn
    from retrieval.settings import Settings

    items = [MemoryIn.model_validate(d).item() for d in _corpus(eval_dir)]
    ns = f"fingerprint-{uuid.uuid4().hex[:8]}"
    # Every batch written inline (never queued as a job), whatever the machine's speed.
    async with opened(Settings(inline_embed_s=1e6)) as rt:
        try:
            for k in range(0, len(items), 100):
                await rt.writer.store(items[k : k + 100], ns, tenant=ns)
            again = items[:50]
            changed = MemoryIn.model_validate({**_corpus(eval_dir)[7], "content": "changed"})
            await rt.writer.store([*again[:7], changed.item(), *again[8:]], ns, tenant=ns)
            async with rt.pool.acquire() as conn:
                for name, digest in (await _digests(conn, ns)).items():
                    print(f"{name:9} {digest}")
        finally:
            await rt.writer.erase(ns, [it.id for it in items if it.id])


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--eval-dir", type=Path, default=ROOT.parent / "shared" / "eval")
    asyncio.run(main(ap.parse_args().eval_dir))
