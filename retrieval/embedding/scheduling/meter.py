"""How long embedding documents takes here, measured as it happens: the write path's estimate
(inline or a job) and the query lane's (whether a text can finish by its deadline)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from retrieval.embedding.base import Embedder

# A sample document (about a hundred tokens of mixed text) for a first measure of the rate.
_SAMPLE = (
    "会議の議事録: 来週の打ち合わせは火曜日の午後三時から、第二会議室で行う。"
    "The quarterly review covers ingest speed, search latency and the storage budget. "
) * 2


class EmbedMeter:
    """How long embedding documents takes here: seconds per cost unit (the provider's
    `cost_units`, or the caller's `count`), measured on every batch the
    write path embeds (a moving average) and first on one sample document."""

    def __init__(
        self,
        embedder: Embedder,
        *,
        weight: float = 0.2,
        count: Callable[[str], int] | None = None,
    ) -> None:
        self._embedder = embedder
        # The provider's own unit (an e5 token: ~1.5 ms to count a document's) unless the caller
        # counts otherwise.
        self._count: Callable[[str], int] = count if count is not None else embedder.cost_units
        self._weight = weight
        self._lock = threading.Lock()
        self.seconds_per_unit: float | None = None

    def units(self, texts: list[str]) -> int:
        return sum(int(self._count(t)) for t in texts)

    def record(self, units: int, seconds: float) -> None:
        if units <= 0 or seconds <= 0:
            return
        rate = seconds / units
        with self._lock:
            old = self.seconds_per_unit
            self.seconds_per_unit = rate if old is None else old + self._weight * (rate - old)

    def estimate_s(self, texts: list[str]) -> float:
        """Seconds that embedding texts should take (blocking: counts tokens, and embeds the
        sample once when nothing was measured yet)."""
        if self.seconds_per_unit is None:
            t = time.perf_counter()
            self._embedder.embed_documents([_SAMPLE])
            self.record(self.units([_SAMPLE]), time.perf_counter() - t)
        return self.units(texts) * (self.seconds_per_unit or 0.0)
