"""Peak memory of a `retrieval serve` under a long locust load over very long memories.

Stores --memories memories of --chars characters each in namespace `soak` of an embedded
PostgreSQL in --data-dir (through this checkout's service; text cut from the JSQuAD corpus in
../shared when present, so that every memory has its own n-grams, else from the packaged
samples), then starts the service from --repo (default: this checkout) afresh on that
database, runs scripts/locustfile.py headless against it for --minutes (every candidate the
reranker reads is a long memory), and prints the server's RSS every minute and its peak
(VmHWM). Loopback only.

    .venv/bin/python scripts/soak_rss.py --minutes 10 --data-dir /tmp/soak-after
    .venv/bin/python scripts/soak_rss.py --repo /tmp/before --minutes 10 --data-dir /tmp/soak-before
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent.parent


def _status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS", "VmHWM")):
            k, v = line.split(":", 1)
            out[k] = int(v.split()[0])  # kB
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repo", type=Path, default=HERE, help="checkout whose code to serve")
    ap.add_argument(
        "--data-dir", type=Path, required=True, help="embedded PostgreSQL data directory"
    )
    ap.add_argument("--memories", type=int, default=40)
    ap.add_argument("--chars", type=int, default=100_000)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--users", type=int, default=4)
    args = ap.parse_args()

    with _serve(HERE, args.data_dir) as (url, _):
        have = httpx.get(
            f"{url}/v1/memories/long-{args.memories - 1}", params={"namespace": "soak"}, timeout=30
        )
        if have.status_code != 200:  # not stored by an earlier run
            _store(url, args.memories, args.chars)
    with _serve(args.repo, args.data_dir) as (url, server):
        print(f"serving {args.repo} afresh: {_status(server.pid)}", flush=True)
        locust = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "locust"),
                "-f",
                str(HERE / "scripts/locustfile.py"),
                "--host",
                url,
                "--headless",
                "-u",
                str(args.users),
                "-r",
                str(args.users),
                "-t",
                f"{int(args.minutes * 60)}s",
                "--only-summary",
            ],
            env={**os.environ, "RETRIEVAL_LOAD_NAMESPACE": "soak"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        peak = 0
        t0 = time.monotonic()
        while locust.poll() is None:
            st = _status(server.pid)
            peak = max(peak, st["VmRSS"])
            if int(time.monotonic() - t0) % 60 == 0:
                print(
                    f"  {time.monotonic() - t0:5.0f} s  RSS {st['VmRSS'] / 1024:.0f} MB", flush=True
                )
            time.sleep(1)
        out = locust.stdout.read().decode() if locust.stdout else ""
        table = [
            ln for ln in out.splitlines() if ln.lstrip().startswith(("Type", "POST", "Aggregated"))
        ]
        print("\n".join(table[:8]))
        fails = sum(int(ln.split()[0]) for ln in out.splitlines() if re.match(r"\s*\d+\s+POST", ln))
        print(f"failed or degraded responses: {fails}")
        st = _status(server.pid)
        print(
            f"peak RSS sampled {peak / 1024:.0f} MB; VmHWM {st['VmHWM'] / 1024:.0f} MB; "
            f"final {st['VmRSS'] / 1024:.0f} MB"
        )
    return 0


def _texts() -> list[str]:
    corpus = HERE.parent / "shared" / "eval" / "jsquad" / "corpus.jsonl"
    if corpus.exists():
        return [json.loads(x)["text"] for x in corpus.open(encoding="utf-8")]
    return [
        json.loads(x)["content"] for x in (HERE / "retrieval/data/sample_memories.jsonl").open()
    ]


def _store(url: str, n: int, chars: int) -> None:
    texts = _texts()
    t0 = time.monotonic()
    pos = 0
    for start in range(0, n, 4):
        batch = []
        for i in range(start, min(n, start + 4)):
            parts: list[str] = []
            while sum(map(len, parts)) < chars:
                parts.append(texts[pos % len(texts)])
                pos += 1
            batch.append({"id": f"long-{i}", "content": "".join(parts)[:chars]})
        httpx.post(
            f"{url}/v1/memories", json={"namespace": "soak", "memories": batch}, timeout=900
        ).raise_for_status()
    print(f"stored {n} memories of {chars} characters in {time.monotonic() - t0:.0f} s", flush=True)


@contextmanager
def _serve(repo: Path, data_dir: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(repo), "RETRIEVAL_DATA_DIR": str(data_dir)}
    env.pop("DATABASE_URL", None)
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(data_dir.parent / f"soak-serve-{port}.log", "wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "retrieval.cli", "serve", "--port", str(port)],
            cwd=repo,
            env=env,
            stdout=log,
            stderr=log,
        )
        try:
            for _ in range(600):
                try:
                    if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.5)
            yield url, server
        finally:
            server.terminate()
            server.wait(30)


if __name__ == "__main__":
    sys.exit(main())
