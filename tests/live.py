"""Real servers for end-to-end tests: daphne processes on loopback ports, sharing the
test database (and, on the server stack, Redis) with the test process.

Tests using them must be transactional (``django_db(transaction=True)``): the
server reads what the test committed.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out for outgoing connections."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_run(count: int = 1) -> int:
    """The first of ``count`` consecutive loopback ports free now, below the kernel's
    ephemeral range. A port the kernel picked (``bind(0)``) comes from that range,
    where any outgoing connection may take it as its own before the server listens
    on it: a cluster's second daphne, started a minute after its ports were chosen,
    could not bind (a loaded CI pass: "did not answer within 60 s", refused)."""
    high = max(_ephemeral_low() - count, 1025)
    low = max(high - 12_000, 1024)
    for _ in range(200):
        first = random.randint(low, high)
        try:
            for port in range(first, first + count):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return first
    raise RuntimeError("no run of free ports")


def free_port() -> int:
    return free_run(1)


def database_url() -> str:
    """The URL of the test database this process uses."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def server_env(**extra: str) -> dict[str, str]:
    """The environment of a server process sharing this test's database and Redis."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FORGE_", "DJANGO_"))}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "forge.settings.dev",
            "FORGE_DEBUG": "1",  # static files straight from the finders
            "DATABASE_URL": database_url(),
            "FORGE_ECHO_DELAY": "0",
            "FORGE_RECOVER_ON_START": "0",
            "FORGE_LEASE_JANITOR": "0",
            "FORGE_SHUTDOWN_GRACE": "0",  # a stopped server ends its turns at once
            "FORGE_WORKSPACE_ROOT": str(settings.FORGE_WORKSPACE_ROOT),
        }
    )
    if connection.vendor == "postgresql":
        # Live servers act as the application role, under row-level security.
        env["FORGE_DB_APP_ROLE"] = "forge_test_app"
    if settings.REDIS_URL:
        env["REDIS_URL"] = settings.REDIS_URL
        env["FORGE_REDIS_PREFIX"] = settings.FORGE_INFLIGHT_PREFIX
    env.update(extra)
    return env


@dataclass
class LiveServer:
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def daphne(tmp_path: Path, name: str = "daphne", **env: str) -> Iterator[LiveServer]:
    """A daphne serving ``forge.asgi:application`` until the block ends."""
    port = free_port()
    log = tmp_path / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                "forge.asgi:application",
            ],
            cwd=ROOT,
            env=server_env(**env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = LiveServer(port=port, process=process, log=log)
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"daphne exited:\n{server.output()}")
            try:
                httpx.get(f"{server.url}/login/", timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"daphne did not start:\n{server.output()}") from None
                time.sleep(0.1)
        yield server
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
