"""Each namespace's share of processing time (retrieval.tenants), on a fake clock."""

import asyncio

import pytest

from retrieval.errors import Overloaded
from retrieval.tenants import TenantBudget


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clocked(monkeypatch):
    clock = _Clock()
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)
        clock.now += s

    monkeypatch.setattr(asyncio, "sleep", sleep)
    return clock, slept


async def test_a_namespace_past_its_share_waits_then_is_refused_and_others_do_not(clocked):
    clock, slept = clocked
    b = TenantBudget(1.0, burst_s=0.1, max_wait_s=0.3, clock=clock)
    await b.admit("b")  # the service is shared
    assert await b.admit("a") == 0.0  # nothing known of "a" yet: no advance
    b.settle("a", 0.0, 0.5)  # it cost 0.5 s: the bucket is 0.4 s short
    with pytest.raises(Overloaded) as refused:
        await b.admit("a")  # 0.4 s to wait, more than 0.3: refused after 0.3 s
    assert refused.value.retry_after_s == 1 and slept == [pytest.approx(0.3)]
    assert await b.admit("b") == 0.0 and len(slept) == 1  # another namespace does not wait
    clock.now += 0.05
    assert await b.admit("a") == 0.5  # waits the 0.05 s left, then pays what it cost last
    assert slept[1:] == [pytest.approx(0.05)]
    b.settle("a", 0.5, 0.1)  # cheaper than the advance: the difference comes back
    assert b._buckets["a"].level == pytest.approx(0.0 - 0.5 + 0.4)
    assert b._buckets["a"].typical == pytest.approx(0.7 * 0.5 + 0.3 * 0.1)


async def test_requests_sent_at_once_pay_in_advance(clocked):
    """Many requests of one namespace at once cannot all pass a bucket that one empties."""
    clock, slept = clocked
    b = TenantBudget(1.0, burst_s=1.0, max_wait_s=0.5, clock=clock)
    await b.admit("b")
    b.settle("a", 0.0, 0.8)  # a retrieval of "a" costs ~0.8 s
    assert await b.admit("a") == 0.8  # level 0.2 -> -0.6 (paid in advance)
    with pytest.raises(Overloaded):
        await b.admit("a")  # 0.6 s to wait


async def test_no_share_means_no_limit_and_nothing_tracked(clocked):
    clock, _ = clocked
    b = TenantBudget(0.0, clock=clock)
    for _ in range(100):
        assert await b.admit("a") == 0.0
        b.settle("a", 0.0, 10.0)
    assert not b._buckets


async def test_namespaces_that_owe_nothing_are_forgotten(clocked, monkeypatch):
    import retrieval.tenants as tb

    clock, _ = clocked
    monkeypatch.setattr(tb, "MAX_TRACKED", 3)
    b = TenantBudget(1.0, burst_s=1.0, clock=clock)
    for ns in ("a", "b", "c"):
        await b.admit(ns)
    b.settle("a", 0.0, 5.0)  # "a" owes 4 s (the service is shared)
    clock.now += 1.0
    await b.admit("d")
    assert set(b._buckets) == {"a", "d"}


async def test_a_tenant_alone_is_not_held_back_and_meets_others_with_its_burst(clocked):
    """A benchmark or a bulk evaluation alone on the service uses all of it."""
    clock, slept = clocked
    b = TenantBudget(0.25, burst_s=2.0, max_wait_s=1.0, clock=clock)
    for _ in range(50):  # 50 retrievals of 1 s each in 5 s: far past the share
        await b.admit("bench")
        b.settle("bench", b._buckets["bench"].typical, 1.0)
        clock.now += 0.1
    assert not slept
    await b.admit("other")  # someone else arrives: the share holds from now on
    assert 0.0 <= b._buckets["bench"].level <= 2.0  # no debt from its time alone
    await b.admit("bench")
    b.settle("bench", 1.0, 1.0)  # now it owes ~1 s: 4 s at its share
    with pytest.raises(Overloaded):
        await b.admit("bench")
