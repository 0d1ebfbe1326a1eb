"""A service killed with SIGKILL in the middle of its write jobs and started again: every
acknowledged memory is there as sent, every job ends `done` or `failed` well within 4 minutes
(the restarted service takes up its dead run's jobs at once, not after their lease), and no
memory sent without a date is dated after its acknowledgement."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime

import httpx

from tests.helpers import ROOT, free_port


def _serve(dsn: str, port: int, log) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DATABASE_URL": dsn, "RETRIEVAL_INLINE_EMBED_S": "0"}
    return subprocess.Popen(
        [sys.executable, "-m", "retrieval.cli", "serve", "--port", str(port)],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip


def _ready(url: str, proc: subprocess.Popen[bytes], within_s: float = 120) -> None:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        assert proc.poll() is None, "the service exited"
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError("not ready")


def _crash_and_restart(dsn: str, ns: str, tmp_path) -> tuple[dict, dict, list[dict], float]:
    """Queue four jobs, kill the service mid-job, start it again, wait for the jobs: what was
    sent and when each was acknowledged, the jobs' last states, seconds after the restart."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "serve.log").open("wb")
    first = _serve(dsn, port, log)
    sent: dict[str, dict] = {}
    acked: dict[str, datetime] = {}
    jobs: list[str] = []
    try:
        _ready(url, first)
        for b in range(4):
            batch = [
                {
                    "id": f"b{b}-{i}",
                    "content": f"{b}日目の{i}件目: 川沿いを犬と散歩して、夕飯の話をした。",
                }
                for i in range(40)
            ]
            batch[0]["created_at"] = "2026-03-02T09:00:00+09:00"  # one dated, the rest not
            r = httpx.post(
                url + "/v1/memories", json={"namespace": ns, "memories": batch}, timeout=60
            )
            assert r.status_code == 202, r.text
            jobs.append(r.json()["id"])
            for m in batch:
                sent[m["id"]] = m
                acked[m["id"]] = datetime.now(UTC)
        # Mid-job: one is running (or about to) when the process dies.
        end = time.monotonic() + 60
        while time.monotonic() < end:
            states = [
                httpx.get(f"{url}/v1/jobs/{j}", params={"namespace": ns}).json()["state"]
                for j in jobs
            ]
            if "running" in states or "done" in states:
                break
            time.sleep(0.1)
        print(f"killed with jobs {states}")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
    t_restart = time.monotonic()
    second = _serve(dsn, port, log)
    try:
        _ready(url, second)
        end = time.monotonic() + 240
        while True:
            states = [
                httpx.get(f"{url}/v1/jobs/{j}", params={"namespace": ns}).json() for j in jobs
            ]
            if all(s["state"] in ("done", "failed") for s in states) or time.monotonic() > end:
                break
            time.sleep(0.5)
        took = time.monotonic() - t_restart
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(30)
    return sent, acked, states, took


async def test_killed_mid_job_and_restarted_loses_and_redates_nothing(rt, ns, tmp_path):
    import asyncio

    sent, acked, states, took = await asyncio.to_thread(_crash_and_restart, rt.dsn, ns, tmp_path)
    print(f"jobs ended {[s['state'] for s in states]} {took:.1f} s after the restart")
    assert all(s["state"] == "done" for s in states), states
    assert took < 240
    async with rt.pool.acquire() as conn:
        got = await conn.fetch(
            "SELECT external_id, content, created_at FROM memories WHERE namespace = $1", ns
        )
    rows = {r["external_id"]: r for r in got}
    assert set(rows) == set(sent)
    for x, m in sent.items():
        assert rows[x]["content"] == m["content"]
        if "created_at" in m:
            assert rows[x]["created_at"] == datetime.fromisoformat(m["created_at"])
        else:
            assert rows[x]["created_at"] <= acked[x], (x, rows[x]["created_at"], acked[x])
