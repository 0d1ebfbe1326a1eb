"""Two code versions over HTTP side by side: each benchmark question is asked of both servers in
turn (which one first alternates), so both meet the same moments of a noisy machine, and the
difference of each pair is read as well as each server's percentiles.

Each version is a checkout and a data directory where `retrieval bench` loaded its memories
(that checkout's own bench run, e.g. `--memories 10000 --no-http`, loads them once):

    python scripts/paired_latency.py before=../old-checkout:D1 after=.:D2 --queries 600 --seed 3

Both servers are started here (`retrieval serve` on the bench database, run logging off) and
stopped at the end; the questions are `retrieval bench`'s, warm-up ones first and unmeasured.
Prints one JSON line: each version's p50/p95/p99 (ms) and service CPU per request, and the
median and mean of (second - first) over the questions. Run the same two versions on one data
directory each against themselves once (A/A) to see the noise floor of the pair.

A dev set instead (`--set`): its questions as `scripts/http_latency.py` asks them, against the
data directories `retrieval eval-suite --sets NAME` indexed it into (their own database); a
version may differ by its environment alone (`--env`), on one data directory:

    python scripts/paired_latency.py on=.:D off=.:D --set locomo
        --env off:RETRIEVAL_CONFIDENCE=false
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from retrieval.evaluation.bench import NAMESPACE, bench_dsn, bench_queries, cpu_seconds, percentiles
from retrieval.evaluation.suite import DEV_SETS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from http_latency import dev_requests  # a script beside this one

# Starts the data directory's embedded server and holds it until stdin closes.
_HOLD = (
    "import sys; from retrieval.settings import Settings; "
    "print(Settings().dsn(), flush=True); sys.stdin.read()"
)


def _version(spec: str) -> tuple[str, Path, Path]:
    try:
        name, rest = spec.split("=", 1)
        checkout, data = rest.rsplit(":", 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NAME=CHECKOUT:DATA_DIR, got {spec!r}") from None
    return name, Path(checkout).resolve(), Path(data).resolve()


def _start(
    checkout: Path,
    data: Path,
    port: int,
    procs: list[subprocess.Popen],
    *,
    bench: bool = True,
    extra: dict[str, str] | None = None,
) -> str:
    env = {
        **os.environ,
        "PYTHONPATH": str(checkout),
        "RETRIEVAL_DATA_DIR": str(data),
        **(extra or {}),
    }
    hold = subprocess.Popen(
        [sys.executable, "-c", _HOLD],
        cwd=checkout,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    procs.append(hold)
    dsn = hold.stdout.readline().strip() if hold.stdout else ""
    if not dsn:
        raise SystemExit(f"{data}: the embedded server did not start")
    env |= {"DATABASE_URL": bench_dsn(dsn) if bench else dsn, "RETRIEVAL_LOG_RUNS": "false"}
    cmd = [sys.executable, "-m", "retrieval.cli", "serve", "--port", str(port)]
    procs.append(subprocess.Popen(cmd, cwd=checkout, env=env, stdout=subprocess.DEVNULL))
    return f"http://127.0.0.1:{port}"


def _ready(client: httpx.Client, server: subprocess.Popen, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:  # a busy port, a bad checkout: its message is above
            raise SystemExit(f"{client.base_url}: the server exited ({server.returncode})")
        try:
            if client.get("/readyz").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"{client.base_url} not ready in {seconds:.0f} s")


def _ask(client: httpx.Client, body: dict) -> float:
    t = time.perf_counter()
    r = client.post("/v1/retrieve", json=body)
    ms = (time.perf_counter() - t) * 1000.0
    if r.status_code != 200:
        raise SystemExit(f"{client.base_url}: HTTP {r.status_code}: {r.text[:200]}")
    return ms


def bench_requests(queries: int, seed: int) -> tuple[list[dict], list[dict]]:
    """The benchmark's warm-up and measured questions, as request bodies."""
    warm, qs = bench_queries(queries, seed)
    return [{"query": q, "namespace": NAMESPACE} for q in warm], [
        {"query": q, "namespace": NAMESPACE} for q in qs
    ]


