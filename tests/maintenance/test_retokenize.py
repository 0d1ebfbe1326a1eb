"""A store indexed by an older tokenizer is told so at start and re-tokenized by a command that
resumes where it stopped."""

import logging

from db import pass_terms as db_terms
from retrieval.cli import main
from retrieval.ingest.memory_in import parse_items
from retrieval.maintenance.retokenize import outdated, retokenize
from retrieval.models import RetrievalOptions, Strategy
from retrieval.text.nlp import TOKENIZER_VERSION

TEXTS = [
    "Melanie painted a sunrise over the lake last year.",
    "Caroline is running a support group for artists.",
    "Paintings of the harbour hang in the hall.",
    "Moved to Kyoto this spring.",
]


async def _put(rt, ns):
    await rt.writer.write(
        parse_items([{"id": f"m{i}", "content": t} for i, t in enumerate(TEXTS)]), ns
    )


async def _keyword_ids(rt, ns, q):
    resp = await rt.orchestrator.retrieve(
        q, RetrievalOptions(namespace=ns, force_strategy=Strategy.KEYWORD_ONLY, expand=False)
    )
    return [r.id for r in resp.results]


async def _as_before_stemming(rt, ns):
    """The terms tokenizer 3 wrote: English words lower-cased with a plural fold, no stems;
    and no attribute read (before 8)."""
    async with rt.pool.acquire() as conn:
        for r in await conn.fetch("SELECT id, content FROM memories WHERE namespace = $1", ns):
            old = [w.strip(".").lower() for w in r["content"].split()]
            await conn.execute(
                db_terms.REPLACE_TERMS, [r["id"]], [" ".join(old)], [len(old)], [None]
            )
        await conn.execute(db_terms.SET_VALUE, db_terms.VERSION_KEY, "3")


async def test_an_old_store_is_told_and_retokenized(rt, ns, caplog):
    await _put(rt, ns)
    assert await outdated(rt.pool) is None
    assert set(await _keyword_ids(rt, ns, "paint")) == {"m0", "m2"}
    assert await _facts(rt, ns) == {"m0": "", "m1": "", "m2": "", "m3": "residence"}
    await _as_before_stemming(rt, ns)
    assert set((await _facts(rt, ns)).values()) == {None}
    try:
        assert "m0" not in await _keyword_ids(rt, ns, "paint")  # 'painted' was its own term
        why = await outdated(rt.pool)
        assert why is not None and "retokenize" in why and "tokenizer 3" in why
        done = await retokenize(rt.pool, rt.nlp, batch=2)
        assert done >= 3
    finally:
        await db_terms.finish(rt.pool, TOKENIZER_VERSION)
    assert set(await _keyword_ids(rt, ns, "paint")) == {"m0", "m2"}
    assert await outdated(rt.pool) is None
    assert await _facts(rt, ns) == {"m0": "", "m1": "", "m2": "", "m3": "residence"}


async def _facts(rt, ns):
    async with rt.pool.acquire() as conn:
        rows = await conn.fetch("SELECT external_id, fact FROM memories WHERE namespace = $1", ns)
    return {r["external_id"]: r["fact"] for r in rows}


async def test_a_stopped_run_resumes_past_what_it_did(rt, ns):
    await _put(rt, ns)
    await _as_before_stemming(rt, ns)
    async with rt.pool.acquire() as conn:
        ids = [
            r["id"]
            for r in await conn.fetch(
                "SELECT id FROM memories WHERE namespace = $1 ORDER BY id", ns
            )
        ]
        # A run stopped after the first memory of this namespace (and every namespace before).
        await conn.execute(db_terms.SET_VALUE, db_terms.PROGRESS_KEY, f"{ns}\t{ids[0]}")
    try:
        assert "retokenize" in (await outdated(rt.pool) or "")
        await retokenize(rt.pool, rt.nlp)
        async with rt.pool.acquire() as conn:
            tokens = {
                r["id"]: r["search_tokens"]
                for r in await conn.fetch(
                    "SELECT id, search_tokens FROM memories WHERE namespace = $1", ns
                )
            }
            assert await conn.fetchval(db_terms.GET_VALUE, db_terms.PROGRESS_KEY) is None
    finally:
        await db_terms.finish(rt.pool, TOKENIZER_VERSION)
    assert "painted" in tokens[ids[0]].split()  # before where it resumed: left as it was
    assert "paint" in tokens[ids[2]].split() and "run" in tokens[ids[1]].split()


def test_the_command_and_the_start_warning(rt, monkeypatch, capsys, caplog):
    monkeypatch.setenv("RETRIEVAL_DATA_DIR", str(rt.settings.data_dir))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert main(["retokenize", "--batch", "1000"]) == 0
    assert "re-tokenized; the store's terms are current" in capsys.readouterr().out
    with caplog.at_level(logging.WARNING):
        assert main(["migrate"]) == 0
    assert "retokenize" not in caplog.text
