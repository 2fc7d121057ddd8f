"""What the benchmarks that start daphne processes share: free loopback ports, the
static files a server with ``DEBUG`` off refuses to start without, and waiting for a
server to answer (or failing, with its log, when it never does).

A server started with ``FORGE_DEBUG=0`` checks at import that ``collectstatic`` has
run (``forge.checks.require_collected_static``): a bench that forgot it used to wait
its minute for servers that had already exited, then failed on its first request with
``All connection attempts failed``.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_run(count: int) -> int:
    """The first of ``count`` consecutive free loopback ports."""
    for _ in range(50):
        first = free_port()
        if first + count > 65535:
            continue
        try:
            for port in range(first, first + count):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return first
    raise RuntimeError(f"no run of {count} free ports on 127.0.0.1")


ASGI_APP = "forge.asgi:application"


def start_daphne(
    app_dir: Path, env: dict[str, str], port: int, log: Path
) -> subprocess.Popen[bytes]:
    """``daphne forge.asgi:application`` on 127.0.0.1:``port`` from ``app_dir``, its output in
    ``log``, in a process group of its own (stop it with ``os.killpg``)."""
    return subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), ASGI_APP],
        cwd=app_dir,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def static_root(env: dict[str, str]) -> dict[str, str]:
    """``env`` with ``FORGE_STATIC_ROOT`` set to a fresh temporary folder (the bench's
    own, so a run never writes into the checkout's ``var/``). Run ``collectstatic``
    with the returned environment before starting a server."""
    return {**env, "FORGE_STATIC_ROOT": tempfile.mkdtemp(prefix="forge-bench-static-")}


def wait_until_up(
    base: str, process: subprocess.Popen[bytes], log: Path, *, timeout: float = 60.0
) -> None:
    """Return once ``base`` answers HTTP; raise with the log's tail when the server
    exited or did not answer within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        try:
            httpx.get(base + "/login/", timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
    state = f"exited with {process.returncode}" if process.poll() is not None else "no answer"
    raise RuntimeError(f"the server at {base} did not come up ({state}); its log ends:\n{tail}")


def server_arguments(parser: argparse.ArgumentParser) -> None:
    """``--redis-url`` and ``--postgres-url`` (a server's ``postgres`` database, where
    the bench makes its own), defaulting to ``FORGE_BENCH_REDIS_URL`` /
    ``FORGE_BENCH_POSTGRES_URL`` or the machine's servers on 127.0.0.1."""
    parser.add_argument(
        "--redis-url", default=os.environ.get("FORGE_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get(
            "FORGE_BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres"
        ),
    )
