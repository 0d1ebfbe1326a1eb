"""The search legs on the real PostgreSQL: isolation, visibility rules, keyword and trigram
legs, exact small windows."""

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from retrieval.models import Strategy, TimeRange
from tests.helpers import ids_of as _ids
from tests.helpers import ingest_items as _ingest
from tests.helpers import leg_context as _leg_context


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
                # expired since it was written (the API refuses a past expires_at)
                "expires_at": (datetime.now(UTC) + timedelta(days=1)).isoformat(),
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
            "UPDATE memories SET expires_at = now() - interval '1 day' "
            "WHERE namespace = $1 AND external_id = 'expired'",
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


async def test_trigram_skips_names_common_in_the_namespace(rt, ns):
    """A regression: "BM25" is tokenised bm+25 in memories, so looking the raw name up in term_df
    found nothing and the trigram leg scanned every memory containing it (600 ms at 1M)."""
    from retrieval.search.names import trigram

    await _ingest(
        rt,
        ns,
        [{"id": f"c{i}", "content": f"キーワード検索のBM25を検証した{i}"} for i in range(25)]
        + [{"id": "rare", "content": "型番RTX-4090のGPUサーバーを借りた"}],
    )
    for query, expect in (("BM25の検証", []), ("RTX-4090のサーバー", ["rare"])):
        ctx = _leg_context(rt, ns, query)
        assert [c.external_id for c in await trigram(*ctx)] == expect, query


async def test_keyword_leg_reads_a_capped_number_of_postings_per_term(rt, ns, monkeypatch):
    """With the cap below a common term's document frequency, the memory with the rare term still
    ranks first (the rare term's postings are read whole); the common term is read only up to
    the cap, so its share of a score may be missing, never added."""
    from retrieval.search import keyword as leg

    await _ingest(
        rt,
        ns,
        [{"id": f"c{i}", "content": f"今日は天気の話をした{i}"} for i in range(12)]
        + [{"id": "rare", "content": "天気と量子コンピュータの話"}],
    )
    run, given = _leg_context(rt, ns, "量子コンピュータと天気", k=20)
    all_rows = await leg.keyword(run, given)
    monkeypatch.setattr(leg, "POSTINGS_PER_TERM", 3)
    few = await leg.keyword(run, given)
    async with rt.pool.acquire() as conn:
        terms = await leg.query_terms(run, conn)
    assert all_rows[0].external_id == few[0].external_id == "rare"
    assert 0 < few[0].score <= all_rows[0].score + 1e-9
    assert len(all_rows) == 13 and len(few) <= 1 + 3 * len(terms)


async def test_keyword_statement_without_name_groups_scores_as_the_grouped_one(rt, ns):
    """Terms that share no group (no name written several ways) are scored by the statement
    with one aggregation; the grouped statement, each term a group of its own, gives the same
    memories in the same order with the same scores."""
    from retrieval.search import keyword as leg

    await _ingest(
        rt,
        ns,
        [{"id": f"c{i}", "content": f"今日は天気の話をした{i}"} for i in range(6)]
        + [
            {"id": "rare", "content": "天気と量子コンピュータの話"},
            {"id": "qc", "content": "量子コンピュータの論文を読んだ"},
            {"id": "qc2", "content": "量子の話を天気の後にした"},
        ],
    )
    run, _ = _leg_context(rt, ns, "量子コンピュータと天気の話", k=20)
    async with rt.pool.acquire() as conn:
        stats = await leg.query_terms(run, conn)
        args = leg.bm25_args(run, stats)
        one = await conn.fetch(leg.KEYWORD_SQL_UNGROUPED, *args)
        each = await conn.fetch(leg.KEYWORD_SQL, *args, list(range(len(stats))))
    assert len(stats) >= 3 and len(one) == 9
    assert [r["external_id"] for r in one] == [r["external_id"] for r in each]
    assert [r["score"] for r in one] == pytest.approx([r["score"] for r in each])


