"""A least-recently-used cache bounded by bytes, safe to share between threads.

The caches of the read path hold what a caller controls the size of (query texts of up to a
conversation's length, n-gram sets of memories of up to 100k characters): bounded by entry
count, a few large entries would hold gigabytes.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Collection, Hashable
from typing import Any, Generic, TypeVar

V = TypeVar("V")

# Every cache whose keys name a memory (by its internal id), so that an erased memory leaves
# them all (forget_memories).
_OF_MEMORIES: weakref.WeakSet[ByteLRU[Any]] = weakref.WeakSet()


def forget_memories(ids: Collection[int] | None) -> int:
    """Drop what every cache holds of these memories (internal ids; None: of every memory);
    how many entries went."""
    wanted = None if ids is None else set(ids)
    gone = 0
    for c in list(_OF_MEMORIES):
        at = c.memory_at
        gone += c.drop(lambda k: wanted is None or k[at] in wanted)  # noqa: B023
    return gone


class ByteLRU(Generic[V]):
    """get_or_compute(key, fn) with at most `max_bytes` held; `size(key, value)` estimates an
    entry. An entry larger than an eighth of the budget is computed but never held."""

    def __init__(
        self, max_bytes: int, size: Callable[[Hashable, V], int], *, memory_at: int | None = None
    ) -> None:
        """`memory_at`: where in each (tuple) key the memory it holds something of is named
        (its internal id), for forget_memories."""
        self.max_bytes = max_bytes
        self.memory_at = memory_at if memory_at is not None else -1
        if memory_at is not None:
            _OF_MEMORIES.add(self)
        self._size = size
        self._items: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.bytes = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: Hashable) -> bool:
        """Whether `key` is held now (neither a hit nor a use: nothing is counted or moved)."""
        with self._lock:
            return key in self._items

    def get(self, key: Hashable) -> V | None:
        """The value held under `key` (a hit: it becomes the newest), or None (a miss)."""
        with self._lock:
            got = self._items.get(key)
            if got is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return got[0]

    def put(self, key: Hashable, value: V) -> None:
        """Hold `value` under `key` unless it is larger than an eighth of the budget; the
        least recently used entries go until the budget holds."""
        n = self._size(key, value)
        if n > self.max_bytes // 8:
            return
        with self._lock:
            if key not in self._items:
                self._items[key] = (value, n)
                self.bytes += n
            while self.bytes > self.max_bytes and self._items:
                _, (_, dropped) = self._items.popitem(last=False)
                self.bytes -= dropped

    def get_or_compute(self, key: Hashable, fn: Callable[[], V]) -> V:
        got = self.get(key)
        if got is not None:
            return got
        value = fn()  # outside the lock: concurrent misses of one key may both compute it
        self.put(key, value)
        return value

    def drop(self, which: Callable[[Any], bool]) -> int:
        """Drop the entries whose key `which` picks; how many."""
        with self._lock:
            gone = [k for k in self._items if which(k)]
            for k in gone:
                self.bytes -= self._items.pop(k)[1]
        return len(gone)
