"""`retrieval serve` starts and stops cleanly: Ctrl-C (SIGINT to the process alone) or SIGTERM
stops the service and the embedded PostgreSQL it started; a busy port is refused before anything
loads; what was stored is there after a restart."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

from retrieval.cli.serve import listen
from tests.helpers import ROOT, free_port


def _start(data_dir: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["RETRIEVAL_DATA_DIR"] = str(data_dir)
    return subprocess.Popen(
        [sys.executable, "-m", "retrieval.cli", "serve", "--port", str(port)],
        cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip


def _ready(proc: subprocess.Popen[bytes], url: str, log: Path, within_s: float = 180.0) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"not ready in {within_s} s: {log.read_text()[-3000:]}")


def _postmaster(data_dir: Path) -> int:
    return int((data_dir / "postmaster.pid").read_text().split()[0])


def _gone(proc: subprocess.Popen[bytes], pg: int, within_s: float = 20.0) -> float:
    """Seconds until the service and its PostgreSQL have both exited (at most within_s)."""
    t = time.monotonic()
    proc.wait(within_s)
    while psutil.pid_exists(pg) and time.monotonic() - t < within_s:
        time.sleep(0.1)
    assert not psutil.pid_exists(pg), "PostgreSQL still runs after serve exited"
    return time.monotonic() - t


def test_serve_stops_its_postgresql_refuses_a_busy_port_and_keeps_what_was_stored(tmp_path):
    data_dir, port = tmp_path / "db", free_port()
    url = f"http://127.0.0.1:{port}"
    first = _start(data_dir, port, tmp_path / "first.log")
    try:
        _ready(first, url, tmp_path / "first.log")
        r = httpx.post(
            f"{url}/v1/memories",
            json={"memories": [{"id": "kept", "content": "再起動のあとも残るメモ"}]},
            timeout=60,
        )
        assert r.status_code == 200, r.text
        pg = _postmaster(data_dir)
        # A second service on the same port: refused at once, naming the port, nothing loaded.
        t = time.monotonic()
        second = subprocess.run(
            [sys.executable, "-m", "retrieval.cli", "serve", "--port", str(port)],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
            env={**os.environ, "RETRIEVAL_DATA_DIR": str(tmp_path / "other")},
        )  # fmt: skip
        assert second.returncode != 0 and str(port) in second.stderr
        assert "serving on" not in second.stderr and time.monotonic() - t < 30
        assert not (tmp_path / "other").exists()  # no PostgreSQL was started for it
        assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200  # the first answers
        first.send_signal(signal.SIGINT)  # the process alone, as a terminal's Ctrl-C would
        took = _gone(first, pg)
        print(f"SIGINT: service and PostgreSQL gone in {took:.1f} s")
        # Its log: JSON lines, one a request, and what it started and stopped.
        lines = [
            json.loads(x)
            for x in (tmp_path / "first.log").read_text().splitlines()
            if x.startswith("{")
        ]
        started = next(x for x in lines if x["msg"] == "started")
        assert started["embedder"].startswith("onnx") and "write-job worker" in started["tasks"]
        assert any(x["msg"].startswith("stopped: ") for x in lines)
        (wrote,) = [x for x in lines if x.get("route") == "/v1/memories"]
        assert wrote["status"] == 200 and wrote["request_id"] and wrote["method"] == "POST"
    finally:
        if first.poll() is None:
            first.kill()
    again = _start(data_dir, port, tmp_path / "again.log")
    try:
        _ready(again, url, tmp_path / "again.log")
        got = httpx.get(f"{url}/v1/memories/kept", timeout=10)
        assert got.status_code == 200 and got.json()["content"] == "再起動のあとも残るメモ"
        pg = _postmaster(data_dir)
        again.send_signal(signal.SIGTERM)
        print(f"SIGTERM: service and PostgreSQL gone in {_gone(again, pg):.1f} s")
    finally:
        if again.poll() is None:
            again.kill()


async def test_a_served_connection_sends_its_answer_at_once():
    """The listening socket says TCP: asyncio turns Nagle off only on connections whose socket
    does, and with Nagle on every answer waited ~40 ms for the client's delayed ACK (the 10k
    bench over HTTP: p50 ~90 ms against ~47 in-process, ~53 once fixed)."""
    sock = listen("127.0.0.1", 0)
    assert sock.proto == socket.IPPROTO_TCP
    got: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def on(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        got.set_result(
            w.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        )
        w.close()

    server = await asyncio.start_server(on, sock=sock)
    try:
        _, w = await asyncio.open_connection(*sock.getsockname()[:2])
        assert await asyncio.wait_for(got, 5) != 0
        w.close()
    finally:
        server.close()
        await server.wait_closed()


def test_a_start_answers_healthz_while_it_waits_and_fails_clearly_when_the_database_never_comes(
    tmp_path,
):
    """/healthz answers as soon as the process serves (a startup probe does not kill a pod that
    waits for its database, its migrations, its models); /readyz says not ready; a database that
    never answers ends the start with an error, not a hang."""
    port, dead = free_port(), free_port()
    env = {
        **os.environ,
        "DATABASE_URL": f"postgresql://nobody:x@127.0.0.1:{dead}/none",
        "RETRIEVAL_DB_WAIT_S": "6",
        "RETRIEVAL_LOG_FORMAT": "text",
    }
    log = tmp_path / "serve.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "retrieval.cli", "serve", "--port", str(port)],
        cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        url, healthy = f"http://127.0.0.1:{port}", False
        for _ in range(100):
            try:
                healthy = httpx.get(f"{url}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                healthy = False
            if healthy:
                break
            time.sleep(0.1)
        assert healthy, log.read_text()[-2000:]
        ready = httpx.get(f"{url}/readyz", timeout=2)
        assert ready.status_code == 503 and ready.json()["models"] is False
        assert proc.wait(60) == 2
    finally:
        if proc.poll() is None:
            proc.kill()
    out = log.read_text()
    assert "could not start" in out, out[-2000:]
