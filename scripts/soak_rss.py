"""Peak memory of a `retrieval serve` under a long locust load over very long memories.

Starts the service from --repo (default: this checkout) on its own embedded PostgreSQL in
--data-dir, stores --memories memories of --chars characters each (made from the packaged
sample memories, so the load's queries find them and the reranker reads them), runs
scripts/locustfile.py headless for --minutes, and prints the server's RSS every minute and its
peak (VmHWM). Loopback only.

    .venv/bin/python scripts/soak_rss.py --minutes 10 --data-dir /tmp/soak-after
    .venv/bin/python scripts/soak_rss.py --repo /tmp/before --minutes 10 --data-dir /tmp/soak-before
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import socket
import subprocess
import sys
import time
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
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", type=Path, default=HERE, help="checkout whose code to serve")
    ap.add_argument("--data-dir", type=Path, required=True, help="embedded PostgreSQL data directory")
    ap.add_argument("--memories", type=int, default=40)
    ap.add_argument("--chars", type=int, default=100_000)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--users", type=int, default=4)
    args = ap.parse_args()

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(args.repo), "RETRIEVAL_DATA_DIR": str(args.data_dir)}
    env.pop("DATABASE_URL", None)
    log = open(args.data_dir.parent / f"soak-serve-{port}.log", "wb")  # noqa: SIM115
    server = subprocess.Popen([sys.executable, "-m", "retrieval.cli", "serve", "--port", str(port)],
                              cwd=args.repo, env=env, stdout=log, stderr=log)
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        have = httpx.get(f"{url}/v1/memories/long-{args.memories - 1}", params={"namespace": "soak"}, timeout=30)
        if have.status_code == 200:  # stored by an earlier run (perhaps of other code): reuse
            args.memories = 0
        sample = [json.loads(x)["content"] for x in (HERE / "retrieval/data/sample_memories.jsonl").open()]
        rng = random.Random(7)
        t0 = time.monotonic()
        for start in range(0, args.memories, 4):
            batch = []
            for i in range(start, min(args.memories, start + 4)):
                parts: list[str] = []
                while sum(map(len, parts)) < args.chars:
                    parts.append(rng.choice(sample))
                batch.append({"id": f"long-{i}", "content": "".join(parts)[: args.chars]})
            r = httpx.post(f"{url}/v1/memories", json={"namespace": "soak", "memories": batch}, timeout=600)
            r.raise_for_status()
        print(f"stored {args.memories} memories of {args.chars} characters in {time.monotonic() - t0:.0f} s; "
              f"server {_status(server.pid)}", flush=True)
        locust = subprocess.Popen(
            [str(Path(sys.executable).parent / "locust"), "-f", str(HERE / "scripts/locustfile.py"), "--host", url,
             "--headless", "-u", str(args.users), "-r", str(args.users), "-t", f"{int(args.minutes * 60)}s",
             "--only-summary"],
            env={**os.environ, "RETRIEVAL_LOAD_NAMESPACE": "soak"}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        peak = 0
        t0 = time.monotonic()
        while locust.poll() is None:
            st = _status(server.pid)
            peak = max(peak, st["VmRSS"])
            if int(time.monotonic() - t0) % 60 == 0:
                print(f"  {time.monotonic() - t0:5.0f} s  RSS {st['VmRSS'] / 1024:.0f} MB", flush=True)
            time.sleep(1)
        out = locust.stdout.read().decode() if locust.stdout else ""
        table = [ln for ln in out.splitlines() if ln.lstrip().startswith(("Type", "POST", "Aggregated"))]
        print("\n".join(table[:8]))
        fails = sum(int(ln.split()[0]) for ln in out.splitlines() if re.match(r"\s*\d+\s+POST", ln))
        print(f"failed or degraded responses: {fails}")
        st = _status(server.pid)
        print(f"peak RSS sampled {peak / 1024:.0f} MB; VmHWM {st['VmHWM'] / 1024:.0f} MB; final {st['VmRSS'] / 1024:.0f} MB")
    finally:
        server.terminate()
        server.wait(30)
        log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
