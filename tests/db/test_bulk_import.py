"""Bulk import (`retrieval ingest FILE`): staged, resumable, published all or nothing."""

import json

import asyncpg
import numpy as np
import pytest

from db import bulk
from db.errors import ImportInProgress
from retrieval.errors import InvalidInput
from retrieval.ingest import importer
from retrieval.ingest.index import index_terms
from retrieval.ingest.memory_in import parse_line
from retrieval.models import RetrievalOptions

LINES = [
    {"id": "p1", "content": "プロジェクト「アオバ」の締め切りは3月末に決まった", "thread": "t1"},
    {"id": "p2", "content": "アオバの予算は二百万円", "links": [{"to": "p1", "label": "reply_to"}]},
    {"content": "ジムで筋トレをした", "created_at": "2025-06-01T09:00:00+09:00"},
    {"id": "p4", "content": "Resonant Engineの設計レビュー", "entities": ["Resonant Engine"]},
    {"id": "p5", "content": "カレーを作った。辛さは中辛。"},
]


def _write(path, rows):
    path.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
    )


async def _count(rt, sql, *args):
    async with rt.pool.acquire() as conn:
        return await conn.fetchval(sql, *args)


async def _statistics_match_a_recount(rt, ns):
    """term_df and namespace_stats equal what the stored rows say (the triggers kept them)."""
    async with rt.pool.acquire() as conn:
        bad = await conn.fetchval(
            """SELECT count(*) FROM (
                 SELECT t.term, count(*) AS df FROM memories m
                 CROSS JOIN LATERAL jsonb_object_keys(m.term_tf) AS t(term)
                 WHERE m.namespace = $1 GROUP BY t.term) r
               FULL JOIN (SELECT term, df FROM term_df WHERE namespace = $1 AND df <> 0) d
                 USING (term) WHERE r.df IS DISTINCT FROM d.df""",
            ns,
        )
        docs = await conn.fetchval("SELECT doc_count FROM namespace_stats WHERE namespace = $1", ns)
        rows = await conn.fetchval("SELECT count(*) FROM memories WHERE namespace = $1", ns)
        postings_of_gone = await conn.fetchval(
            "SELECT count(*) FROM postings p WHERE NOT EXISTS (SELECT 1 FROM memories m WHERE m.id = p.memory_id)"
        )
    assert bad == 0 and docs == rows and postings_of_gone == 0


async def test_import_stores_rows_entities_links_and_is_idempotent(rt, ns, tmp_path):
    f = tmp_path / "m.jsonl"
    _write(f, LINES)
    rep = await importer.import_file(
        rt, f, parse=parse_line, namespace=ns, workers=1, rebuild=bulk.Rebuild.NEVER
    )
    assert (rep.received, rep.inserted, rep.updated, rep.embedded) == (5, 5, 0, 5)
    assert await _count(rt, "SELECT count(*) FROM memory_links WHERE namespace = $1", ns) == 1
    assert (
        await _count(
            rt,
            "SELECT count(*) FROM memory_entities WHERE namespace = $1 AND entity = 'resonant engine'",
            ns,
        )
        == 1
    )
    assert (
        await _count(
            rt,
            "SELECT count(*) FROM memory_entities WHERE namespace = $1 AND entity = 'アオバ'",
            ns,
        )
        == 2
    )
    assert await _count(rt, "SELECT count(*) FROM import_rows") == 0  # staging is gone
    await _statistics_match_a_recount(rt, ns)
    resp = await rt.orchestrator.retrieve("カレーの辛さ", RetrievalOptions(namespace=ns, limit=3))
    assert resp.results[0].id == "p5"

    again = await importer.import_file(
        rt, f, parse=parse_line, namespace=ns, workers=1, rebuild=bulk.Rebuild.NEVER
    )
    assert (again.inserted, again.updated, again.embedded) == (
        0,
        5,
        0,
    )  # unchanged text keeps its vector
    assert await _count(rt, "SELECT count(*) FROM memories WHERE namespace = $1", ns) == 5
    await _statistics_match_a_recount(rt, ns)


