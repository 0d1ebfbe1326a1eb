"""`retrieval serve --workers N`: /metrics from any worker shows the sum over all of them."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from tests.helpers import running_server

N_REQUESTS = 60


def _count(text: str, route: str) -> float:
    """retrieval_http_requests_total for one route, GET, 200."""
    total = 0.0
    for line in text.splitlines():
        if (
            line.startswith("retrieval_http_requests_total{")
            and f'route="{route}"' in line
            and 'status="200"' in line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_two_workers_report_the_requests_of_both(rt, tmp_path):
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    (metrics_dir / "counter_1.db").write_bytes(
        b"stale"
    )  # an earlier start's file: removed at start
    (metrics_dir / "keep.txt").write_text("not ours")  # anything else in the directory stays
    env = {"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    with running_server(rt.dsn, env, args=("--workers", "2")) as url:

        def one(_: int) -> int:
            # A new connection each: the workers share the listening socket, so both answer.
            return httpx.get(f"{url}/healthz", timeout=10).status_code

        with ThreadPoolExecutor(8) as pool:
            assert set(pool.map(one, range(N_REQUESTS))) == {200}
        workers = {
            re.search(r"_(\d+)\.db$", p.name).group(1)
            for p in Path(metrics_dir).glob("counter_*.db")
        }
        assert len(workers) == 2 and "1" not in workers, workers
        # Whichever worker answers the scrape, it counts every request.
        scrapes = [httpx.get(f"{url}/metrics", timeout=10).text for _ in range(6)]
    assert all(_count(t, "/healthz") == N_REQUESTS for t in scrapes), [
        _count(t, "/healthz") for t in scrapes
    ]
    assert all("retrieval_latency_ms_bucket" in t for t in scrapes)
    assert (metrics_dir / "keep.txt").read_text() == "not ours"
