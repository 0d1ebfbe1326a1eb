"""A key that names a new namespace for every request, beside two light tenants: how many answers
the key gets, and what the light tenants' p95 is, against the same key in one namespace and the
light tenants alone.

Start the service with three keys, then run this against it:

    RETRIEVAL_API_KEYS='heavy-key-0001:*,light-a-00001:*,light-b-00001:*' \\
        .venv/bin/retrieval serve --port 8765 &
    .venv/bin/python scripts/tenant_rotation.py --url http://127.0.0.1:8765 --seconds 20

Each phase runs `--seconds`: (1) the light tenants alone (each one question every 0.25 s);
(2) the same with the heavy key on 16 connections sending short new (uncached) questions in one
namespace; (3) the heavy key naming a new namespace for every question.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

import httpx
import numpy as np

HEAVY, LIGHT = "heavy-key-0001", ("light-a-00001", "light-b-00001")
QUESTIONS = ["先週のジムでのトレーニング", "京都旅行の計画", "会議の議事録", "カレーの隠し味"]


async def _light(c: httpx.AsyncClient, key: str, end: float, out: list[float]) -> None:
    n = 0
    while time.monotonic() < end:
        t = time.monotonic()
        body = {"query": QUESTIONS[n % len(QUESTIONS)], "namespace": f"light-{key}"}
        r = await c.post("/v1/retrieve", json=body, headers={"Authorization": f"Bearer {key}"})
        if r.status_code == 200:
            out.append((time.monotonic() - t) * 1000.0)
        n += 1
        await asyncio.sleep(0.25)


async def _heavy(c: httpx.AsyncClient, end: float, rotate: bool, counts: dict[int, int]) -> None:
    while time.monotonic() < end:
        ns = f"heavy-{uuid.uuid4().hex[:10]}" if rotate else "heavy-one"
        body = {"query": f"新しい質問 {uuid.uuid4().hex[:12]}", "namespace": ns}
        r = await c.post("/v1/retrieve", json=body, headers={"Authorization": f"Bearer {HEAVY}"})
        counts[r.status_code] = counts.get(r.status_code, 0) + 1


async def phase(url: str, seconds: float, heavy: str | None) -> tuple[dict[int, int], float]:
    """One phase: (the heavy key's answers by status, the light tenants' p95 in ms)."""
    light: list[float] = []
    counts: dict[int, int] = {}
    limits = httpx.Limits(max_connections=32)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as c:
        end = time.monotonic() + seconds
        tasks = [_light(c, k, end, light) for k in LIGHT]
        if heavy is not None:
            tasks += [_heavy(c, end, heavy == "rotate", counts) for _ in range(16)]
        await asyncio.gather(*tasks)
    return counts, float(np.percentile(light, 95)) if light else float("nan")


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True)
    p.add_argument("--seconds", type=float, default=20.0)
    args = p.parse_args()
    _, alone = await phase(args.url, args.seconds, None)
    one, p95_one = await phase(args.url, args.seconds, "one")
    await asyncio.sleep(10)  # the heavy key's bucket refills between the phases
    rot, p95_rot = await phase(args.url, args.seconds, "rotate")
    print(f"light tenants alone: p95 {alone:.0f} ms")
    print(f"heavy key, one namespace: {one}; light p95 {p95_one:.0f} ms")
    print(f"heavy key, a new namespace each time: {rot}; light p95 {p95_rot:.0f} ms")
    got_one, got_rot = one.get(200, 0), rot.get(200, 0)
    print(
        f"rotating / one namespace: {got_rot} / {got_one} answers "
        f"(bar: at most {1.5 * got_one + 10:.0f}); light p95 {p95_rot:.0f} ms "
        f"(bar: at most {1.5 * alone + 20:.0f})"
    )


if __name__ == "__main__":
    asyncio.run(main())
