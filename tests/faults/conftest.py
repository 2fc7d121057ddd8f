from collections.abc import Iterator

import pytest

from forge.throttling import ask_the_cache_again
from tests.api.conftest import token  # noqa: F401 - shared fixtures

from .own_redis import OwnRedis


@pytest.fixture
def own_redis() -> Iterator[OwnRedis]:
    server = OwnRedis()
    server.start()
    try:
        yield server
    finally:
        server.stop()
        # Throttles stop asking a cache that failed for a while; the next test's is fine.
        ask_the_cache_again()