def measure(
    versions: list[tuple[str, Path, Path]],
    warm: list[dict],
    qs: list[dict],
    *,
    bench: bool = True,
    envs: dict[str, dict[str, str]] | None = None,
    seed: int | None = None,
) -> dict:
    procs: list[subprocess.Popen] = []
    try:
        servers = []
        for i, (name, checkout, data) in enumerate(versions):
            extra = (envs or {}).get(name)
            url = _start(checkout, data, 8810 + i, procs, bench=bench, extra=extra)
            servers.append((name, httpx.Client(base_url=url, timeout=30), procs[-1]))
        for _, client, proc in servers:
            _ready(client, proc)
            for q in warm:
                _ask(client, q)
        lat: dict[str, list[float]] = {name: [] for name, _, _ in servers}
        cpu = {name: cpu_seconds(psutil.Process(proc.pid)) for name, _, proc in servers}
        for i, q in enumerate(qs):
            for name, client, _ in servers if i % 2 == 0 else servers[::-1]:
                lat[name].append(_ask(client, q))
        out: dict = {"queries": len(qs), **({"seed": seed} if seed is not None else {})}
        for name, _, proc in servers:
            spent = cpu_seconds(psutil.Process(proc.pid)) - cpu[name]
            out[name] = {
                **percentiles(lat[name]),
                "service_cpu_ms_per_request": round(spent * 1000.0 / len(qs), 2),
            }
        first, second = (np.asarray(lat[name]) for name, _, _ in servers)
        d = second - first
        out["second_minus_first_ms"] = {
            "median": round(float(np.median(d)), 2),
            "mean": round(float(d.mean()), 2),
        }
        return out
    finally:
        for p in reversed(procs):
            if p.stdin:
                p.stdin.close()
            else:
                p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("first", type=_version, help="NAME=CHECKOUT:DATA_DIR")
    ap.add_argument("second", type=_version, help="NAME=CHECKOUT:DATA_DIR")
    ap.add_argument("--queries", type=int, default=600, help="measured questions (default 600)")
    ap.add_argument("--seed", type=int, default=1, help="which questions (default 1)")
    ap.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE",
        help="an environment variable for one version's server (repeatable)",
    )
    ap.add_argument(
        "--set",
        choices=[s.name for s in DEV_SETS],
        help="ask a dev set's questions (as scripts/http_latency.py) instead of the bench's",
    )
    ap.add_argument("--dir", type=Path, default=Path("../shared/eval"), help="the dev sets")
    ap.add_argument("--max-queries", type=int, default=0, help="with --set: its first N")
    ap.add_argument(
        "--every-namespace",
        action="store_true",
        help="with --set: every question in each of the first --max-queries namespaces",
    )
    args = ap.parse_args()
    if args.first[0] == args.second[0]:
        ap.error("the two versions need different names")
    envs: dict[str, dict[str, str]] = {}
    for spec in args.env:
        name, _, pair = spec.partition(":")
        key, eq, value = pair.partition("=")
        if not eq or name not in (args.first[0], args.second[0]):
            ap.error(f"--env {spec!r}: expected NAME:KEY=VALUE with NAME a version's name")
        envs.setdefault(name, {})[key] = value
    if args.set is None:
        warm, qs = bench_requests(args.queries, args.seed)
        out = measure([args.first, args.second], warm, qs, envs=envs, seed=args.seed)
    else:
        s = next(x for x in DEV_SETS if x.name == args.set)
        asked = [
            body
            for _, body in dev_requests(
                s, args.dir, max_queries=args.max_queries, every_namespace=args.every_namespace
            )
        ]
        # Warm-up: the bench's first questions, in the first request's namespace.
        warm = [{**b, "namespace": asked[0]["namespace"]} for b in bench_requests(1, 1)[0]]
        out = measure([args.first, args.second], warm, asked, bench=False, envs=envs)
        out["set"] = args.set
    print(json.dumps(out))


if __name__ == "__main__":
    main()