async def test_an_interrupted_import_shows_nothing_and_resumes(rt, ns, tmp_path, monkeypatch):
    monkeypatch.setattr(importer, "CHUNK", 2)
    f = tmp_path / "m.jsonl"
    _write(f, LINES)
    staged: list[int] = []

    class Interrupted(Exception):
        pass

    def stop_after_first_chunk(n: int) -> None:
        staged.append(n)
        raise Interrupted

    with pytest.raises(Interrupted):
        await importer.import_file(
            rt, f, parse=parse_line, namespace=ns, workers=1, progress=stop_after_first_chunk
        )
    assert staged == [2]
    assert await _count(rt, "SELECT count(*) FROM memories WHERE namespace = $1", ns) == 0
    rep = await importer.import_file(
        rt, f, parse=parse_line, namespace=ns, workers=1, rebuild=bulk.Rebuild.NEVER
    )
    assert rep.resumed_from == 2 and rep.embedded == 3  # lines 1-2 were not analysed again
    assert (rep.received, rep.inserted) == (5, 5)
    await _statistics_match_a_recount(rt, ns)


async def test_a_bad_line_writes_nothing(rt, ns, tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text(
        json.dumps(LINES[0], ensure_ascii=False)
        + "\n{oops\n"
        + json.dumps({"id": "p1", "content": "x"})
        + "\n"
    )
    with pytest.raises(InvalidInput) as err:
        await importer.import_file(rt, f, parse=parse_line, namespace=ns, workers=1)
    assert {(e["line"], e["field"]) for e in err.value.errors} == {(2, "(json)"), (3, "id")}
    assert await _count(rt, "SELECT count(*) FROM memories WHERE namespace = $1", ns) == 0
    assert await _count(rt, "SELECT count(*) FROM imports WHERE namespace = $1", ns) == 0


async def test_vectors_are_checked_against_the_file(rt, ns, tmp_path):
    f = tmp_path / "m.jsonl"
    _write(f, LINES)
    v = tmp_path / "v.npy"
    np.save(v, np.zeros((4, 384), np.float32))
    with pytest.raises(InvalidInput, match="expected \\(5, 384\\)"):
        await importer.import_file(rt, f, parse=parse_line, namespace=ns, embeddings=v, workers=1)
    # Usable vectors, but not this model's (random directions).
    np.save(v, np.random.default_rng(1).normal(size=(5, 384)).astype(np.float32))
    with pytest.raises(InvalidInput, match="does not match"):
        await importer.import_file(rt, f, parse=parse_line, namespace=ns, embeddings=v, workers=1)
    assert await _count(rt, "SELECT count(*) FROM memories WHERE namespace = $1", ns) == 0


async def test_rebuild_drops_and_rebuilds_the_deferred_indexes(rt, ns, tmp_path):
    f = tmp_path / "m.jsonl"
    _write(f, LINES[:2])
    before = await _count(
        rt,
        "SELECT count(*) FROM pg_indexes WHERE indexname = ANY($1::text[])",
        list(bulk.DEFERRED_INDEXES),
    )
    rep = await importer.import_file(
        rt, f, parse=parse_line, namespace=ns, workers=1, rebuild=bulk.Rebuild.ALWAYS
    )
    assert len(rep.rebuilt) == before > 0
    assert (
        await _count(
            rt,
            "SELECT count(*) FROM pg_indexes WHERE indexname = ANY($1::text[])",
            list(bulk.DEFERRED_INDEXES),
        )
        == before
    )
    # The weeks' graphs come back on every partition (the catalog writes a partitioned
    # table's index "ON ONLY": rebuilt as written it would cover none) and valid.
    assert await _count(rt, _PARTITIONS_WITHOUT_GRAPH) == 0
    assert await _count(rt, _VALID_INDEX, "idx_memory_vectors_hnsw") == 1
    resp = await rt.orchestrator.retrieve(
        "アオバの締め切り", RetrievalOptions(namespace=ns, limit=3)
    )
    assert {r.id for r in resp.results} == {"p1", "p2"} and not resp.metadata.degraded


_PARTITIONS_WITHOUT_GRAPH = """
SELECT count(*) FROM pg_inherits i WHERE i.inhparent = 'memory_vectors'::regclass
AND NOT EXISTS (SELECT 1 FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
                JOIN pg_am a ON a.oid = c.relam WHERE x.indrelid = i.inhrelid AND a.amname = 'hnsw')"""
_VALID_INDEX = "SELECT count(*) FROM pg_index WHERE indexrelid = $1::text::regclass AND indisvalid"


async def test_worker_processes_give_the_same_terms(rt, ns, tmp_path):
    f = tmp_path / "m.jsonl"
    _write(f, LINES)
    await importer.import_file(
        rt, f, parse=parse_line, namespace=ns, workers=2, rebuild=bulk.Rebuild.NEVER
    )
    async with rt.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT content, title, search_tokens FROM memories WHERE namespace = $1", ns
        )
    for r in rows:
        assert r["search_tokens"].split() == index_terms(rt.nlp.tokens(r["content"]))


