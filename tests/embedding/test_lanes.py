"""embedding.lanes.FairLane: tenants served in turn, the thread idle last reused, a clean stop."""

import threading
import time

import pytest

from retrieval.embedding.scheduling.lanes import FairLane


def _held(lane: FairLane) -> threading.Event:
    """Occupy the lane's one thread until the returned event is set."""
    release, started = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        release.wait(10)

    lane.submit("holder", hold)
    assert started.wait(10)
    return release


def _all_idle(lane: FairLane, n: int) -> None:
    deadline = time.monotonic() + 10
    while len(lane._idle) < n:
        assert time.monotonic() < deadline, "the lane's threads did not go idle"
        time.sleep(0.001)


def _stopped(lane: FairLane) -> None:
    for t in lane._threads:
        t.join(10)
        assert not t.is_alive()


def test_tenants_are_served_in_turn():
    lane = FairLane(1, name="t-turn")
    try:
        release = _held(lane)
        order: list[str] = []
        futs = [lane.submit("a", order.append, f"a{i}") for i in range(3)]
        futs.append(lane.submit("b", order.append, "b0"))
        release.set()
        for f in futs:
            f.result(10)
        assert order == ["a0", "b0", "a1", "a2"]
    finally:
        lane.shutdown()


def test_the_thread_idle_last_takes_the_next_item():
    """One question at a time runs on one thread (waking the longest idle one rotated them)."""
    lane = FairLane(4, name="t-lifo")
    try:
        names = []
        for _ in range(12):
            _all_idle(lane, 4)  # the last thread is back waiting before the next item comes
            names.append(lane.submit("t", lambda: threading.current_thread().name).result(10))
        assert len(set(names[1:])) == 1, names
    finally:
        lane.shutdown()


def test_shutdown_cancels_what_waits_and_stops_the_threads():
    lane = FairLane(1, name="t-stop")
    release = _held(lane)
    waiting = lane.submit("a", lambda: "never")
    lane.shutdown()
    assert waiting.cancelled()
    with pytest.raises(RuntimeError, match="shut down"):
        lane.submit("a", lambda: None)
    release.set()
    _stopped(lane)


def test_an_idle_lane_stops_at_once():
    lane = FairLane(3, name="t-idle")
    _all_idle(lane, 3)
    lane.shutdown()
    _stopped(lane)


def test_an_exception_reaches_the_caller_and_the_thread_goes_on():
    lane = FairLane(1, name="t-err")
    try:
        with pytest.raises(ZeroDivisionError):
            lane.submit("a", lambda: 1 / 0).result(10)
        assert lane.submit("a", lambda: 7).result(10) == 7
    finally:
        lane.shutdown()