async def test_trigram_leg_uses_the_trigram_index(rt, ns):
    """An OR of ILIKEs was planned as a scan of every memory (715 ms on 13.4k passages)."""
    from retrieval.search.names import TRIGRAM_SQL

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
                [],
                [],
                [],
                "%ボロベン%",
                "%コーヒー%",
            )
        )
    # Each branch is confined to the namespace, through the trigram index alone: not the
    # namespace's btree, which would match the pattern against every memory of it. (With one
    # memory in the namespace the planner may read it by that btree for the join to the
    # matches: what matters is that the pattern is matched nowhere but in the trigram index.)
    assert "Seq Scan on memories" not in plan
    assert plan.count("Bitmap Index Scan on idx_memories_content_trgm") == 2, plan
    matched = [line.strip() for line in plan.splitlines() if "~~*" in line]
    assert len(matched) == 4, plan  # each branch's index condition and its recheck
    assert all(line.startswith(("Index Cond:", "Recheck Cond:")) for line in matched), plan


async def test_trigram_names_count_by_rarity_not_length(rt, ns):
    """A full name held by one memory outweighs a longer katakana word held by many: the
    person asked about, not the template the question shares with other meetings."""
    from retrieval.search.names import trigram

    items = [{"id": "kimura", "content": "千葉で木村翔太さんに会って、案件を進めることになった。"}]
    items += [
        {"id": f"p{i}", "content": f"同僚{i}さんと新しいプロジェクトの打ち合わせをした。"}
        for i in range(6)
    ]
    await _ingest(rt, ns, items)
    q = "木村翔太さんと打ち合わせしたプロジェクト"
    got = await trigram(*_leg_context(rt, ns, q))
    assert got[0].external_id == "kimura" and got[0].score > 0.5, [
        (c.external_id, c.score) for c in got
    ]


async def test_small_windows_are_searched_exactly(rt, ns, monkeypatch):
    """A window of few memories gets exact distances (HNSW walks most of the graph to find a
    handful in-window); a larger one the index. Both return the in-window memories nearest the
    query, best first."""
    import retrieval.search.vector as src
    from retrieval.models import TimeRange

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
    chosen: list[str] = []

    def window_sql(n: int) -> str:
        chosen.append(sql := decide(n))
        return sql

    decide = src.window_sql
    monkeypatch.setattr(src, "window_sql", window_sql)
    for limit, exact in ((5000, True), (3, False)):
        monkeypatch.setattr(src, "EXACT_WINDOW_MAX", limit)
        ctx = _leg_context(rt, ns, "ジム", k=5, vectors=[vec], window=window)
        got = [c.external_id for c in await src.temporal(*ctx)]
        assert (chosen[-1] == src.EXACT_WINDOW_SQL) is exact
        assert got == want_ids[:5], exact


async def test_the_keyword_leg_scores_at_most_the_rarest_32_terms(rt, ns):
    """Before: every distinct term of the query (up to 2,000 characters) read its postings."""
    from retrieval.search.keyword import MAX_QUERY_TERMS, keyword, query_terms

    words = [f"word{i:03d}x" for i in range(80)]
    common = [{"id": f"c{i}", "content": " ".join(words[:60])} for i in range(5)]
    rare = [{"id": "rare", "content": "the only one with " + " ".join(words[60:])}]
    await _ingest(rt, ns, common + rare)
    run, given = _leg_context(rt, ns, " ".join(words))
    assert len(run.intent.keywords) > MAX_QUERY_TERMS
    got = await keyword(run, given)
    assert got[0].external_id == "rare"  # its terms are the rarest: they are the ones kept
    async with rt.pool.acquire() as conn:
        assert len(await query_terms(run, conn)) == MAX_QUERY_TERMS


class _CountingPool:
    """A pool that records how many connections are held at once (taken the way db.session
    takes them: awaited, then released)."""

    def __init__(self, pool) -> None:
        self.pool, self.held, self.most = pool, 0, 0

    async def acquire(self, timeout=None):
        conn = await self.pool.acquire(timeout=timeout)
        self.held += 1
        self.most = max(self.most, self.held)
        return conn

    async def release(self, conn, timeout=None):
        self.held -= 1
        await self.pool.release(conn, timeout=timeout)


