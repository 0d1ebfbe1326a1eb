"""What every command's handler shares: how an error is said, how a runtime is opened."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from retrieval.runtime import Runtime
    from retrieval.settings import Settings


def err(msg: str) -> int:
    """Say what went wrong on stderr; the exit status of a refused command (2)."""
    print(f"retrieval: error: {msg}", file=sys.stderr)
    return 2


@asynccontextmanager
async def opened(settings: Settings) -> AsyncIterator[Runtime]:
    """The service's resources for one command, closed after it."""
    from retrieval.runtime import open_runtime

    rt = await open_runtime(settings)
    try:
        yield rt
    finally:
        await rt.close()
