"""The embedded server's memory: sized to the machine at its first start, kept with the data
directory, changed (with a restart) when the configured size changes, left alone on request."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import asyncpg
import psutil
import pytest
from pydantic import ValidationError

from db.embedded_server import memory_settings, stop_embedded
from retrieval.settings import Settings

GB = 2**30


@pytest.mark.parametrize(
    ("ram", "shared"),
    [
        (8 * GB, "512MB"),  # a developer's laptop: a sixteenth
        (24 * GB, "1024MB"),  # this workplace's machines: capped at 1 GB
        (256 * 2**20, "128MB"),  # never below PostgreSQL's own default
        (128 * GB, "1024MB"),  # never above 1 GB unless asked for
    ],
)
def test_auto_suits_a_developer_machine(ram: int, shared: str) -> None:
    """`auto` was a quarter of the RAM (6 GB here) for a server a developer starts by hand."""
    got = memory_settings(ram)
    assert got["shared_buffers"] == shared
    # The planner may count on the OS cache for three quarters of the RAM (512 MB at least).
    assert got["effective_cache_size"] == f"{max(512, ram // 2**20 * 3 // 4)}MB"


def test_an_explicit_size_is_used_as_given() -> None:
    assert memory_settings(24 * GB, "512MB")["shared_buffers"] == "512MB"


RAM_GB = psutil.virtual_memory().total // GB


@pytest.mark.parametrize(
    "bad",
    ["lots", "0GB", "2 GB", "2TB", "-1MB", "2GB; DROP TABLE x", "", "2GB\x00", "64kB",
     f"{RAM_GB + 1}GB", "9999999GB"],
)  # fmt: skip
def test_settings_refuse_a_size_postgresql_would_not_take(bad: str) -> None:
    with pytest.raises(ValidationError, match="PG_SHARED_BUFFERS"):
        Settings(pg_shared_buffers=bad)


@pytest.mark.parametrize(("given", "passed"), [("auto", "auto"), ("keep", None), ("2GB", "2GB")])
def test_settings_pass_the_size_or_none_for_keep(given: str, passed: str | None) -> None:
    assert Settings(pg_shared_buffers=given).embedded_shared_buffers() == passed


async def _shared_buffers(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval("SELECT pg_size_bytes(current_setting('shared_buffers'))"))
    finally:
        await conn.close()


async def test_the_test_server_runs_with_the_auto_size(settings) -> None:
    if os.environ.get("DATABASE_URL"):
        pytest.skip("an external server's memory is its operator's")
    wanted = memory_settings(psutil.virtual_memory().total)["shared_buffers"]
    assert await _shared_buffers(await asyncio.to_thread(settings.dsn)) == int(wanted[:-2]) * 2**20


def _start_in_a_new_process(data_dir, size: str | None) -> str:
    """embedded_dsn as another process calls it (the server outlives that process)."""
    out = subprocess.run(
        [sys.executable, "-c", "import sys; from db.embedded_server import embedded_dsn; "
         "print(embedded_dsn(sys.argv[1], None if sys.argv[2] == '-' else sys.argv[2]))",
         str(data_dir), size or "-"],
        check=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return out.stdout.strip()


def _postmaster(data_dir) -> str:
    return (data_dir / "postmaster.pid").read_text().split()[0]


async def test_a_new_size_restarts_the_server_and_keep_leaves_it(tmp_path) -> None:
    data_dir = tmp_path / "db"
    try:
        dsn = await asyncio.to_thread(_start_in_a_new_process, data_dir, "256MB")
        assert await _shared_buffers(dsn) == 256 * 2**20
        # The size lives in the data directory: a server started again keeps it.
        await asyncio.to_thread(stop_embedded, data_dir)
        dsn = await asyncio.to_thread(_start_in_a_new_process, data_dir, None)
        assert await _shared_buffers(dsn) == 256 * 2**20
        # A process configured otherwise changes it, restarting the server once.
        pid = _postmaster(data_dir)
        dsn = await asyncio.to_thread(_start_in_a_new_process, data_dir, "384MB")
        assert await _shared_buffers(dsn) == 384 * 2**20
        assert _postmaster(data_dir) != pid
        # Asked again for the size it has: no restart.
        pid = _postmaster(data_dir)
        await asyncio.to_thread(_start_in_a_new_process, data_dir, "384MB")
        assert _postmaster(data_dir) == pid
    finally:
        stop_embedded(data_dir)
