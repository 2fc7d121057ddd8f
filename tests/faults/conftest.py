from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from forge.throttling import ask_the_cache_again
from tests.api.conftest import token  # noqa: F401 - shared fixtures
from tests.conftest import APP_ROLE

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


@pytest.fixture
def as_app_role() -> Iterator[None]:
    """On PostgreSQL, the test's own requests (``APIClient``) act as the application role
    from here on, under row-level security, as live servers do; the fixtures asked for
    before this one wrote their rows as the owner. Nothing to do on SQLite."""
    if connection.vendor != "postgresql":
        yield
        return
    backend: Any = connection  # forge.db.postgresql's DatabaseWrapper
    backend.use_app_role(APP_ROLE)
    try:
        yield
    finally:
        backend.use_app_role("")