async def test_one_request_holds_at_most_its_connection_budget(rt, ns):
    """Before: a request held up to seven pooled connections at once (first wave, added
    sources, expansion)."""
    from retrieval.models import RetrievalOptions, Source
    from retrieval.orchestrator import Orchestrator

    await _ingest(
        rt,
        ns,
        [
            {"id": f"m{i}", "content": f"{i}: 来週の京都出張の打ち合わせメモ", "thread": "t"}
            for i in range(6)
        ],
    )
    for budget in (1, 4):
        pool = _CountingPool(rt.pool)
        orch = Orchestrator(
            pool,  # type: ignore[arg-type]
            rt.analyzer,
            rt.embedder,
            source_timeout_ms=5000,
            log_runs=False,
            max_request_connections=budget,
        )
        opts = RetrievalOptions(
            namespace=ns, add_sources=(Source.RECENT, Source.STATES, Source.VECTOR_GLOBAL)
        )
        resp = await orch.retrieve("先週の京都出張の打ち合わせ", opts)
        await orch.close()
        assert resp.results and not resp.metadata.degraded, resp.metadata.degraded
        assert 1 <= pool.most <= budget, (budget, pool.most)


async def test_a_naive_window_is_read_in_the_requests_time_zone(rt, ns):
    """A library caller's naive time_range, like its naive `now`, is in options.timezone: 9:30
    to 10:30 holds a memory of 10:00 in Tokyo, and not when the caller's clock is UTC."""
    await _ingest(
        rt, ns, [{"id": "jst", "content": "朝会のメモ", "created_at": "2026-01-01T10:00:00+09:00"}]
    )
    window = TimeRange(datetime(2026, 1, 1, 9, 30), datetime(2026, 1, 1, 10, 30))
    ids, resp = await _ids(rt, "朝会のメモ", ns, time_range=window, timezone="Asia/Tokyo")
    assert ids == ["jst"], resp.metadata.search_breakdown
    ids, _ = await _ids(rt, "朝会のメモ", ns, time_range=window, timezone="UTC")
    assert ids == []


async def _sleeping(rt) -> int:
    """How many of the test's pg_sleep statements still run (polled until none, at most ~2.5 s:
    the server ends a statement once asyncpg's cancel request reaches it)."""
    import asyncio

    for _ in range(50):
        async with rt.pool.acquire() as conn:
            n = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                "AND query = 'SELECT pg_sleep(30)'"
            )
        if not n:
            break
        await asyncio.sleep(0.05)
    return n


