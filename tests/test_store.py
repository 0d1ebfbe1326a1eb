"""The memory store on the real PostgreSQL: migrations, ingest, isolation, visibility rules."""

import asyncio
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import asyncpg
import numpy as np
import pytest

from db import migrate as migrations
from db.meta import check_embedding_model
from retrieval.errors import EmbeddingModelMismatch, InvalidInput
from retrieval.ingest import check_precomputed, ingest, parse_items, read_jsonl
from retrieval.models import RetrievalOptions, Strategy

NOW = datetime.now(UTC)


async def _ingest(rt, ns, items):
    return await ingest(rt.pool, rt.nlp, rt.embedder, parse_items(items), namespace=ns)


async def _ids(rt, query, ns, **kw):
    resp = await rt.orchestrator.retrieve(query, RetrievalOptions(namespace=ns, limit=20, **kw))
    return [r.id for r in resp.results], resp


async def test_migrations_are_idempotent(rt):
    conn = await asyncpg.connect(rt.dsn)
    try:
        assert await migrations.migrate(conn, embedding_dim=384) == []
        assert await migrations.migrate(conn, embedding_dim=384) == []
        assert await migrations.pending(conn) == []
        assert await conn.fetchval("SELECT count(*) FROM schema_migrations") == len(
            migrations.load_migrations()
        )
    finally:
        await conn.close()


async def test_upgrade_fills_postings_for_existing_memories(rt, tmp_path):
    """A store made before migration 0002 gets postings for the memories it already holds."""
    import shutil

    db = f"upgrade_{os.getpid()}"
    admin = await asyncpg.connect(rt.dsn)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{db}"')  # a constant, not user input
        await admin.execute(f'CREATE DATABASE "{db}"')
        old = tmp_path / "old"
        old.mkdir()
        shutil.copy(migrations.migrations_dir() / "0001_memories.sql", old)
        conn = await asyncpg.connect(rt.dsn, database=db)
        try:
            assert await migrations.migrate(conn, embedding_dim=3, folder=old) == [1]
            await conn.execute(
                "INSERT INTO memories (external_id, namespace, content, embedding, search_tokens, "
                "token_count, term_tf) "
                "VALUES ('a', 'ns', 'x', '[1,0,0]', 'ジム ジム 筋トレ', 3, '{\"ジム\": 2, \"筋トレ\": 1}')"
            )
            # Statistics that drifted under the old write path (a duplicate id counted twice),
            # and an eval cache key in the service table.
            await conn.execute("INSERT INTO term_df VALUES ('ns', 'ジム', 2), ('ns', '筋トレ', 2)")
            await conn.execute("INSERT INTO namespace_stats VALUES ('ns', 2, 6, 'k1')")
            assert (
                await migrations.migrate(conn, embedding_dim=3)
                == [m.version for m in migrations.load_migrations()][1:]
            )
            rows = await conn.fetch("SELECT term, tf, dl FROM postings ORDER BY term")
            assert [(r["term"], r["tf"], r["dl"]) for r in rows] == [
                ("ジム", 2, 3),
                ("筋トレ", 1, 3),
            ]
            # 0004 recounts them from the rows and moves the harness's key to its own table.
            assert dict(await conn.fetch("SELECT term, df FROM term_df")) == {
                "ジム": 1,
                "筋トレ": 1,
            }
            assert tuple(
                await conn.fetchrow("SELECT doc_count, total_tokens FROM namespace_stats")
            ) == (1, 3)
            assert (
                await conn.fetchval("SELECT cache_key FROM harness_indexes WHERE namespace = 'ns'")
                == "k1"
            )
        finally:
            await conn.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{db}"')
        await admin.close()


def test_concurrent_migrate_from_two_processes(tmp_path):
    """Two processes migrating a fresh database at once: one applies, the other waits, both succeed."""
    from db.embedded import embedded_dsn

    dsn = embedded_dsn(tmp_path / "fresh")
    code = (
        "import asyncio, asyncpg, json, sys\n"
        "from db import migrate\n"
        "async def main():\n"
        "    c = await asyncpg.connect(sys.argv[1])\n"
        "    print(json.dumps(await migrate.migrate(c, embedding_dim=384)))\n"
        "asyncio.run(main())\n"
    )
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, dsn],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-500:] for o in outs]
    applied = sorted(json.loads(o[0]) for o in outs)
    assert applied[0] == [] and applied[1] == [m.version for m in migrations.load_migrations()]
    from db.embedded import stop_embedded

    stop_embedded(tmp_path / "fresh")


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
    assert (first.inserted, again.inserted, again.updated, again.reembedded) == (2, 0, 2, 0)
    changed = await _ingest(rt, ns, [{"id": "a", "content": "ランニングで5km走った"}])
    assert changed.reembedded == 1
    async with rt.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM memories WHERE namespace = $1", ns) == 2
        stats = await conn.fetchrow(
            "SELECT doc_count FROM namespace_stats WHERE namespace = $1", ns
        )
        assert stats["doc_count"] == 2
        # df follows the replaced content: 筋トレ is gone, ランニング arrived
        df = dict(await conn.fetch("SELECT term, df FROM term_df WHERE namespace = $1", ns))
        assert df.get("筋トレ", 0) == 0 and df["ランニング"] == 1


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


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
        read_jsonl(f)
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


