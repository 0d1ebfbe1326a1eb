"""A pooled connection whose every wait is bounded, whatever state the server is in.

A statement past its deadline is cancelled by asyncpg, which asks the server to cancel it on a
second connection and waits for the answer; leaving a transaction then sends ROLLBACK, which
first waits for that cancel — a stopped server (SIGSTOP, a frozen VM, a partition) answers
neither, and the caller waited as long as the server was gone (6 s of 6, in the fault test).
Here, a session that fails on a deadline, a cancellation or a lost connection terminates its
connection instead (the server rolls back the session's transaction when it notices), so the
caller gets its error at once and the pool opens a new connection when one is next needed. A
failure the server itself answered (a constraint, a deadlock, its own statement timeout) or
the caller's own (a memory not found) ends the transaction politely, within what is left of
the deadline; a session that ends well commits (or, read-only, rolls back) the same way. Any
end that does not finish in time terminates the connection too.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Literal

import asyncpg

# How a session's statements are wrapped: no transaction, a read-only one (rolled back at the
# end), or a read-write one (committed at the end).
Transaction = Literal["none", "read", "write"]

_BEGIN = {"read": "BEGIN READ ONLY", "write": "BEGIN"}
_END = {"read": "ROLLBACK", "write": "COMMIT"}

# The least time a step is given once the deadline has passed (asyncpg reads 0 as "none").
_FLOOR_S = 0.001


# What SET LOCAL may be given with BEGIN (local=): a setting's name, and a value that is a
# number or a word. They are the caller's constants and numbers, never a user's text: the
# statement is written out, as SET takes no parameters.
_SETTING = re.compile(r"[a-z_][a-z0-9_.]*")
_VALUE = re.compile(r"[A-Za-z0-9_]+")


def begin(transaction: Transaction, local: Mapping[str, str | int]) -> str:
    """The statement that begins the transaction and sets `local` in it (SET LOCAL), in one
    round trip to the server. ValueError for a name or value that is not a plain word."""
    out = [_BEGIN[transaction]]
    for name, value in local.items():
        text = str(int(value)) if isinstance(value, int) else value
        if not _SETTING.fullmatch(name) or not _VALUE.fullmatch(text):
            raise ValueError(f"not a plain setting: {name!r} = {value!r}")
        out.append(f"SET LOCAL {name} = '{text}'")
    return "; ".join(out)


@asynccontextmanager
async def session(
    pool: asyncpg.Pool,
    timeout_s: float,
    *,
    transaction: Transaction = "none",
    local: Mapping[str, str | int] | None = None,
) -> AsyncIterator[asyncpg.Connection]:
    """A connection from `pool` for at most `timeout_s` seconds: taken, begun, ended and given
    back within that time; on any failure inside, terminated rather than rolled back. The
    statements run in it should carry `timeout=` of their own (the time left, or less).
    `local`: settings for the transaction (SET LOCAL), sent with its BEGIN."""
    if local and transaction == "none":
        raise ValueError("SET LOCAL needs a transaction")
    opening = begin(transaction, local or {}) if transaction != "none" else ""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s

    def left() -> float:
        return max(deadline - loop.time(), _FLOOR_S)

    conn = await pool.acquire(timeout=left())
    ended = False
    try:
        if opening:
            await conn.execute(opening, timeout=left())
        try:
            yield conn
        except BaseException as exc:
            if transaction != "none" and not _gone(exc):
                await conn.execute("ROLLBACK", timeout=left())
            ended = not _gone(exc)
            raise
        if transaction != "none":
            await conn.execute(_END[transaction], timeout=left())
        ended = True
        if transaction == "read" and hasattr(conn, "left_clean"):
            conn.left_clean()  # rolled back: the pool need not reset it (db.pool)
    finally:
        if not ended:
            # The server ends the session (and rolls its transaction back) once the socket
            # closes; nothing here waits for it.
            conn.terminate()
        await pool.release(conn, timeout=left())


# Failures after which the connection may be waiting on a server that does not answer.
_GONE = (TimeoutError, asyncio.CancelledError, OSError, asyncpg.InterfaceError)


def _gone(exc: BaseException) -> bool:
    """Whether a failure may have left the connection waiting on the server (a deadline, a
    cancellation, a lost connection), rather than answered by it or raised by the caller."""
    return isinstance(exc, _GONE) or not isinstance(exc, Exception)


__all__ = ["Transaction", "begin", "session"]