async def test_the_vector_legs_two_searches_fail_and_stop_together(rt, ns, monkeypatch):
    """The memories' graph and the passages' are searched at once, on two connections (#25).
    With a budget of one connection both still run (the memories' gives its connection back
    before waiting for the passages'). When one search fails, the other is stopped at once (a
    30 s statement is not waited for) and the leg fails with that error once both connections
    are back; a leg given up stops both."""
    import asyncio

    import asyncpg

    from retrieval.search import vector as sources
    from retrieval.search.run import leg_connection
    from tests.rank.test_passages import LONG

    await _ingest(rt, ns, [{"id": "long", "content": LONG}, {"id": "short", "content": "光合成"}])
    vec = np.asarray(rt.embedder.embed_query("光合成の仕組み"), np.float32)

    def context(slots: int):
        return _leg_context(
            rt, ns, "光合成の仕組み", vectors=[vec], timeout_s=60.0, slots=asyncio.Semaphore(slots)
        )

    found = await asyncio.wait_for(sources.vector(*context(1)), 20)
    long = next(c for c in found if c.external_id == "long")
    assert {c.external_id for c in found} == {"long", "short"} and long.passages

    started = asyncio.Event()

    async def sleeping(conn) -> None:
        started.set()
        await conn.execute("SELECT pg_sleep(30)")

    async def memory_sleeps(run, conn, vectors, source, args):
        await sleeping(conn)
        return {}

    async def passages_sleep(run, vectors, source, args, n):
        async with leg_connection(run) as conn:
            await sleeping(conn)
        return []

    async def memory_fails(run, conn, vectors, source, args):
        await started.wait()
        await asyncio.sleep(0.1)  # the other's statement is running
        raise asyncpg.QueryCanceledError("canceling statement due to statement timeout")

    async def passages_fail(run, vectors, source, args, n):
        await memory_fails(run, None, vectors, source, args)

    in_use = rt.pool.get_size() - rt.pool.get_idle_size()
    for memory_half, passage_half in (
        (memory_sleeps, passages_fail),
        (memory_fails, passages_sleep),
    ):
        started.clear()
        monkeypatch.setattr(sources, "_memory_knn", memory_half)
        monkeypatch.setattr(sources, "_passage_knn", passage_half)
        with pytest.raises(asyncpg.QueryCanceledError):
            await asyncio.wait_for(sources.vector(*context(4)), 20)
        assert await _sleeping(rt) == 0
        assert rt.pool.get_size() - rt.pool.get_idle_size() <= in_use
    monkeypatch.setattr(sources, "_memory_knn", memory_sleeps)
    monkeypatch.setattr(sources, "_passage_knn", passages_sleep)
    leg = asyncio.ensure_future(sources.vector(*context(4)))
    for _ in range(100):  # both statements run at once
        await asyncio.sleep(0.05)
        async with rt.pool.acquire() as conn:
            running = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)'"
            )
        if running == 2:
            break
    assert running == 2
    leg.cancel()
    await asyncio.gather(leg, return_exceptions=True)
    assert await _sleeping(rt) == 0
    assert rt.pool.get_size() - rt.pool.get_idle_size() <= in_use


async def test_leg_connection_plans_as_asked_for_its_transaction_only(rt, ns):
    """A hop or the context is planned once per connection (generic plan); every other leg at
    each execution, with its values; neither setting outlives the leg's transaction."""
    from retrieval.search.run import leg_connection

    run, _ = _leg_context(rt, ns, "x", timeout_s=0.25)
    show = "SELECT current_setting('plan_cache_mode'), current_setting('statement_timeout')"
    for generic, mode in ((True, "force_generic_plan"), (False, "force_custom_plan")):
        async with leg_connection(run, generic_plan=generic) as conn:
            assert tuple(await conn.fetchrow(show)) == (mode, "250ms")
    async with rt.pool.acquire() as conn:
        await conn.execute("SET plan_cache_mode = auto")  # a session's own, reset on release
    async with rt.pool.acquire() as conn:
        assert tuple(await conn.fetchrow(show)) == ("force_custom_plan", "30s")


async def test_legs_break_equal_scores_by_row_id(rt, ns):
    """Memories the keyword and trigram legs score alike come in row order, so which of them
    make the k does not depend on the plan the server chose."""
    from retrieval.search.keyword import keyword
    from retrieval.search.names import trigram

    # Twelve alike among 240: rare enough for the trigram leg to search the name (name_max_df),
    # and more than twice k, so that the server sorts them with a bounded heap (not stable).
    await _ingest(
        rt,
        ns,
        [{"id": f"same{i}", "content": "型番RTX-4090のGPUサーバーを借りた"} for i in range(12)]
        + [{"id": f"other{i}", "content": f"{i}番目の会議の議事録"} for i in range(228)],
    )
    async with rt.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT external_id FROM memories WHERE namespace = $1 AND external_id LIKE 'same%' "
            "ORDER BY id",
            ns,
        )
    by_id = [r["external_id"] for r in rows]
    ctx = _leg_context(rt, ns, "RTX-4090のGPUサーバー", k=3)
    for leg in (keyword, trigram):
        found = await leg(*ctx)
        assert len({c.score for c in found}) == 1, leg.__name__
        assert [c.external_id for c in found] == by_id[:3], leg.__name__