def test_maintenance_memory_grows_with_rows_within_bounds():
    assert bulk.maintenance_mem(10) == "64MB"
    assert bulk.maintenance_mem(1_000_000) == "6000MB"
    assert bulk.maintenance_mem(10**9) == "8192MB"


async def test_deleting_memories_takes_their_postings_and_entities(rt, ns, tmp_path):
    f = tmp_path / "m.jsonl"
    _write(f, LINES)
    await importer.import_file(
        rt, f, parse=parse_line, namespace=ns, workers=1, rebuild=bulk.Rebuild.NEVER
    )
    async with rt.pool.acquire() as conn:
        ids = [
            r["id"] for r in await conn.fetch("SELECT id FROM memories WHERE namespace = $1", ns)
        ]
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM postings WHERE memory_id = ANY($1::bigint[])", ids
            )
            > 0
        )
        await conn.execute("DELETE FROM memories WHERE namespace = $1", ns)
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM postings WHERE memory_id = ANY($1::bigint[])", ids
            )
            == 0
        )
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM memory_entities WHERE memory_id = ANY($1::bigint[])", ids
            )
            == 0
        )
        assert (
            await conn.fetchval("SELECT doc_count FROM namespace_stats WHERE namespace = $1", ns)
            == 0
        )


@pytest.mark.parametrize("bad", ["", "日本語", "a b", "x" * 129])
async def test_the_namespace_rule_is_the_api_rule(rt, tmp_path, bad):
    f = tmp_path / "m.jsonl"
    _write(f, LINES[:1])
    with pytest.raises(InvalidInput) as err:
        await importer.import_file(rt, f, parse=parse_line, namespace=bad, workers=1)
    assert err.value.errors[0]["field"] == "namespace"


