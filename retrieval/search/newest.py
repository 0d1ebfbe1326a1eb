"""Legs that do not rank by similarity to the query: the newest memories, the newest states (or
the newest statements of the attribute a question about now asks for)."""

from __future__ import annotations

from retrieval.analysis.strategy import statement_asked
from retrieval.models import Candidate, Source
from retrieval.search.run import COLS, WHERE, Given, SearchRun, found, leg_connection

# --- Sources that do not rank by similarity to the query. ---

# Returns the newest live memories ($6 of them; $7: memory type, or NULL for any), newest first,
# scored by their time (seconds since the epoch), over the (namespace, created_at) index.
NEWEST_SQL = f"""
SELECT {COLS}, extract(epoch FROM m.created_at)::float8 AS score
FROM memories m WHERE {WHERE} AND ($7::text IS NULL OR m.memory_type = $7)
ORDER BY m.created_at DESC LIMIT $6"""

# Returns the newest live memories stating attribute $7 (retrieval.analysis.facts; $6 of them),
# newest first, scored by their time, over idx_memories_fact.
STATEMENTS_SQL = f"""
SELECT {COLS}, extract(epoch FROM m.created_at)::float8 AS score
FROM memories m WHERE {WHERE} AND m.fact = $7 AND m.fact <> ''
ORDER BY m.created_at DESC LIMIT $6"""

# A state (「住所は横浜」) is confirmed by a newer one saying the same or replaced by one saying
# otherwise; the newest state of a thing is the one to believe.
STATE_TYPE = "state"
# The newest statements of an attribute a question about now reads: the last few times it
# changed (rank.latest orders them).
STATEMENTS = 3


async def recent(run: SearchRun, given: Given) -> list[Candidate]:
    """The newest memories, whatever they say: what just happened belongs in the context."""
    async with leg_connection(run) as conn:
        rows = await conn.fetch(NEWEST_SQL, *run.where_args(), run.k, None, timeout=run.timeout_s)
        return await found(run, conn, rows, Source.RECENT)


async def states(run: SearchRun, given: Given) -> list[Candidate]:
    """The newest memories of type `state` (where the user lives, what they use now); for a
    question about now that asks for an attribute (retrieval.analysis.strategy.statement_asked:
    住まいはどこ？), the newest memories that state it, of any type."""
    asked = statement_asked(run.intent)
    sql, k, what = (
        (NEWEST_SQL, run.k, STATE_TYPE) if asked is None else (STATEMENTS_SQL, STATEMENTS, asked)
    )
    async with leg_connection(run) as conn:
        rows = await conn.fetch(sql, *run.where_args(), k, what, timeout=run.timeout_s)
        return await found(run, conn, rows, Source.STATES)
