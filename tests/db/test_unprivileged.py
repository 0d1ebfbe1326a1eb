"""README command 1's service (`retrieval serve --sample`) on the embedded server, started by an
unprivileged user: no root, no apt, no compiler (the wheel's pgvector runs on this CPU as it
is). Run as root (CI), the test makes such a user and runs the service as it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest

from tests.helpers import ROOT, free_port

USER = "retrieval-nonroot"


def _user() -> str | None:
    """The unprivileged user to run as: made when this is root; None = this user already is."""
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "-M", "-s", "/bin/sh", USER], check=True, capture_output=True)
    return USER


def _python(user: str | None) -> list[str]:
    """`retrieval` run by a Python the user can execute. As itself: this one. As the made user:
    this interpreter may live where only root can reach (a pyenv under /root), so the system's
    Python of the same version runs, with this environment's packages (the same wheels; nothing
    built, nothing fetched)."""
    entry = "import sys; from retrieval.cli import main; sys.exit(main())"
    if user is None:
        return [sys.executable, "-c", entry]
    import site
    import sysconfig

    exe = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if not os.access(exe, os.X_OK):
        pytest.skip(f"no {exe} for the unprivileged user to run")
    packages = sysconfig.get_paths()["purelib"]
    assert packages in site.getsitepackages() or packages in sys.path
    # First on the path: the system's own dist-packages (an older protobuf, say) must not
    # shadow this environment's.
    prelude = (
        f"import site, sys; site.addsitedir({packages!r}); "
        f"sys.path.remove({packages!r}); sys.path.insert(0, {packages!r}); "
    )
    return [exe, "-c", prelude + entry]


def test_an_unprivileged_user_starts_the_service_with_the_sample(tmp_path):
    user = _user()
    home = tmp_path / "home"
    home.mkdir()
    if user is not None:
        import pwd

        entry = pwd.getpwnam(user)
        os.chown(home, entry.pw_uid, entry.pw_gid)
        for p in (tmp_path, *tmp_path.parents):
            p.chmod(p.stat().st_mode | 0o011)  # let it pass through to its home
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "RETRIEVAL_DATA_DIR", "XDG_RUNTIME_DIR")
    }
    env.update(HOME=str(home), RETRIEVAL_DATA_DIR=str(home / "db"), RETRIEVAL_LOG_RUNS="false")
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [*_python(user), "serve", "--sample", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=log,
        user=user,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                log.flush()
                pytest.fail(
                    f"serve exited {proc.returncode}: {(tmp_path / 'serve.log').read_text()[-3000:]}"
                )
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "not ready in 180 s"
            time.sleep(0.5)
        r = httpx.post(
            f"{url}/v1/retrieve", json={"query": "先週のジムでのトレーニング"}, timeout=30
        )
        assert r.status_code == 200, r.text
        assert r.json()["results"], "the sample answered nothing"
        if user is not None:  # the server runs as that user, the data directory is its own
            import pwd

            assert pwd.getpwuid((home / "db").stat().st_uid).pw_name == user
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        from db.embedded_server import stop_embedded

        stop_embedded(home / "db")