async def test_bytes_that_are_not_utf8_are_named_by_line(rt, ns, tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_bytes(b'{"id": "a", "content": "ok"}\n{"id": "b", "content": "bad \xff byte"}\n')
    with pytest.raises(InvalidInput) as err:
        await importer.import_file(rt, f, parse=parse_line, namespace=ns, workers=1)
    assert [(e["line"], e["field"]) for e in err.value.errors] == [(2, "(encoding)")]
    assert await _count(rt, "SELECT count(*) FROM memories WHERE namespace = $1", ns) == 0


@pytest.mark.parametrize("poison", [np.nan, np.inf, 0.0])
async def test_unusable_vectors_are_refused_before_anything_is_staged(rt, ns, tmp_path, poison):
    f = tmp_path / "m.jsonl"
    _write(f, LINES[:3])
    v = rt.embedder.embed_documents([x["content"] for x in LINES[:3]]).astype(np.float32)
    if poison == 0.0:
        v[2] = 0.0
    else:
        v[2, 7] = poison
    np.save(tmp_path / "v.npy", v)
    with pytest.raises(InvalidInput, match="row 2 of .* is not a usable vector"):
        await importer.import_file(
            rt, f, parse=parse_line, namespace=ns, embeddings=tmp_path / "v.npy", workers=1
        )
    assert await _count(rt, "SELECT count(*) FROM imports WHERE namespace = $1", ns) == 0


async def test_a_second_run_of_the_same_import_is_refused(rt, ns, tmp_path):
    f = tmp_path / "m.jsonl"
    _write(f, LINES)
    iid = importer.import_id(ns, importer.scan(f, parse_line).digest, rt.embedder, None)
    async with rt.pool.acquire() as other:  # the first run, holding the import's lock
        assert await bulk.try_lock(other, iid)
        try:
            with pytest.raises(ImportInProgress):
                await importer.import_file(rt, f, parse=parse_line, namespace=ns, workers=1)
        finally:
            await bulk.unlock(other, iid)
    assert await _count(rt, "SELECT count(*) FROM memories WHERE namespace = $1", ns) == 0
    rep = await importer.import_file(
        rt, f, parse=parse_line, namespace=ns, workers=1, rebuild=bulk.Rebuild.NEVER
    )
    assert rep.inserted == 5


async def test_a_database_failure_mid_import_publishes_nothing_and_resumes(
    rt, ns, tmp_path, monkeypatch
):
    monkeypatch.setattr(importer, "CHUNK", 2)
    f = tmp_path / "m.jsonl"
    _write(f, LINES)
    real_stage, calls = bulk.stage, []

    async def stage_then_lose_the_server(conn, import_id, rows):
        calls.append(len(rows))
        if len(calls) == 2:
            raise asyncpg.ConnectionDoesNotExistError("connection was closed in the middle")
        await real_stage(conn, import_id, rows)

    monkeypatch.setattr(bulk, "stage", stage_then_lose_the_server)
    with pytest.raises(asyncpg.ConnectionDoesNotExistError):
        await importer.import_file(rt, f, parse=parse_line, namespace=ns, workers=1)
    assert await _count(rt, "SELECT count(*) FROM memories WHERE namespace = $1", ns) == 0
    monkeypatch.setattr(bulk, "stage", real_stage)
    rep = await importer.import_file(
        rt, f, parse=parse_line, namespace=ns, workers=1, rebuild=bulk.Rebuild.NEVER
    )
    assert rep.resumed_from == 2 and rep.inserted == 5


def test_cli_reports_a_database_failure_without_a_traceback(rt, tmp_path, monkeypatch, capsys):
    from retrieval.cli import main

    monkeypatch.setenv("RETRIEVAL_DATA_DIR", str(rt.settings.data_dir))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    f = tmp_path / "m.jsonl"
    _write(f, LINES[:1])

    async def lose_the_server(*args, **kwargs):
        raise asyncpg.ConnectionDoesNotExistError("connection was closed in the middle")

    monkeypatch.setattr(importer, "import_file", lose_the_server)
    assert main(["ingest", str(f), "--namespace", "cli-db-failure"]) == 2
    err = capsys.readouterr().err
    assert "the database failed during the import" in err and "rerun the same command" in err
    assert "Traceback" not in err


async def test_an_import_publishes_long_memories_with_their_passages(rt, ns, tmp_path):
    from retrieval.text.passages import split_passages
    from tests.rank.test_passages import LONG

    f = tmp_path / "long.jsonl"
    _write(f, [{"id": "doc", "content": LONG}, {"id": "note", "content": "短いメモ"}])
    await importer.import_file(
        rt, f, parse=parse_line, namespace=ns, workers=1, rebuild=bulk.Rebuild.ALWAYS
    )
    sql = """SELECT count(*) FROM memory_passages p JOIN memories m ON m.id = p.memory_id
             WHERE m.namespace = $1 AND m.external_id = $2"""
    assert await _count(rt, sql, ns, "doc") == len(split_passages(LONG))
    assert await _count(rt, sql, ns, "note") == 0
    assert await _count(rt, "SELECT count(*) FROM import_passages") == 0
    # The same file again keeps them (nothing embedded); a shorter text drops them.
    again = await importer.import_file(
        rt, f, parse=parse_line, namespace=ns, workers=1, rebuild=bulk.Rebuild.NEVER
    )
    assert again.embedded == 0 and await _count(rt, sql, ns, "doc") == len(split_passages(LONG))
    _write(f, [{"id": "doc", "content": "もう短い。"}])
    await importer.import_file(
        rt, f, parse=parse_line, namespace=ns, workers=1, rebuild=bulk.Rebuild.NEVER
    )
    assert await _count(rt, sql, ns, "doc") == 0
    resp = await rt.orchestrator.retrieve("もう短い", RetrievalOptions(namespace=ns, limit=3))
    assert resp.results[0].id == "doc"
