"""Each tenant's share of the service's processing time: what one caller asks for is paid for by
that caller, not by every caller beside it.

A tenant is an API key — whatever namespaces it names, they are one caller's — or, when no keys
are configured, a namespace (`tenant_of`). Every bound that protects the others is per tenant:
this processing share, the query-embedding backlog (retrieval.embedding.scheduling.query), the open write
jobs and the order jobs are served in (retrieval.ingest.jobs).

The limits bound a single request (query and conversation sizes, limit, context window); they
do not bound how many such requests one tenant sends. A tenant sending the most expensive
request the limits allow, one after another, keeps about a core busy (a 2,000-character query
of new text and its conversation: ~0.7 s of embedding each, plus analysis and n-gram scoring),
which on a 2-core machine doubles the other tenants' p95.

So every tenant has a bucket of processing seconds: it fills at `share` seconds a second up to
`burst_s` (by default eight seconds' worth), and each retrieval takes out what it cost: the CPU
seconds of its analysis and reranking (measured on their threads) and the embedding of its
uncached texts (estimated from the measured rate, as the embedding lane does); a write takes out
its embedding (estimated before, measured after) and a queued write job what it cost when it
ran. A tenant whose bucket is empty waits (asleep: it holds nothing) until it is refilled, at
most `max_wait_s`; past that it is refused with Overloaded (429) and the seconds still to wait.
An ordinary question costs a few milliseconds (its embedding is cached after the first time,
~30 ms before), so only a tenant that keeps asking for seconds of work a second ever waits.
Database time is not counted: it is bounded per request by the connection slots and the legs'
deadlines, and its wall time grows with everyone's load (counting it would throttle the tenants
who suffer a busy database).

A request is charged in advance what its tenant's last ones cost (so that many requests sent at
once cannot all pass an empty bucket), and the difference once it is done.

The share holds only while another tenant is being served (within the last `ACTIVE_S`): a
tenant alone on the service may use all of it (a benchmark, a bulk evaluation), and while it is
alone its bucket does not go into debt, so it meets the others with at most its burst.

Processing time is not all a request holds: its legs hold the database pool's connections. A
tenant sending sixteen requests at once would hold every connection while the others' legs
waited for one (scripts/tenant_rotation.py: light tenants' p95 66-105 ms beside a key on 16
connections with four of its requests running at once, 29-44 ms with two, 20-46 alone). So
while the service is shared, a tenant has at most `max_in_flight` requests running; its next
one waits (asleep, within the same `max_wait_s`) until one of them ends. Two running already
take the key all of its processing share: it got as many answers with two as with four.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from retrieval import metrics as m
from retrieval.errors import Overloaded


def tenant_of(key_id: str | None, namespace: str) -> str:
    """Who pays for a request: its API key (named by a digest: a key is never kept or shown in
    the clear), or its namespace when no keys are configured."""
    return f"key:{key_id}" if key_id is not None else f"ns:{namespace}"


def key_id(key: str) -> str:
    """A key's stable name: a digest, not the key."""
    return hashlib.sha256(key.encode()).hexdigest()[:16]


# Tenants held before full buckets (those that owe nothing) are forgotten.
MAX_TRACKED = 10_000
# Another tenant served this recently means the service is shared now.
ACTIVE_S = 2.0


@dataclass
class _Bucket:
    level: float  # seconds of processing the tenant may still take now
    at: float  # when `level` was computed (the clock's time)
    typical: float = 0.0  # what a request of this tenant cost lately (moving average)


