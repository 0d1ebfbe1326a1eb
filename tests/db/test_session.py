"""db.session's BEGIN with its SET LOCAL settings: one statement, plain words only."""

from __future__ import annotations

import pytest

from db.session import begin, session


def test_begin_sets_the_transactions_settings_in_one_statement():
    assert begin("read", {}) == "BEGIN READ ONLY"
    assert begin("read", {"statement_timeout": 250, "plan_cache_mode": "force_custom_plan"}) == (
        "BEGIN READ ONLY; SET LOCAL statement_timeout = '250'; "
        "SET LOCAL plan_cache_mode = 'force_custom_plan'"
    )
    assert begin("write", {"hnsw.ef_search": 40}) == "BEGIN; SET LOCAL hnsw.ef_search = '40'"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("statement_timeout", "1'; DROP TABLE memories; --"),
        ("statement_timeout", "10 s"),
        ("statement_timeout = 1; SELECT 1", 1),
        ("Statement-Timeout", 1),
        ("plan_cache_mode", ""),
    ],
)
def test_begin_refuses_anything_but_a_plain_name_and_word(name, value):
    with pytest.raises(ValueError, match="not a plain setting"):
        begin("read", {name: value})


async def test_settings_need_a_transaction_and_last_only_for_it(rt):
    with pytest.raises(ValueError, match="needs a transaction"):
        async with session(rt.pool, 5.0, local={"statement_timeout": 250}):
            pass
    async with session(rt.pool, 5.0, transaction="read", local={"statement_timeout": 250}) as c:
        assert await c.fetchval("SHOW statement_timeout") == "250ms"
    async with session(rt.pool, 5.0) as c:
        assert await c.fetchval("SHOW statement_timeout") == "30s"
