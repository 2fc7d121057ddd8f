"""A ``redis-server`` of a test's own, on a free port, that the test may stop and start
again, or pause (the shared Redis on 6379 is never stopped)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field

import redis

from tests.live import free_port


@dataclass
class OwnRedis:
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.process = subprocess.Popen(
            [
                *(binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""),
                *("--appendonly", "no", "--daemonize", "no", "--loglevel", "warning"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis.from_url(self.url, socket_connect_timeout=0.2).ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)

    def pause(self) -> None:
        """Freeze the server (``SIGSTOP``): connections stay open and nothing answers, as
        behind a network partition (a stopped server refuses connections at once)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.process = None
