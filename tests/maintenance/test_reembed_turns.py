"""`retrieval reembed-turns`: the turns of a store written before migration 0013 (each embedded
alone) get the vector a write makes now, resumably; other memories are not touched."""

import asyncio
import subprocess
import sys

import numpy as np
import pytest
from pgvector import Vector

from db import meta
from db import pass_turn_vectors as turn_vectors
from retrieval.maintenance.reembed_turns import reembed_turns
from tests.helpers import ingest_items as _ingest

TURNS = [
    {"id": "q", "content": "Where did you go last weekend?", "thread": "s",
     "created_at": "2026-01-10T10:00:00+00:00"},
    {"id": "a", "content": "To the lake, with my sister.", "thread": "s",
     "created_at": "2026-01-10T10:01:00+00:00"},
    {"id": "b", "content": "Loud, and wonderful.", "links": [{"to": "c", "label": "reply_to"}]},
    {"id": "c", "content": "How was the concert?"},
    {"id": "note", "content": "A note that follows nothing."},
]  # fmt: skip


async def _alone(rt, ns) -> dict[str, np.ndarray]:
    """Make every memory's vector its text embedded alone (as before migration 0013)."""
    async with rt.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT id, external_id, title, content FROM memories WHERE namespace = $1", ns
        )
        out = {}
        for r in rows:
            v = rt.embedder.embed_documents([r["content"]])[0]
            await conn.execute(
                "UPDATE memories SET embedding = $2 WHERE id = $1", r["id"], Vector(v)
            )
            out[r["external_id"]] = v
    return out


async def _stored(rt, ns, table="memories") -> dict[str, np.ndarray]:
    async with rt.pool.acquire() as conn:
        if table == "memories":
            sql = "SELECT external_id, embedding FROM memories WHERE namespace = $1"
        else:
            sql = (
                "SELECT m.external_id, v.embedding FROM memory_vectors v "
                "JOIN memories m ON m.id = v.memory_id WHERE v.namespace = $1"
            )
        rows = await conn.fetch(sql, ns)
    return {r["external_id"]: np.asarray(r["embedding"].to_numpy()) for r in rows}


async def test_stored_turns_are_embedded_in_context_and_a_stopped_run_resumes(rt, ns):
    await _ingest(rt, ns, TURNS)
    written = await _stored(rt, ns)  # what a write makes now
    alone = await _alone(rt, ns)
    assert not np.allclose(written["a"], alone["a"], atol=1e-2)

    seen: list[str] = []

    def stop_after_first(msg: str) -> None:
        seen.append(msg)
        raise KeyboardInterrupt  # the operator's Ctrl-C after the first batch

    with pytest.raises(KeyboardInterrupt):
        await reembed_turns(rt.pool, rt.embedder, namespace=ns, batch=1, log=stop_after_first)
    async with rt.pool.acquire() as conn:
        where, last = await meta.progress(conn, turn_vectors.PROGRESS_KEY)
    assert where == ns and last > 0

    n = await reembed_turns(rt.pool, rt.embedder, namespace=ns, batch=1)
    now = await _stored(rt, ns)
    copies = await _stored(rt, ns, "memory_vectors")
    for ext in ("a", "b"):  # each follows a turn: the vector a write makes
        assert np.allclose(now[ext], written[ext], atol=2e-3)
        assert np.allclose(copies[ext], now[ext], atol=1e-6)
    for ext in ("q", "c", "note"):  # nothing before them: untouched
        assert np.allclose(now[ext], alone[ext], atol=1e-6)
    # The two turns that follow one were embedded once, between the stopped run and this one.
    first = int(seen[0].split(": ")[1].split()[0])
    assert first + n == 2
    async with rt.pool.acquire() as conn:
        assert await meta.progress(conn, turn_vectors.PROGRESS_KEY) == ("", 0)


def test_the_command_says_a_database_failure_keeps_what_was_done_and_resumes(
    rt, ns, monkeypatch, capsys
):
    from retrieval.cli import main

    asyncio.run(_ingest_fresh(rt.settings, ns))
    monkeypatch.setenv("RETRIEVAL_DATA_DIR", str(rt.settings.data_dir))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    real = turn_vectors.replace_vectors
    calls = 0

    async def second_fails(*a, **k):
        nonlocal calls
        calls += 1
        if calls == 2:
            raise ConnectionError("connection reset by peer")
        return await real(*a, **k)

    monkeypatch.setattr(turn_vectors, "replace_vectors", second_fails)
    assert main(["reembed-turns", "--namespace", ns, "--batch", "1"]) == 2
    err = capsys.readouterr().err
    assert "the database failed (ConnectionError: connection reset by peer)" in err
    assert "run `retrieval reembed-turns` again to resume" in err and "Traceback" not in err
    monkeypatch.setattr(turn_vectors, "replace_vectors", real)
    assert main(["reembed-turns", "--namespace", ns, "--batch", "1"]) == 0
    assert "conversation turns embedded in context" in capsys.readouterr().out


async def _ingest_fresh(settings, ns):
    """TURNS written through a runtime of its own (the test's loop is not the fixture's)."""
    from retrieval.ingest.memory_in import parse_items
    from retrieval.runtime import open_runtime

    rt = await open_runtime(settings)
    try:
        await rt.writer.write(parse_items(TURNS), ns)
    finally:
        await rt.close()


def test_the_command_refuses_a_bad_namespace_by_name():
    out = subprocess.run(
        [sys.executable, "-m", "retrieval.cli", "reembed-turns", "--namespace", "bad ns"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2 and "--namespace: 'bad ns'" in out.stderr
