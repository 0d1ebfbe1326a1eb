"""The turns around a result: what a context assembler wants from a hit's neighbours, returned
with the hit (sentence-window retrieval) instead of as results that compete with it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime

import asyncpg

from retrieval.models import Neighbour

_LIVE = """x.namespace = $1 AND NOT x.is_archived AND x.searchable
      AND (x.expires_at IS NULL OR x.expires_at > now())
      AND ($4::timestamptz IS NULL OR x.created_at < $4)"""
_CTX_COLS = "x.id, x.external_id, x.content, x.title, x.memory_type, x.created_at"

# Returns, for each memory of $2 (ids), up to $3 live memories written before $4 (null: any) on
# each side of it: in its thread
# by time (ties by id), or, for a memory in no thread, along its reply chain (what it replies to,
# and that one's, ...; the replies to it, and theirs, ..., the nearest first). `pos` is -1, -2,
# ... before it and 1, 2, ... after it (in a chain: how many replies away).
NEIGHBOURS_SQL = f"""
WITH RECURSIVE r AS (
  SELECT m.id, m.external_id, m.thread, m.created_at FROM memories m
  WHERE m.namespace = $1 AND m.id = ANY($2::bigint[])),
up(for_id, ext, step) AS (
  SELECT r.id, l.to_external, 1 FROM r
  JOIN memory_links l ON l.namespace = $1 AND l.from_external = r.external_id AND l.label = 'reply_to'
  WHERE r.thread IS NULL
  UNION ALL
  SELECT up.for_id, l.to_external, up.step + 1 FROM up
  JOIN memory_links l ON l.namespace = $1 AND l.from_external = up.ext AND l.label = 'reply_to'
  WHERE up.step < $3),
down(for_id, ext, step) AS (
  SELECT r.id, l.from_external, 1 FROM r
  JOIN memory_links l ON l.namespace = $1 AND l.to_external = r.external_id AND l.label = 'reply_to'
  WHERE r.thread IS NULL
  UNION ALL
  SELECT down.for_id, l.from_external, down.step + 1 FROM down
  JOIN memory_links l ON l.namespace = $1 AND l.to_external = down.ext AND l.label = 'reply_to'
  WHERE down.step < $3),
chain AS (
  SELECT DISTINCT ON (c.for_id, x.id) c.for_id, {_CTX_COLS}, c.pos FROM (
    SELECT for_id, ext, -step AS pos FROM up UNION ALL SELECT for_id, ext, step FROM down) AS c
  JOIN memories x ON x.namespace = $1 AND x.external_id = c.ext
  WHERE {_LIVE} AND x.id <> c.for_id
  ORDER BY c.for_id, x.id, abs(c.pos))
SELECT r.id AS for_id, b.* FROM r CROSS JOIN LATERAL (
  SELECT * FROM (
    SELECT {_CTX_COLS}, -row_number() OVER (ORDER BY x.created_at DESC, x.id DESC) AS pos
    FROM memories x
    WHERE {_LIVE} AND x.thread = r.thread AND (x.created_at, x.id) < (r.created_at, r.id)
    ORDER BY x.created_at DESC, x.id DESC LIMIT $3) AS before
  UNION ALL
  SELECT * FROM (
    SELECT {_CTX_COLS}, row_number() OVER (ORDER BY x.created_at, x.id) AS pos
    FROM memories x
    WHERE {_LIVE} AND x.thread = r.thread AND (x.created_at, x.id) > (r.created_at, r.id)
    ORDER BY x.created_at, x.id LIMIT $3) AS after) AS b
WHERE r.thread IS NOT NULL
UNION ALL
SELECT for_id, id, external_id, content, title, memory_type, created_at, pos FROM (
  SELECT chain.*, row_number() OVER (
    PARTITION BY for_id, sign(pos) ORDER BY abs(pos), created_at, id) AS k
  FROM chain) AS c
WHERE c.k <= $3"""


async def surrounding(
    conn: asyncpg.Connection,
    namespace: str,
    ids: Sequence[int],
    per_side: int,
    *,
    timeout: float,
    before: datetime | None = None,
) -> dict[int, list[Neighbour]]:
    """Per memory id, the live memories around it (at most `per_side` on each side) written
    before `before` (None: any), in order."""
    if per_side <= 0 or not ids:
        return {}
    rows = await conn.fetch(NEIGHBOURS_SQL, namespace, list(ids), per_side, before, timeout=timeout)
    out: dict[int, list[Neighbour]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: (r["for_id"], r["pos"], r["created_at"])):
        out[r["for_id"]].append(
            Neighbour(
                id=r["external_id"],
                content=r["content"],
                title=r["title"],
                memory_type=r["memory_type"],
                created_at=r["created_at"],
                position=int(r["pos"]),
            )
        )
    return dict(out)


__all__ = ["NEIGHBOURS_SQL", "surrounding"]
