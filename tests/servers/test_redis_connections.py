"""A daphne keeps its Redis connections: API requests do not open new ones.

Django keeps ``caches`` per request context under ASGI; with its own Redis backend
every request built a new client, and so opened a new connection (the throttles read
the cache on every API call). ``forge.cache.RedisCache`` shares one client per
process. A Redis server of the test's own, so only this daphne's connections count."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from tests.faults.own_redis import OwnRedis
from tests.live import daphne

pytestmark = [
    pytest.mark.postgres_only,  # the server stack: Redis behind the cache
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
]


def connections_received(url: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        return int(client.info("stats")["total_connections_received"])
    finally:
        client.close()


def test_api_requests_reuse_the_processes_redis_connections(
    tmp_path: Path, session: Any, token: str
) -> None:
    own = OwnRedis()
    own.start()
    try:
        with daphne(tmp_path, REDIS_URL=own.url) as live:
            headers = {"Authorization": f"Token {token}"}
            with httpx.Client(base_url=live.url, headers=headers, timeout=30) as http:
                for _ in range(3):  # warm: the pool's first connections
                    assert http.get("/api/sessions/").status_code == 200
                before = connections_received(own.url)
                for _ in range(20):
                    assert http.get(f"/api/sessions/{session.pk}/").status_code == 200
                after = connections_received(own.url)
        # The second count's own connection is the one new connection expected.
        assert after - before <= 2, f"{after - before} new Redis connections for 20 requests"
    finally:
        own.stop()
