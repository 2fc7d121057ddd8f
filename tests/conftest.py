"""Shared fixtures, and the choice of stack.

The suite runs twice (``make test``): on the embedded stack (SQLite + the
in-memory channel layer) and on the server stack (PostgreSQL + Redis, from
``FORGE_TEST_DATABASE_URL`` / ``FORGE_TEST_REDIS_URL``, selected by
``FORGE_TEST_STACK=server``). A test marked ``postgres_only`` or
``sqlite_only`` is deselected (not skipped) on the other stack.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import dj_database_url
import pytest
from django.conf import settings

STACK = settings.FORGE_TEST_STACK
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _server_stack_problem() -> str | None:
    database_url = settings.FORGE_TEST_DATABASE_URL
    redis_url = settings.FORGE_TEST_REDIS_URL
    if not database_url or not redis_url:
        return "FORGE_TEST_DATABASE_URL and FORGE_TEST_REDIS_URL must both be set"
    config = dj_database_url.parse(database_url)
    if config["ENGINE"] != "django.db.backends.postgresql":
        return f"FORGE_TEST_DATABASE_URL must point at PostgreSQL, not {config['ENGINE']}"
    import psycopg
    import redis

    try:
        psycopg.connect(
            host=config["HOST"] or None,
            port=config["PORT"] or None,
            user=config["USER"] or None,
            password=config["PASSWORD"] or None,
            dbname="postgres",
            connect_timeout=5,
        ).close()
    except psycopg.Error as exc:
        return f"PostgreSQL at {config['HOST']}:{config['PORT']} is unreachable: {exc}"
    try:
        redis.Redis.from_url(redis_url, socket_connect_timeout=5).ping()
    except redis.RedisError as exc:
        return f"Redis at {redis_url} is unreachable: {exc}"
    return None


def pytest_configure(config: pytest.Config) -> None:
    if STACK not in ("embedded", "server"):
        pytest.exit(f"FORGE_TEST_STACK must be 'embedded' or 'server', not {STACK!r}", 2)
    if STACK == "server":
        problem = _server_stack_problem()
        if problem and (IN_CI or settings.FORGE_TEST_DATABASE_URL or settings.FORGE_TEST_REDIS_URL):
            pytest.exit(f"server stack (PostgreSQL + Redis) cannot run: {problem}", 3)
        if problem:
            pytest.exit(f"server stack skipped (not configured): {problem}", 0)


def pytest_report_header(config: pytest.Config) -> str:
    db = settings.DATABASES["default"]
    layer = settings.CHANNEL_LAYERS["default"]["BACKEND"].rsplit(".", 1)[-1]
    return f"forge stack: {STACK} ({db['ENGINE'].rsplit('.', 1)[-1]} + {layer})"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unwanted = "sqlite_only" if STACK == "server" else "postgres_only"
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        (drop if item.get_closest_marker(unwanted) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(autouse=True)
def _delete_logs_before_flush(request: pytest.FixtureRequest) -> Iterator[None]:
    """Transactional tests end with a flush, which on SQLite is a plain DELETE per table,
    and the append-only trigger refuses a DELETE of events. Delete sessions the one
    allowed way first."""
    yield
    marker = request.node.get_closest_marker("django_db")
    transactional = "transactional_db" in request.fixturenames or (
        marker is not None and marker.kwargs.get("transaction")
    )
    if transactional and settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        from sessions.models import Session
        from sessions.services import delete_session

        for session in Session.objects.all():
            delete_session(session=session)


# --- objects ----------------------------------------------------------------------


@pytest.fixture
def agents(transactional_db: Any) -> dict[str, Any]:
    """The default agents (a transactional test's flush removes migration data)."""
    from forge.models import Agent

    build, _ = Agent.objects.update_or_create(
        name="build",
        defaults={
            "system_prompt": "You are Forge.",
            "tools": [],
            "step_limit": 10,
            "is_default": True,
        },
    )
    explore, _ = Agent.objects.update_or_create(
        name="explore",
        defaults={
            "system_prompt": "You explore.",
            "tools": ["list_files", "read_file"],
            "step_limit": 4,
            "is_default": False,
        },
    )
    return {"build": build, "explore": explore}


@pytest.fixture
def tenant(db: Any) -> Any:
    from accounts.models import Tenant

    return Tenant.objects.create(name="acme")


@pytest.fixture
def user(tenant: Any) -> Any:
    from accounts.models import Membership, User

    user = User.objects.create_user(username="alice", password="pw-alice-123")
    Membership.objects.create(tenant=tenant, user=user)
    return user


@pytest.fixture
def other_user(db: Any) -> Any:
    """A user of another tenant."""
    from accounts.models import Membership, Tenant, User

    other = Tenant.objects.create(name="globex")
    user = User.objects.create_user(username="bob", password="pw-bob-123")
    Membership.objects.create(tenant=other, user=user)
    return user


@pytest.fixture
def session(user: Any) -> Any:
    from sessions.services import create_session

    return create_session(user=user, title="First chat")


@pytest.fixture
def user_message(session: Any) -> dict[str, Any]:
    from sessions.services import update_message

    return update_message(session=session, info={"role": "user"}).data


@pytest.fixture(autouse=True)
def _close_runtime_connections(request: pytest.FixtureRequest) -> Iterator[None]:
    """Turns write from the runtime's own thread; close its connection after each
    test (before a flush, and before the test database is dropped)."""
    yield
    if "transactional_db" in request.fixturenames or (
        (marker := request.node.get_closest_marker("django_db")) is not None
        and marker.kwargs.get("transaction")
    ):
        from asgiref.sync import SyncToAsync
        from django.db import connections

        from forge.db.worker import close_connections

        close_connections()
        # Django's AsyncClient runs sync views on asgiref's shared thread and, like the
        # sync test client, leaves that thread's connection open.
        SyncToAsync.single_thread_executor.submit(connections.close_all).result()


@pytest.fixture(scope="session", autouse=True)
def _close_runtime_connections_at_the_end(django_db_setup: Any) -> Iterator[None]:
    """Background work (titles) may reopen the runtime's connection after a test; close it
    before the test database is dropped."""
    yield
    from forge.db.worker import close_connections

    close_connections()


@pytest.fixture
async def _runtime_settles() -> AsyncIterator[None]:
    """A test may end as soon as it saw a reply finish, while its turn still releases the
    lease; wait for the runtime's tasks before the test's event loop closes (a receive
    left pending on a closed loop would wedge channels-redis for the tests after)."""
    yield
    from channels.layers import channel_layers

    from forge.realtime import hub
    from forge.runtime import settle

    await settle()
    left = hub.subscribed_sessions()
    assert not left, f"sockets or SSE streams were left subscribed to {left}"
    # Each test runs on its own event loop, and channels-redis keeps receive state per
    # layer instance: let the next test make its own.
    channel_layers.backends = {}


@pytest.fixture(autouse=True)
def _publish_afresh() -> None:
    """The bus and the in-flight mirror stop asking a Redis that failed for a while (a
    circuit breaker): a test that failed them does not drop the next test's frames."""
    from forge.runtime import inflight
    from sessions import bus

    bus.forget_failures()
    if inflight._mirror is not None:
        inflight._mirror.try_again()


@pytest.fixture(autouse=True)
def _let_async_tests_settle(request: pytest.FixtureRequest) -> None:
    if inspect.iscoroutinefunction(getattr(request.node, "function", None)):
        request.getfixturevalue("_runtime_settles")


APP_ROLE = "forge_test_app"


@pytest.fixture(scope="session", autouse=True)
def _app_role(django_db_setup: Any, django_db_blocker: Any) -> None:
    """On PostgreSQL, the role serving processes act as under row-level security
    (``manage.py setup_app_role``): live servers in the suite run as it."""
    from django.core.management import call_command
    from django.db import connection

    if connection.vendor == "postgresql":
        with django_db_blocker.unblock():
            call_command("setup_app_role", APP_ROLE, verbosity=0)


@pytest.fixture
def as_app_role() -> Iterator[None]:
    """On PostgreSQL, the test's own queries and requests (``APIClient``) act as the
    application role from here on, under row-level security, as live servers do; the
    fixtures asked for before this one wrote their rows as the owner. Nothing to do on
    SQLite."""
    from django.db import connection

    if connection.vendor != "postgresql":
        yield
        return
    backend: Any = connection  # forge.db.postgresql's DatabaseWrapper
    backend.use_app_role(APP_ROLE)
    try:
        yield
    finally:
        backend.use_app_role("")