async def test_namespace_isolation(rt, ns):
    other = ns + "-b"
    await _ingest(rt, ns, [{"id": "mine", "content": "秘密のプロジェクトXの締切は3月末"}])
    await _ingest(rt, other, [{"id": "theirs", "content": "秘密のプロジェクトXの締切は3月末"}])
    for strategy in Strategy:
        ids, _ = await _ids(rt, "プロジェクトXの締切はいつ？", ns, force_strategy=strategy)
        assert "theirs" not in ids
    ids, _ = await _ids(rt, "プロジェクトXの締切はいつ？", other)
    assert ids == ["theirs"]


async def test_expired_archived_unsearchable_never_returned(rt, ns):
    await _ingest(
        rt,
        ns,
        [
            {"id": "live", "content": "ダッシュボードの設定手順はgrafanaフォルダにある"},
            {
                "id": "expired",
                "content": "ダッシュボードの設定手順は古いwikiにある",
                "expires_at": (NOW - timedelta(days=1)).isoformat(),
            },
            {"id": "archived", "content": "ダッシュボードの設定手順は旧サーバーにある"},
            {"id": "hidden", "content": "ダッシュボードの設定手順は誤りのメモにある"},
        ],
    )
    async with rt.pool.acquire() as conn:
        await conn.execute(
            "UPDATE memories SET is_archived = true WHERE namespace = $1 AND external_id = 'archived'",
            ns,
        )
        await conn.execute(
            "UPDATE memories SET searchable = false WHERE namespace = $1 AND external_id = 'hidden'",
            ns,
        )
    for strategy in Strategy:
        ids, _ = await _ids(rt, "ダッシュボードの設定手順", ns, force_strategy=strategy)
        assert not {"expired", "archived", "hidden"} & set(ids), strategy
    ids, _ = await _ids(rt, "ダッシュボードの設定手順", ns)
    assert ids == ["live"]


async def test_embedding_model_mismatch_is_refused(rt):
    async with rt.pool.acquire() as conn:
        await check_embedding_model(conn, rt.embedder.name, rt.embedder.dim)
        with pytest.raises(EmbeddingModelMismatch, match="multilingual-e5-small"):
            await check_embedding_model(conn, "text-embedding-3-small", 1536)


def test_precomputed_vectors_are_checked(embedder):
    items = parse_items([{"content": "呼吸のリズム"}, {"content": "カレーを作った"}])
    good = embedder.embed_passages([i.content for i in items])
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


async def test_trigram_skips_names_common_in_the_namespace(rt, ns):
    """A regression: "BM25" is tokenised bm+25 in memories, so looking the raw name up in term_df
    found nothing and the trigram leg scanned every memory containing it (600 ms at 1M)."""
    from retrieval.models import Filters
    from retrieval.sources import SearchContext, trigram

    await _ingest(
        rt,
        ns,
        [{"id": f"c{i}", "content": f"キーワード検索のBM25を検証した{i}"} for i in range(25)]
        + [{"id": "rare", "content": "型番RTX-4090のGPUサーバーを借りた"}],
    )
    for query, expect in (("BM25の検証", []), ("RTX-4090のサーバー", ["rare"])):
        intent = rt.analyzer.analyze(query)
        ctx = SearchContext(
            pool=rt.pool, intent=intent, vectors=[], filters=Filters(namespace=ns), k=10
        )
        assert [c.external_id for c in await trigram(ctx)] == expect, query


def test_precomputed_vectors_file_errors_name_the_field(embedder, tmp_path):
    from retrieval.ingest import load_precomputed

    items = parse_items(
        [{"id": "a", "content": "呼吸のリズム"}, {"id": "b", "content": "カレーを作った"}]
    )
    with pytest.raises(InvalidInput, match="cannot read"):
        load_precomputed(tmp_path / "missing.npy", items, embedder)
    path = tmp_path / "v.npy"
    np.save(path, embedder.embed_passages([i.content for i in items]))
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


