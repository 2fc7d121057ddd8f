from collections.abc import Iterator

import pytest

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
