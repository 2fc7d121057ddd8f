"""The per-user stream cap counts every process's streams, in Redis, and fails open when
Redis is away (issue 21, item 3; forge.realtime.shared_limits)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from forge.realtime import limits, shared_limits

pytestmark = pytest.mark.postgres_only  # the server stack: a real Redis

ROOT = Path(__file__).resolve().parent.parent.parent

OTHER_PROCESS = """
import sys, django
django.setup()
from forge.realtime import limits
user = int(sys.argv[1])
limits.take(user); limits.take(user)
print("holding 2", flush=True)
sys.stdin.readline()
limits.give_back(user)
print("gave one back", flush=True)
sys.stdin.readline()
"""


@pytest.fixture
def cap(settings: pytest.FixtureRequest) -> Iterator[int]:
    settings.FORGE_MAX_STREAMS_PER_USER = 2  # type: ignore[attr-defined]
    shared_limits.ask_redis_again()
    yield 2
    shared_limits.ask_redis_again()


def _other_process(settings: object, user: int) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "forge.settings.dev",
        "REDIS_URL": settings.REDIS_URL,  # type: ignore[attr-defined]
        "FORGE_REDIS_PREFIX": settings.FORGE_REDIS_PREFIX,  # type: ignore[attr-defined]
        "FORGE_MAX_STREAMS_PER_USER": "2",
    }
    return subprocess.Popen(
        [sys.executable, "-c", OTHER_PROCESS, str(user)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_streams_held_by_another_process_count(settings, cap: int) -> None:
    user = 900_000 + os.getpid()
    other = _other_process(settings, user)
    try:
        assert other.stdout is not None
        assert other.stdin is not None
        assert other.stdout.readline().strip() == "holding 2"

        with pytest.raises(limits.TooManyStreams):
            limits.take(user)  # this process holds none, but the user holds 2 in all
        assert limits.open_streams(user) == 0  # the refused stream holds nothing here

        other.stdin.write("\n")
        other.stdin.flush()
        assert other.stdout.readline().strip() == "gave one back"
        limits.take(user)
        assert limits.open_streams(user) == 1
        with pytest.raises(limits.TooManyStreams):
            limits.take(user)
        limits.give_back(user)
        assert limits.open_streams(user) == 0
    finally:
        other.kill()
        other.wait()


def test_a_redis_that_is_away_leaves_the_cap_per_process(settings, cap: int, caplog) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    settings.REDIS_URL = f"redis://127.0.0.1:{closed}/0"
    user = 910_000 + os.getpid()
    limits.take(user)
    limits.take(user)  # counted by this process only: let through
    assert "Redis unreachable" in caplog.text
    with pytest.raises(limits.TooManyStreams):
        limits.take(user)  # the per-process cap still holds
    limits.give_back(user)
    limits.give_back(user)
    assert limits.open_streams(user) == 0
