"""Long contents by reference: a search leg does not move a long memory's whole text.

Every leg returns up to k memories, and on the long-memory set (articles of 4,753 characters
median, up to 38,037) the legs of one request moved ~950,000 characters from the server — the
same articles again and again (the vector, passage and keyword legs find mostly the same ones),
decoded each time, for a reranker that reads a few passages of each. Replaying the statements
of 100 longdoc requests on one connection (docs/benchmarks-log.md, "contents by reference"): 20.7
ms a request with the contents, 13.4 without.

So a leg's statement returns a content of at most INLINE_BYTES as it is and a longer one by
reference (NULL, with the row's version); the text comes from this cache, keyed by the row
(its id, its version — `xmin`, which every update of the row changes — and its length in
bytes), and the ones not held are fetched in one statement on the leg's connection. A long
memory read by one request is read from memory by the next. The cache belongs to one
orchestrator (one database and its physical replicas, where a row's version is the same), and
is bounded by bytes. Its hits are per memory, as the span indexes' are: a request runs faster
only because a memory of its own namespace was read before.
"""

from __future__ import annotations

import sys
from collections.abc import Hashable, Sequence
from typing import Any

import asyncpg

from retrieval.cache import ByteLRU

# A content of at most this many bytes (UTF-8) comes with its row: fetching it again would cost
# more than moving it. `octet_length` of a stored text reads its header, not the text.
INLINE_BYTES = 4096


def _reference(m: str, prefix: str = "") -> str:
    return f"{m}.xmin AS {prefix}version, octet_length({m}.content) AS {prefix}content_bytes"


def columns(m: str, prefix: str = "") -> str:
    """What a leg's statement selects of memory `m` for Contents.of(): the content when it is
    short, the row's version and the content's length in bytes (named `prefix` + content,
    version, content_bytes; the memory's id must be selected as `prefix` + id)."""
    short = f"CASE WHEN octet_length({m}.content) <= {INLINE_BYTES} THEN {m}.content END"
    return f"{short} AS {prefix}content, {_reference(m, prefix)}"


# Returns the contents of the memories $1 of namespace $2 (live or not: the leg already chose
# them), with their versions and lengths.
CONTENTS_SQL = f"""
SELECT m.id, m.content, {_reference("m")}
FROM memories m WHERE m.id = ANY($1::bigint[]) AND m.namespace = $2"""

DEFAULT_CACHE_BYTES = 64 * 1024 * 1024


def _key(row: Any, prefix: str) -> Hashable:
    return (row[prefix + "id"], row[prefix + "version"], row[prefix + "content_bytes"])


class Contents:
    """The long contents read lately, by row version; `of()` completes a leg's rows."""

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.cache: ByteLRU[str] = ByteLRU(
            max_bytes, lambda _k, v: 100 + sys.getsizeof(v), memory_at=0
        )

    async def of(
        self,
        conn: asyncpg.Connection,
        namespace: str,
        rows: Sequence[Any],
        *,
        prefix: str = "",
        timeout: float | None = None,
    ) -> list[str | None]:
        """Each row's content (the columns named by `prefix`, as columns() made them): its
        own, else the cached one of its version, else fetched (one statement for all of them;
        a memory named by several rows once). None for a memory deleted since its row was
        read."""
        out: list[str | None] = [r[prefix + "content"] for r in rows]
        missing: dict[int, list[int]] = {}
        for i, r in enumerate(rows):
            if out[i] is None:
                out[i] = self.cache.get(_key(r, prefix))
                if out[i] is None:
                    missing.setdefault(r[prefix + "id"], []).append(i)
        if missing:
            for r in await conn.fetch(CONTENTS_SQL, list(missing), namespace, timeout=timeout):
                # The version fetched (the row may have changed since the leg read it: its text
                # now is what a caller would be shown).
                self.cache.put(_key(r, ""), r["content"])
                for i in missing[r["id"]]:
                    out[i] = r["content"]
        return out
