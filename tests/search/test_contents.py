"""Long contents by reference (retrieval.search.contents), on the real PostgreSQL: a leg's statement
leaves a long content out, the cache or one fetch puts it back, and a changed, deleted or
foreign row is never answered from what was read before."""

from retrieval.models import Source
from retrieval.search.contents import INLINE_BYTES, Contents, columns
from retrieval.search.keyword import keyword
from retrieval.search.run import candidates
from tests.helpers import ingest_items, leg_context

LONG = "札幌の時計台は1878年に演武場として建てられた。鐘は今も時を告げている。\n" * 80
# The same length in bytes: only the row's version tells the two apart.
CHANGED = LONG.replace("1878", "1879")
SHORT = "札幌の時計台の近くで昼食をとった"
QUERY = "札幌の時計台はいつ建てられた"


async def _row(rt, ns, ext):
    """The memory's row as a leg's statement returns it."""
    async with rt.pool.acquire() as conn:
        return await conn.fetchrow(
            f"SELECT m.id, {columns('m')} FROM memories m WHERE m.namespace = $1 AND m.external_id = $2",
            ns,
            ext,
        )


async def test_a_long_content_leaves_the_database_once_and_comes_back_whole(rt, ns):
    await ingest_items(rt, ns, [{"id": "long", "content": LONG}, {"id": "short", "content": SHORT}])
    assert len(LONG.encode()) > INLINE_BYTES >= len(SHORT.encode())
    row = await _row(rt, ns, "long")
    assert row["content"] is None and row["content_bytes"] == len(LONG.encode())
    assert (await _row(rt, ns, "short"))["content"] == SHORT

    contents = Contents()
    ctx = leg_context(rt, ns, QUERY, contents=contents)
    first = {c.external_id: c.content for c in await keyword(*ctx)}
    assert first == {"long": LONG, "short": SHORT}
    # The long one was fetched and kept; the short one came with its row.
    assert (contents.cache.misses, contents.cache.hits, len(contents.cache)) == (1, 0, 1)
    again = {c.external_id: c.content for c in await keyword(*ctx)}
    assert again == first
    assert (contents.cache.misses, contents.cache.hits) == (1, 1)


async def test_a_changed_memory_is_read_anew(rt, ns):
    """The cache is keyed by the row's version: an update is never answered from before."""
    await ingest_items(rt, ns, [{"id": "long", "content": LONG}])
    ctx = leg_context(rt, ns, QUERY, contents=Contents())
    assert [c.content for c in await keyword(*ctx)] == [LONG]
    await ingest_items(rt, ns, [{"id": "long", "content": CHANGED}])
    assert [c.content for c in await keyword(*ctx)] == [CHANGED]


async def test_a_reference_reads_only_its_namespace_and_rows_that_still_exist(rt, ns):
    other = ns + "-b"
    await ingest_items(rt, ns, [{"id": "long", "content": LONG}])
    await ingest_items(rt, other, [{"id": "theirs", "content": CHANGED}])
    mine, theirs = await _row(rt, ns, "long"), await _row(rt, other, "theirs")
    contents = Contents()
    ctx = leg_context(rt, ns, QUERY, contents=contents)
    async with rt.pool.acquire() as conn:
        # Another namespace's row id, asked for in this one: nothing.
        assert await contents.of(conn, ns, [theirs]) == [None]
        await conn.execute("DELETE FROM memories WHERE id = $1", mine["id"])
        # Deleted after the leg read its row: left out, not failed.
        assert await contents.of(conn, ns, [mine]) == [None]
        assert await candidates(ctx[0], conn, [mine], Source.KEYWORD) == []


async def test_a_long_seed_is_read_once_not_on_each_of_its_hops_rows(rt, ns):
    """A thread's rows each carried the seed's whole text: a long seed with 200 thread mates
    moved 200 copies of it. Now the seed's text comes by reference, fetched once."""
    from retrieval.search.hops import THREAD_SQL, _hop_rows

    mates = [
        {"id": f"m{i}", "content": f"時計台の見学メモ{i}", "thread": "visit"} for i in range(6)
    ]
    await ingest_items(rt, ns, [{"id": "long", "content": LONG, "thread": "visit"}, *mates])
    contents = Contents()
    ctx = leg_context(rt, ns, QUERY, contents=contents, seeds=(("long", 1.0),))
    got = await _hop_rows(ctx[0], ctx[1].seeds, THREAD_SQL, Source.THREAD)
    assert sorted(c.external_id for _, c, _ in got) == [f"m{i}" for i in range(6)]
    assert all(r["seed_content"] is None and text == LONG for r, _, text in got)
    assert len(contents.cache) == 1  # the seed, fetched once for its six rows
