"""Legs that do not rank by similarity to the query: the newest memories, the newest states."""

from __future__ import annotations

from retrieval.models import Candidate, Source
from retrieval.search.run import COLS, WHERE, Given, SearchRun, found, leg_connection

# --- Sources that do not rank by similarity to the query. ---

# Returns the newest live memories ($6 of them; $7: memory type, or NULL for any), newest first,
# scored by their time (seconds since the epoch), over the (namespace, created_at) index.
NEWEST_SQL = f"""
SELECT {COLS}, extract(epoch FROM m.created_at)::float8 AS score
FROM memories m WHERE {WHERE} AND ($7::text IS NULL OR m.memory_type = $7)
ORDER BY m.created_at DESC LIMIT $6"""

# A state (「住所は横浜」) is confirmed by a newer one saying the same or replaced by one saying
# otherwise; the newest state of a thing is the one to believe.
STATE_TYPE = "state"


async def recent(run: SearchRun, given: Given) -> list[Candidate]:
    """The newest memories, whatever they say: what just happened belongs in the context."""
    async with leg_connection(run) as conn:
        rows = await conn.fetch(NEWEST_SQL, *run.where_args(), run.k, None, timeout=run.timeout_s)
        return await found(run, conn, rows, Source.RECENT)


async def states(run: SearchRun, given: Given) -> list[Candidate]:
    """The newest memories of type `state` (where the user lives, what they use now)."""
    async with leg_connection(run) as conn:
        rows = await conn.fetch(
            NEWEST_SQL, *run.where_args(), run.k, STATE_TYPE, timeout=run.timeout_s
        )
        return await found(run, conn, rows, Source.STATES)