class TenantShares:
    """admit(tenant) before a request (waits, or raises Overloaded), settle() after; charge()
    for work done without asking (a write job)."""

    def __init__(
        self,
        share: float,
        *,
        burst_s: float | None = None,
        max_wait_s: float = 5.0,
        max_in_flight: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.share = share
        self.burst_s = 8 * share if burst_s is None else burst_s
        self.max_wait_s = max_wait_s
        self.max_in_flight = max_in_flight  # 0: no limit
        self.clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self._active: dict[str, float] = {}  # tenant -> last served (within ACTIVE_S)
        self._running: dict[str, int] = {}  # tenant -> requests admitted and not settled
        self._ended: dict[str, asyncio.Event] = {}  # set when one of them settles

    @property
    def enabled(self) -> bool:
        return self.share > 0

    def _refilled(self, tenant: str, now: float) -> _Bucket:
        b = self._buckets.get(tenant)
        if b is None:
            if len(self._buckets) >= MAX_TRACKED:
                self._forget_full(now)
            b = self._buckets[tenant] = _Bucket(self.burst_s, now)
        b.level = min(self.burst_s, b.level + (now - b.at) * self.share)
        b.at = now
        return b

    def _forget_full(self, now: float) -> None:
        for ns in [
            ns
            for ns, b in self._buckets.items()
            if b.level + (now - b.at) * self.share >= self.burst_s
        ]:
            del self._buckets[ns]

    def _shared(self, tenant: str, now: float) -> bool:
        """Whether another tenant was served within ACTIVE_S (and mark this one served)."""
        for ns in [ns for ns, t in self._active.items() if now - t > ACTIVE_S]:
            del self._active[ns]
        self._active[tenant] = now
        return len(self._active) > 1

    async def admit(self, tenant: str) -> float:
        """Wait until `tenant` may start a request; the advance charged (pass it to
        settle). Overloaded when that would take longer than max_wait_s."""
        if not self.enabled:
            return 0.0
        waited = 0.0
        while True:
            now = self.clock()
            b = self._refilled(tenant, now)
            shared = self._shared(tenant, now)
            if not shared:
                b.level = max(b.level, 0.0)  # alone: nothing is owed
            if shared and 0 < self.max_in_flight <= self._running.get(tenant, 0):
                waited += await self._one_ends(tenant, self.max_wait_s - waited)
                continue
            if b.level >= 0:
                b.level -= b.typical
                self._running[tenant] = self._running.get(tenant, 0) + 1
                if waited:
                    m.TENANT_WAIT.observe(waited)
                return b.typical
            wait = -b.level / self.share
            if waited >= self.max_wait_s:
                m.TENANT_REFUSED.inc()
                raise Overloaded(
                    "this caller (its API key, or its namespace without keys) has used its "
                    f"share of the service's processing time ({self.share:g} s a second); "
                    f"retry in {math.ceil(wait)} s",
                    retry_after_s=math.ceil(wait),
                )
            # A refusal comes after max_wait_s too: a client that ignores Retry-After and asks
            # again at once would otherwise cost the others a parsed request per round trip.
            step = min(wait, self.max_wait_s - waited)
            await asyncio.sleep(step)
            waited += step

    async def _one_ends(self, tenant: str, left: float) -> float:
        """Wait (at most `left`) for one of `tenant`'s running requests to end; the seconds
        waited. Overloaded when none ends in time."""
        if left <= 0:
            m.TENANT_REFUSED.inc()
            raise Overloaded(
                f"this caller already has {self.max_in_flight} requests running; retry in 1 s",
                retry_after_s=1,
            )
        ended = self._ended.setdefault(tenant, asyncio.Event())
        ended.clear()
        t = time.monotonic()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ended.wait(), left)
        return max(time.monotonic() - t, 1e-3)

    def charge(self, tenant: str, cost_s: float) -> None:
        """Work done for `tenant` without asking first (a queued write job when it ran): taken
        out of its bucket, which its next requests wait for."""
        if self.enabled and cost_s > 0:
            now = self.clock()
            b = self._refilled(tenant, now)
            b.level -= cost_s
            if not self._shared(tenant, now):
                b.level = max(b.level, 0.0)

    def settle(self, tenant: str, advance: float, cost_s: float) -> None:
        """A request admitted with `advance` cost `cost_s` seconds of processing."""
        if not self.enabled:
            return
        left = self._running.get(tenant, 0) - 1
        if left > 0:
            self._running[tenant] = left
        else:
            self._running.pop(tenant, None)
        ended = self._ended.pop(tenant, None) if left <= 0 else self._ended.get(tenant)
        if ended is not None:
            ended.set()
        now = self.clock()
        b = self._refilled(tenant, now)
        b.level -= cost_s - advance
        if not self._shared(tenant, now):
            b.level = max(b.level, 0.0)
        b.typical = cost_s if b.typical == 0 else 0.7 * b.typical + 0.3 * cost_s
