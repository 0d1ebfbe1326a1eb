"""The write path: round trips, idempotent re-ingest, whole-batch rejection, precomputed
vectors, postings kept with every write."""

import asyncio
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from retrieval.errors import InvalidInput
from retrieval.ingest.memory_in import parse_items, scan_file
from retrieval.ingest.vectors import check_precomputed
from retrieval.models import Strategy
from tests.helpers import ids_of as _ids
from tests.helpers import ingest_items as _ingest
from tests.helpers import write_lines as _write


async def test_round_trip_japanese_and_english(rt, ns):
    await _ingest(
        rt,
        ns,
        [
            {
                "id": "ja",
                "content": "Resonant Engineは呼吸のリズムで動作する",
                "created_at": "2026-01-10T10:00:00+09:00",
            },
            {
                "id": "en",
                "content": "The backup is restored with pg_restore before running migrations.",
            },
            {"id": "other", "content": "カレーを作った。隠し味にチョコを入れた。"},
        ],
    )
    ids, resp = await _ids(rt, "呼吸について教えて", ns)
    assert ids[0] == "ja"
    assert resp.metadata.strategy_used in (Strategy.SEMANTIC_ONLY, Strategy.HYBRID)
    ids, _ = await _ids(rt, "how to restore the database from a backup", ns)
    assert ids[0] == "en"


async def test_reingest_is_idempotent_and_updates(rt, ns):
    items = [{"id": "a", "content": "ジムで筋トレをした"}, {"id": "b", "content": "映画を観た"}]
    first = await _ingest(rt, ns, items)
    again = await _ingest(rt, ns, items)
    assert (first.inserted, again.inserted, again.updated, again.embedded) == (2, 0, 2, 0)
    changed = await _ingest(rt, ns, [{"id": "a", "content": "ランニングで5km走った"}])
    assert changed.embedded == 1
    async with rt.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM memories WHERE namespace = $1", ns) == 2
        stats = await conn.fetchrow(
            "SELECT doc_count FROM namespace_stats WHERE namespace = $1", ns
        )
        assert stats["doc_count"] == 2
        # df follows the replaced content: 筋トレ is gone, ランニング arrived
        df = dict(await conn.fetch("SELECT term, df FROM term_df WHERE namespace = $1", ns))
        assert df.get("筋トレ", 0) == 0 and df["ランニング"] == 1


async def test_bad_file_is_rejected_whole_with_line_numbers(rt, ns, tmp_path):
    f = tmp_path / "bad.jsonl"
    _write(
        f,
        [
            json.dumps({"id": "1", "content": "fine"}),
            "{not json",
            json.dumps({"id": "3", "content": "   "}),
            json.dumps({"id": "4", "content": "x", "created_at": "2025-01-01T00:00:00"}),
            json.dumps({"id": "1", "content": "duplicate id"}),
        ],
    )
    with pytest.raises(InvalidInput) as err:
        scan_file(f)
    lines = {(e["line"], e["field"]) for e in err.value.errors}
    assert {(2, "(json)"), (3, "content"), (4, "created_at"), (5, "id")} <= lines
    proc = subprocess.run(
        [sys.executable, "-m", "retrieval.cli", "ingest", str(f), "--namespace", ns],
        capture_output=True,
        text=True,
        env={**os.environ, "RETRIEVAL_DATA_DIR": str(rt.settings.data_dir)},
        timeout=120,
    )
    assert proc.returncode == 2
    assert f"{f}:2: (json): invalid JSON" in proc.stderr and "Traceback" not in proc.stderr
    assert "nothing was written" in proc.stderr
    async with rt.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM memories WHERE namespace = $1", ns) == 0


