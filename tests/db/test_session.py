"""db.session's BEGIN with its SET LOCAL settings: one statement, plain words only."""

from __future__ import annotations

import asyncpg
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


async def test_a_read_session_is_given_back_without_a_reset_and_every_other_with_one(rt):
    """A read-only transaction that ended in ROLLBACK leaves nothing on its connection, so the
    pool skips its reset round trip (db.pool.PooledConnection); a session without a
    transaction, one that wrote, and one that failed are reset as before. One connection, so
    each session sees what the one before left."""
    from db.pool import create_pool

    pool = await create_pool(rt.settings.dsn(), min_size=1, max_size=1)
    resets = 0
    plain = asyncpg.Connection.get_reset_query

    def counted(self: asyncpg.Connection) -> str:
        nonlocal resets
        resets += 1
        return plain(self)

    try:
        asyncpg.Connection.get_reset_query = counted  # type: ignore[method-assign]
        # A read: a session-level SET inside it is rolled back with it, and no reset ran.
        async with session(pool, 5.0, transaction="read") as c:
            await c.execute("SET application_name = 'left-behind'")
        assert resets == 0
        async with session(pool, 5.0) as c:
            assert await c.fetchval("SHOW application_name") != "left-behind"
            await c.execute("SET application_name = 'left-behind'")
        assert resets == 1  # no transaction: the SET stays unless the pool resets
        async with session(pool, 5.0, transaction="read") as c:
            assert await c.fetchval("SHOW application_name") != "left-behind"
        assert resets == 1
        with pytest.raises(asyncpg.exceptions.UndefinedTableError):
            async with session(pool, 5.0, transaction="read") as c:
                await c.fetchval("SELECT 1 FROM no_such_table")
        assert resets == 2  # a read that failed is reset
        async with session(pool, 5.0, transaction="write") as c:
            await c.execute("SET application_name = 'committed'")
        assert resets == 3
        async with pool.acquire() as c:
            assert await c.fetchval("SHOW application_name") != "committed"
        assert resets == 4
    finally:
        asyncpg.Connection.get_reset_query = plain  # type: ignore[method-assign]
        await pool.close()
