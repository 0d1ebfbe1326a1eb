"""`retrieval export` -> `retrieval ingest` into a fresh namespace gives the same memories back,
field by field, and the same answers to the dev questions; `list`, `erase` and `purge` from the
command line."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from retrieval.cli import BY_NAME, build_parser, main
from retrieval.models import RetrievalOptions
from retrieval.settings import Settings
from tests.helpers import shared_file

# The first turns of one LoCoMo conversation, and the questions their turns answer.
TURNS = 150


def _locomo(tmp_path):
    mem = shared_file("eval", "locomo_dev", "memories.jsonl")
    if not mem.exists():
        pytest.skip("../shared/eval is not beside the repository")
    turns = []
    with open(mem, encoding="utf-8") as f:
        for line in f:
            m = json.loads(line)
            if m["namespace"] == "locomo-conv-26":
                turns.append({k: v for k, v in m.items() if k != "namespace"})
            if len(turns) == TURNS:
                break
    ids = {t["id"] for t in turns}
    with open(shared_file("eval", "locomo_dev", "queries.jsonl"), encoding="utf-8") as f:
        asks = [q for q in map(json.loads, f) if q["namespace"] == "locomo-conv-26"]
    asks = [q for q in asks if set(q["relevant"]) <= ids][:24]
    path = tmp_path / "turns.jsonl"
    path.write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in turns), "utf-8")
    return path, asks


def _lines(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text("utf-8").splitlines()]


async def test_an_export_imported_into_a_fresh_namespace_is_the_same_store(env, tmp_path):
    rt = env
    source, asks = _locomo(tmp_path)
    assert len(asks) >= 5
    a, b = (f"x-{uuid.uuid4().hex[:10]}" for _ in range(2))
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for argv in (
        ["ingest", str(source), "--namespace", a],
        ["export", "--namespace", a, "-o", str(first)],
        ["ingest", str(first), "--namespace", b],
        ["export", "--namespace", b, "-o", str(second)],
    ):  # each command runs its own event loop, on a thread of its own
        args = build_parser().parse_args(argv)
        assert await asyncio.to_thread(BY_NAME[args.command].run, Settings(), args) == 0
    exported, again = _lines(first), _lines(second)
    assert len(exported) == TURNS
    assert exported == again  # ids, texts, times, kinds, metadata, thread, links, expiry
    by_id = {m["id"]: m for m in exported}
    original = {m["id"]: m for m in _lines(source)}
    for x, m in original.items():
        e = by_id[x]
        for k in ("content", "thread", "links", "memory_type", "source_type"):
            assert e.get(k) == m.get(k), (x, k)
        assert e["created_at"][:19] == m["created_at"][:19].replace("Z", "")

    async def answers(ns: str) -> list[list[tuple[str, float]]]:
        out = []
        for q in asks:
            opts = RetrievalOptions(namespace=ns, log_run=False, now=None)
            got = await rt.orchestrator.retrieve(q["query"], opts)
            out.append([(r.id, round(r.score, 6)) for r in got.results])
        return out

    assert await answers(a) == await answers(b)


def test_list_erase_and_purge_from_the_command_line(env, tmp_path, capsys):
    ns = f"c-{uuid.uuid4().hex[:10]}"
    f = tmp_path / "m.jsonl"
    f.write_text(
        "".join(json.dumps({"id": f"k{i}", "content": f"メモ {i}"}) + "\n" for i in range(5)),
        "utf-8",
    )
    assert main(["ingest", str(f), "--namespace", ns]) == 0
    capsys.readouterr()
    assert main(["list", "--namespace", ns, "--limit", "2"]) == 0
    out = capsys.readouterr()
    assert [json.loads(x)["id"] for x in out.out.splitlines()] == ["k0", "k1"]
    cursor = out.err.split("next: ", 1)[1].strip()
    assert main(["list", "--namespace", ns, "--limit", "2", "--cursor", cursor]) == 0
    assert [json.loads(x)["id"] for x in capsys.readouterr().out.splitlines()] == ["k2", "k3"]
    assert main(["list", "--namespace", ns, "--cursor", "garbage"]) == 2
    assert "cursor" in capsys.readouterr().err
    assert main(["erase", "--namespace", ns, "k0", "nope"]) == 0
    out = capsys.readouterr()
    assert "erased 1 memories" in out.out and "nope" in out.err
    assert main(["purge", "--namespace", ns]) == 0
    assert "done, 4 of 4 memories erased, vacuumed: yes" in capsys.readouterr().out
    assert main(["export", "--namespace", ns]) == 0
    assert capsys.readouterr().out == ""