async def test_cli_ingest_and_query(rt, ns, tmp_path):
    f = tmp_path / "good.jsonl"
    _write(
        f,
        [
            json.dumps(
                {"id": "x1", "text": "型番RTX-4090のGPUサーバーを借りた", "title": "検証環境"}
            )
        ],
    )
    env = {**os.environ, "RETRIEVAL_DATA_DIR": str(rt.settings.data_dir)}
    p = subprocess.run(
        [sys.executable, "-m", "retrieval.cli", "ingest", str(f), "--namespace", ns],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert "ingested 1 memories" in p.stdout
    p = subprocess.run(
        [sys.executable, "-m", "retrieval.cli", "query", "RTX-4090", "--namespace", ns, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["results"][0]["id"] == "x1" and out["results"][0]["title"] == "検証環境"


def test_precomputed_vectors_are_checked(embedder):
    items = parse_items([{"content": "呼吸のリズム"}, {"content": "カレーを作った"}])
    good = embedder.embed_documents([i.content for i in items])
    check_precomputed(embedder, items, good)
    with pytest.raises(InvalidInput, match="does not match"):
        check_precomputed(embedder, items, good[::-1].copy())
    with pytest.raises(InvalidInput, match="shape"):
        check_precomputed(embedder, items, np.zeros((3, 384), np.float32))


async def test_api_batch_errors_name_index_and_field():
    with pytest.raises(InvalidInput) as err:
        parse_items(
            [
                {"content": "ok"},
                {"content": ""},
                {"text": "a", "content": "b"},
                {"content": "x", "metadata": 3},
            ]
        )
    got = {(e["index"], e["field"]) for e in err.value.errors}
    assert (1, "content") in got and (3, "metadata") in got and any(i == 2 for i, _ in got)


async def test_concurrent_ingest_and_retrieve(rt, ns):
    await _ingest(
        rt, ns, [{"id": f"m{i}", "content": f"メモ{i}: ベクトル検索の調査"} for i in range(5)]
    )
    results = await asyncio.gather(*[_ids(rt, "ベクトル検索", ns) for _ in range(6)])
    assert all(len(ids) >= 1 for ids, _ in results)


def test_precomputed_vectors_file_errors_name_the_field(embedder, tmp_path):
    from retrieval.ingest.vectors import check_precomputed, open_vectors

    def load_precomputed(path, items, embedder):
        vectors = np.asarray(open_vectors(path, [it.id for it in items], embedder.dim), np.float32)
        check_precomputed(embedder, items, vectors)
        return vectors

    items = parse_items(
        [{"id": "a", "content": "呼吸のリズム"}, {"id": "b", "content": "カレーを作った"}]
    )
    with pytest.raises(InvalidInput, match="cannot read"):
        load_precomputed(tmp_path / "missing.npy", items, embedder)
    path = tmp_path / "v.npy"
    np.save(path, embedder.embed_documents([i.content for i in items]))
    (tmp_path / "v_ids.json").write_text(json.dumps(["b", "a"]))
    with pytest.raises(InvalidInput, match="ids in order"):
        load_precomputed(path, items, embedder)
    (tmp_path / "v_ids.json").write_text(json.dumps(["a", "b"]))
    assert load_precomputed(path, items, embedder).shape == (2, 384)


async def test_postings_follow_every_write(rt, ns):
    """Postings are kept by triggers: insert, changed text, unchanged re-ingest, delete."""
    await _ingest(
        rt, ns, [{"id": "a", "content": "ジムで筋トレをした"}, {"id": "b", "content": "映画を観た"}]
    )

    async def postings(ext_id):
        async with rt.pool.acquire() as conn:
            rows = await conn.fetch(
                "SELECT p.term, p.tf, p.dl FROM postings p JOIN memories m ON m.id = p.memory_id "
                "WHERE m.namespace = $1 AND m.external_id = $2 ORDER BY p.term",
                ns,
                ext_id,
            )
            tf = await conn.fetchval(
                "SELECT term_tf FROM memories WHERE namespace = $1 AND external_id = $2", ns, ext_id
            )
        return {r["term"]: r["tf"] for r in rows}, tf

    got, tf = await postings("a")
    assert got == tf and "筋トレ" in got
    await _ingest(rt, ns, [{"id": "a", "content": "ランニングで5km走った。ランニングは楽しい"}])
    got, tf = await postings("a")
    assert got == tf and got["ランニング"] == 2 and "筋トレ" not in got
    await _ingest(
        rt, ns, [{"id": "a", "content": "ランニングで5km走った。ランニングは楽しい"}]
    )  # unchanged
    assert (await postings("a"))[0] == got
    async with rt.pool.acquire() as conn:
        await conn.execute("DELETE FROM memories WHERE namespace = $1 AND external_id = 'a'", ns)
        left = await conn.fetchval(
            "SELECT count(*) FROM postings WHERE namespace = $1 AND term = 'ランニング'", ns
        )
    assert left == 0


async def test_an_unchanged_memory_written_before_attributes_were_read_gets_its_attribute(rt, ns):
    """A rewrite that keeps the stored terms and vector (the text did not change) reads the
    attribute of a row that has none stored yet (written before tokenizer 8)."""
    item = [{"id": "move", "content": "Moved to Fukuoka last month."}]
    await rt.writer.write(parse_items(item), ns)
    sql = "SELECT fact FROM memories WHERE namespace = $1 AND external_id = 'move'"
    async with rt.pool.acquire() as conn:
        assert await conn.fetchval(sql, ns) == "residence"
        await conn.execute("UPDATE memories SET fact = NULL WHERE namespace = $1", ns)
    report = await rt.writer.write(parse_items(item), ns)
    assert report.embedded == 0  # unchanged: nothing analysed or embedded again
    async with rt.pool.acquire() as conn:
        assert await conn.fetchval(sql, ns) == "residence"
