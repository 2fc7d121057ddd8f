"""``make cluster``'s script end to end, on a cluster of the test's own (its own
directory and ports): nginx in front of two daphnes, two Redis shards, a PostgreSQL
primary and replica. A chat goes through nginx over WebSocket and SSE (cluster/smoke.py),
a second ``up`` sees it running, and ``down`` stops every process it started.

Under ``CI=true`` missing nginx, redis-server or PostgreSQL binaries fail the test.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from cluster import pg

pytestmark = pytest.mark.postgres_only

ROOT = Path(__file__).resolve().parent.parent.parent


def _need_binaries() -> None:
    missing = [name for name in ("nginx", "redis-server") if not shutil.which(name)]
    try:
        pg.bindir()
    except FileNotFoundError:
        missing.append("postgresql")
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs {', '.join(missing)} for the cluster test")
        pytest.skip(f"not installed: {', '.join(missing)}")


def _free_run(count: int) -> int:
    """The first of ``count`` consecutive free loopback ports."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            first = int(probe.getsockname()[1])
        if first + count > 65535:
            continue
        try:
            for port in range(first, first + count):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return first
    raise RuntimeError("no run of free ports")


def _pids(directory: Path) -> list[int]:
    pids = [int(f.read_text().split()[0]) for f in (directory / "pids").glob("*.pid")]
    for name in ("pg-primary", "pg-replica"):
        postmaster = directory / name / "postmaster.pid"
        if postmaster.exists():
            pids.append(int(postmaster.read_text().split()[0]))
    return pids


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and " Z " not in Path(f"/proc/{pid}/stat").read_text()


def test_make_cluster_serves_a_chat_through_nginx_and_stops_all_it_started() -> None:
    _need_binaries()
    directory = Path(tempfile.mkdtemp(prefix="forge-cluster-"))
    directory.chmod(0o755)
    port, daphne_port = _free_run(1), _free_run(2)
    env = {
        **os.environ,
        "CLUSTER_DIR": str(directory),
        "CLUSTER_PORT": str(port),
        "CLUSTER_DAPHNES": "2",
        "CLUSTER_DAPHNE_PORT": str(daphne_port),
        "CLUSTER_REDIS_PORT": str(_free_run(2)),
        "CLUSTER_PG_PORT": str(_free_run(2)),
        "DJANGO_SETTINGS_MODULE": "forge.settings.dev",
    }
    script = [sys.executable, str(ROOT / "cluster" / "cluster.py")]

    def run(command: str) -> str:
        done = subprocess.run(
            [*script, command], env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    started: list[int] = []
    try:
        out = run("up")
        started = _pids(directory)
        assert len(started) == 2 + 2 + 2 + 1  # daphnes, shards, primary + replica, nginx
        token = re.search(r"API token: (\w+)", out)
        assert token, out
        assert f"http://127.0.0.1:{port}/" in out
        assert "make cluster-stop" in out

        assert "already running" in run("up")
        assert _pids(directory) == started

        smoke = subprocess.run(
            [
                sys.executable,
                str(ROOT / "cluster" / "smoke.py"),
                token[1],
                f"http://127.0.0.1:{port}",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert smoke.returncode == 0, smoke.stdout + smoke.stderr
        log = (directory / "nginx" / "access.log").read_text()
        assert " 101 " in log  # the WebSocket upgrade went through nginx
        upstreams = set(re.findall(r"upstream=(127\.0\.0\.1:\d+)", log))
        assert upstreams <= {f"127.0.0.1:{daphne_port}", f"127.0.0.1:{daphne_port + 1}"}
    finally:
        stopped = run("down")
        shutil.rmtree(directory, ignore_errors=True)
    assert "Stopped:" in stopped
    assert [pid for pid in started if _alive(pid)] == []
