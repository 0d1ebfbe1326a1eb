"""The service as `pip install .` (not editable) lays it out: the wheel holds the package and its
migrations, depends on the light client's distribution (and ships no copy of it), and the
installed command migrates a database from anywhere
(a plain install once shipped no migrations: the start found none and failed later on
`unknown type: public.vector`)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.helpers import ROOT


def test_the_wheel_holds_its_migrations_and_the_installed_command_migrates(rt, tmp_path):
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"),
         str(ROOT)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("retrieval_orchestrator-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert sum(n.startswith("db/migrations/") and n.endswith(".sql") for n in names) >= 14
    assert "retrieval/cli/__init__.py" in names
    # The light client is its own distribution, a dependency: not a copy inside this one.
    assert not any(n.startswith("retrieval_client/") for n in names)
    meta = next(n for n in names if n.endswith("METADATA"))
    assert "Requires-Dist: retrieval-client" in zipfile.ZipFile(wheel).read(meta).decode()
    assert not any(n.startswith(("tests/", "scripts/", "deploy/")) for n in names)
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
         str(wheel)],
        check=True, capture_output=True,
    )  # fmt: skip
    # The installed copy, not the checkout: run from elsewhere, with it first on the path.
    env = {**os.environ, "PYTHONPATH": str(target), "DATABASE_URL": rt.dsn}
    env.pop("RETRIEVAL_MIGRATIONS_DIR", None)
    where = subprocess.run(
        [sys.executable, "-c", "import db.migrate as m; print(m.migrations_dir())"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert Path(where.stdout.strip()).is_relative_to(target)
    out = subprocess.run(
        [sys.executable, "-m", "retrieval.cli", "migrate"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "database is up to date" in out.stdout
