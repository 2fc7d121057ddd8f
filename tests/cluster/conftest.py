"""One cluster of the tests' own (``cluster/cluster.py`` in a temp directory, on free
loopback ports) for every test in this folder that needs one: ``make cluster``'s test,
the short soak and the chat page through nginx share it, since starting one (PostgreSQL
primary and replica, Redis shards, daphnes, nginx) is the slow part.

Under ``CI=true`` missing nginx, redis-server or PostgreSQL binaries fail the tests.
Teardown runs ``down`` and fails the last test's teardown when a process it started
is still alive.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cluster import pg
from tests.e2e.conftest import browser  # noqa: F401 - the Playwright fixture, shared
from tests.live import free_run

ROOT = Path(__file__).resolve().parent.parent.parent
SCRIPT = ROOT / "cluster" / "cluster.py"


def need_binaries() -> None:
    missing = [name for name in ("nginx", "redis-server") if not shutil.which(name)]
    try:
        pg.bindir()
    except FileNotFoundError:
        missing.append("postgresql")
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs {', '.join(missing)} for the cluster tests")
        pytest.skip(f"not installed: {', '.join(missing)}")


def pids(directory: Path) -> list[int]:
    """Every pid the cluster's pid files (and PostgreSQL's) name."""
    found = [int(f.read_text().split()[0]) for f in (directory / "pids").glob("*.pid")]
    for name in ("pg-primary", "pg-replica"):
        postmaster = directory / name / "postmaster.pid"
        if postmaster.exists():
            found.append(int(postmaster.read_text().split()[0]))
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and " Z " not in stat.read_text()


@dataclass
class Cluster:
    directory: Path
    env: dict[str, str]
    port: int
    daphne_ports: list[int]
    up_output: str
    started: list[int] = field(default_factory=list)  # pids right after ``up``

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token(self) -> str:
        found = re.search(r"API token: (\w+)", self.up_output)
        assert found, self.up_output
        return found[1]

    def run(self, command: str) -> str:
        done = subprocess.run(
            [sys.executable, str(SCRIPT), command],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """A running cluster: nginx → 2 daphnes, 2 Redis shards, a primary and its replica,
    with a 5 s lease (the soak waits the lease plus a margin for dead turns)."""
    need_binaries()
    directory = Path(tempfile.mkdtemp(prefix="forge-cluster-"))
    directory.chmod(0o755)
    port, daphne_port = free_run(1), free_run(2)
    env = {
        **os.environ,
        "CLUSTER_DIR": str(directory),
        "CLUSTER_PORT": str(port),
        "CLUSTER_DAPHNES": "2",
        "CLUSTER_DAPHNE_PORT": str(daphne_port),
        "CLUSTER_REDIS_PORT": str(free_run(2)),
        "CLUSTER_PG_PORT": str(free_run(2)),
        "DJANGO_SETTINGS_MODULE": "forge.settings.dev",
        "FORGE_LEASE_SECONDS": "5",
    }
    made = Cluster(directory, env, port, [daphne_port, daphne_port + 1], up_output="")
    try:
        made.up_output = made.run("up")
        made.started = pids(directory)
        yield made
    finally:
        running = pids(directory) if (directory / "pids").exists() else []
        stopped = made.run("down")
        left = [pid for pid in {*made.started, *running} if alive(pid)]
        if os.environ.get("FORGE_KEEP_CLUSTER_LOGS"):
            print(f"cluster logs kept in {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)
    assert "Stopped:" in stopped
    assert left == [], f"down left processes running: {left}"
