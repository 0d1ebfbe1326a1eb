"""An upgrade as the cluster runs it (docs/deploy.md, "Upgrades"), on the real database: the
previous release writes a store and serves it; this release's migrations run as the migration
Job runs them (`retrieval migrate`) while the previous release still serves; then this release
starts as its pods do (RETRIEVAL_MIGRATE_AT_START=false) and gives the same answers.

The previous release is the project as it was before its newest migration was added (its
package from git: the `retrieval` and `db` packages and the light client), so the upgrade
always crosses at least one migration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo

import asyncpg
import httpx
import pytest

from db import migrate as migrations
from retrieval.analysis.time.events import EVENT_READER_VERSION, read_event, told_by_its_kind
from retrieval.ingest.recipe import memory_text
from retrieval.settings import Settings
from tests.helpers import ROOT, running_server

# Memories that tell of other days than their own (migration 0021 reads their events).
TOLD = [
    {"id": "told-kitten", "content": "On Saturday we adopted a grey kitten called Miso.",
     "created_at": "2026-02-16T09:00:00+00:00", "memory_type": "episodic",
     "source_type": "conversation"},
    {"id": "told-tooth", "content": "昨日、歯医者で親知らずを抜いた。",
     "created_at": "2026-04-22T07:30:00+09:00", "memory_type": "episodic",
     "source_type": "conversation"},
    {"id": "told-oslo", "content": "Flying to Oslo on Friday for my cousin's birthday.",
     "created_at": "2026-09-07T07:00:00+00:00", "memory_type": "episodic",
     "source_type": "conversation"},
]  # fmt: skip

QUESTIONS = (
    "カレーの隠し味は何グラム入れた？",
    "高尾山で何キロ歩いた？",
    "Which book did I finish reading?",
    "日本語でキーワード検索が0件になった原因は？",
    "トークン上限はいくつに設定した？",
)


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)


def _previous_release(into: Path) -> tuple[str, Path]:
    """The commit before the newest migration was added, checked out (its packages only) into
    a folder; the commit and the folder."""
    newest = migrations.load_migrations()[-1]
    path = f"db/migrations/{newest.version:04d}_{newest.name}.sql"
    added = _git("log", "--diff-filter=A", "--format=%H", "-1", "--", path).stdout.strip()
    if not added or _git("cat-file", "-e", f"{added}^").returncode != 0:
        pytest.skip("the repository's history is not here (a shallow clone or an archive)")
    previous = f"{added}^"
    tree = into / "previous"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "archive", previous, "retrieval", "db", "clients/python/retrieval_client"],
        cwd=ROOT, capture_output=True, check=True,
    )  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    # Imported first from its own folder: the `retrieval`, `db` and `retrieval_client` it had.
    (tree / "retrieval_client").symlink_to(tree / "clients" / "python" / "retrieval_client")
    return previous, tree


async def _fresh_database(dsn: str, name: str) -> str:
    """A new, empty database beside the tests' own; its DSN."""
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}"')  # a constant, not user input
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    return urlsplit(dsn)._replace(path=f"/{name}").geturl()


def _answers(url: str, ns: str) -> dict[str, list[str]]:
    out = {}
    for q in QUESTIONS:
        body = {"query": q, "namespace": ns, "options": {"limit": 5}}
        r = httpx.post(f"{url}/v1/retrieve", json=body, timeout=60)
        assert r.status_code == 200, r.text
        out[q] = [x["id"] for x in r.json()["results"]]
    return out


def _listed(url: str, ns: str) -> list[dict]:
    r = httpx.get(f"{url}/v1/memories", params={"namespace": ns, "limit": 1000}, timeout=60)
    assert r.status_code == 200, r.text
    keep = ("id", "content", "title", "created_at", "memory_type", "source_type", "metadata")
    return [{k: m.get(k) for k in keep} for m in r.json()["memories"]]