async def test_keyword_leg_reads_a_capped_number_of_postings_per_term(rt, ns):
    """With the cap below a common term's document frequency, the memory with the rare term still
    ranks first (the rare term's postings are read whole); the common term is read only up to
    the cap, so its share of a score may be missing, never added."""
    from retrieval.models import Filters
    from retrieval.sources import SearchContext, keyword

    await _ingest(
        rt,
        ns,
        [{"id": f"c{i}", "content": f"今日は天気の話をした{i}"} for i in range(12)]
        + [{"id": "rare", "content": "天気と量子コンピュータの話"}],
    )
    intent = rt.analyzer.analyze("量子コンピュータと天気")
    full = SearchContext(
        pool=rt.pool, intent=intent, vectors=[], filters=Filters(namespace=ns), k=20
    )
    capped = SearchContext(
        pool=rt.pool,
        intent=intent,
        vectors=[],
        filters=Filters(namespace=ns),
        k=20,
        postings_per_term=3,
    )
    all_rows, few = await keyword(full), await keyword(capped)
    assert all_rows[0].external_id == few[0].external_id == "rare"
    assert 0 < few[0].score <= all_rows[0].score + 1e-9
    assert len(all_rows) == 13 and len(few) <= 1 + 3 * len(full.debug["keyword_terms"])


async def test_trigram_leg_uses_the_trigram_index(rt, ns):
    """An OR of ILIKEs was planned as a scan of every memory (715 ms on 13.4k passages)."""
    from retrieval.sources import TRIGRAM_SQL

    await _ingest(rt, ns, [{"id": "x", "content": "ボロベン高原のコーヒー"}])
    async with rt.pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL enable_seqscan = off")
        plan = "\n".join(
            r[0]
            for r in await conn.fetch(
                "EXPLAIN " + TRIGRAM_SQL[2],
                ns,
                [],
                [],
                None,
                None,
                2.0,
                10,
                [1.0, 1.0],
                "%ボロベン%",
                "%コーヒー%",
            )
        )
    # Each branch is confined to the namespace: a small namespace is read through its own index.
    assert "Seq Scan on memories" not in plan
    assert "idx_memories_content_trgm" in plan or "idx_memories_namespace_created" in plan


async def test_trigram_names_count_by_rarity_not_length(rt, ns):
    """A full name held by one memory outweighs a longer katakana word held by many: the
    person asked about, not the template the question shares with other meetings."""
    from retrieval.models import Filters
    from retrieval.sources import SearchContext, trigram

    items = [{"id": "kimura", "content": "千葉で木村翔太さんに会って、案件を進めることになった。"}]
    items += [
        {"id": f"p{i}", "content": f"同僚{i}さんと新しいプロジェクトの打ち合わせをした。"}
        for i in range(6)
    ]
    await _ingest(rt, ns, items)
    q = "木村翔太さんと打ち合わせしたプロジェクト"
    ctx = SearchContext(
        pool=rt.pool, intent=rt.analyzer.analyze(q), vectors=[], filters=Filters(namespace=ns), k=10
    )
    got = await trigram(ctx)
    assert got[0].external_id == "kimura" and got[0].score > 0.5, [
        (c.external_id, c.score) for c in got
    ]


async def test_small_windows_are_searched_exactly(rt, ns, monkeypatch):
    """A window of few memories gets exact distances (HNSW walks most of the graph to find a
    handful in-window); a larger one the index. Both return the in-window memories nearest the
    query, best first."""
    import retrieval.sources as src
    from retrieval.models import Filters, TimeRange
    from retrieval.sources import SearchContext

    topics = ["ジムで筋トレ", "映画を観た", "カレーを作った", "ランニング5km", "読書会に参加"]
    await _ingest(
        rt,
        ns,
        [
            {
                "id": f"d{i}",
                "content": f"{topics[i % 5]}({i}日目)",
                "created_at": f"2026-03-{i + 1:02d}T12:00:00+09:00",
            }
            for i in range(20)
        ],
    )
    window = TimeRange(
        start=datetime(2026, 3, 5, tzinfo=UTC), end=datetime(2026, 3, 15, tzinfo=UTC)
    )
    vec = rt.embedder.embed_query("ジムでのトレーニング")
    async with rt.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT external_id, embedding FROM memories WHERE namespace = $1 "
            "AND created_at >= $2 AND created_at < $3",
            ns,
            window.start,
            window.end,
        )
    want = sorted(rows, key=lambda r: -float(np.dot(np.asarray(r["embedding"].to_numpy()), vec)))
    want_ids = [r["external_id"] for r in want]
    for limit, exact in ((5000, True), (3, False)):
        monkeypatch.setattr(src, "EXACT_WINDOW_MAX", limit)
        ctx = SearchContext(
            pool=rt.pool,
            intent=rt.analyzer.analyze("ジム"),
            vectors=[vec],
            filters=Filters(namespace=ns),
            k=5,
            window=window,
        )
        got = [c.external_id for c in await src.temporal(ctx)]
        assert ctx.debug["temporal_exact"] is exact
        assert got == want_ids[:5], exact