def _retrieval(dsn: str, command: str) -> str:
    """This release's `retrieval COMMAND` on the store at dsn (the migration Job's way); its
    output."""
    out = subprocess.run(
        [sys.executable, "-m", "retrieval.cli", command],
        cwd=ROOT, env={**os.environ, "DATABASE_URL": dsn}, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def _migrate(dsn: str) -> str:
    """This release's `retrieval migrate`, as the migration Job runs it."""
    return _retrieval(dsn, "migrate")


async def test_the_previous_releases_store_is_served_the_same_after_the_jobs_migrations(
    rt, tmp_path
):
    previous, tree = _previous_release(tmp_path)
    newest = migrations.load_migrations()[-1].version
    old_versions = sorted(int(p.name[:4]) for p in (tree / "db" / "migrations").glob("*.sql"))
    assert old_versions[-1] < newest, (previous, old_versions[-1], newest)
    dsn = await _fresh_database(rt.dsn, f"upgrade_{os.getpid()}")
    ns = f"up-{uuid.uuid4().hex[:8]}"
    sample = (ROOT / "retrieval" / "data" / "sample_memories.jsonl").read_text("utf-8")
    memories = [json.loads(line) for line in sample.splitlines() if line.strip()] + TOLD
    old_env = {"PYTHONPATH": str(tree)}
    # The previous release, migrating at its start as it did, writes and answers.
    with running_server(dsn, env=old_env, cwd=tree, ready_s=120) as old_url:
        r = httpx.post(
            f"{old_url}/v1/memories", json={"namespace": ns, "memories": memories}, timeout=300
        )
        assert r.status_code == 200, r.text
        before, listed = _answers(old_url, ns), _listed(old_url, ns)
        assert len(listed) == len(memories) and all(before.values())
        # The Job of this release, while the previous one still serves (the rollout's overlap).
        said = _migrate(dsn)
        assert f"{newest}" in said and "applied" in said, said
        assert _answers(old_url, ns) == before  # the previous release serves the migrated store
    # This release's pods: they migrate nothing, and answer as the previous release did.
    with running_server(dsn, env={"RETRIEVAL_MIGRATE_AT_START": "false"}, ready_s=120) as url:
        assert _answers(url, ns) == before
        assert _listed(url, ns) == listed
    # The Job applied again (the same release re-applied): nothing left to do.
    assert "up to date" in _migrate(dsn)
    await _events_read(dsn, ns, memories)


async def _events_read(dsn: str, ns: str, memories: list[dict]) -> None:
    """Migration 0021 forward: the memories the previous release wrote get their events by a
    re-read (the service's own at start, or `retrieval read-events`), every memory kept, no
    vector touched."""
    conn = await asyncpg.connect(dsn)
    try:
        vectors = dict(await conn.fetch(
            "SELECT external_id, embedding::text FROM memories WHERE namespace = $1", ns
        ))  # fmt: skip
        assert "every memory is read" in _retrieval(dsn, "read-events")
        rows = await conn.fetch(
            "SELECT external_id, title, content, created_at, event_time, event_read, memory_type,"
            " source_type,"
            " embedding::text AS v FROM memories WHERE namespace = $1",
            ns,
        )
    finally:
        await conn.close()
    assert len(rows) == len(memories)
    assert all(r["event_read"] == EVENT_READER_VERSION for r in rows)
    assert {r["external_id"]: r["v"] for r in rows} == vectors
    zone = ZoneInfo(Settings().timezone)
    placed = 0
    for r in rows:
        at = r["created_at"].astimezone(zone)
        personal = told_by_its_kind(r["memory_type"], r["source_type"])
        want = read_event(memory_text(r["title"], r["content"]), at, personal=personal)
        got = r["event_time"]
        assert (got is None) == (want is None), r["content"]
        if want is not None:
            placed += 1
            assert (got.lower, got.upper) == (want.start, want.end), r["content"]
    assert placed >= len(TOLD)
