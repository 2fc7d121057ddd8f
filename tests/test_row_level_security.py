"""Tenancy enforced by PostgreSQL itself (row-level security): as the application
role, a query that forgets to filter by tenant still sees only the caller's rows,
and a write into another tenant is refused by the database."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction
from django.db.utils import ProgrammingError
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from accounts import tenancy
from accounts.selectors import tenant_for_user
from memory import services as memory_services
from sessions.services import create_session

from .conftest import APP_ROLE

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def two_tenants(user: Any, other_user: Any) -> tuple[Any, Any]:
    for owner in (user, other_user):
        create_session(user=owner, title=f"{owner.username}'s chat")
        memory_services.append_dialogue(
            tenant=tenant_for_user(owner),
            user=owner,
            agent="build",
            messages=[{"role": "user", "text": "hello"}],
        )
    return tenant_for_user(user), tenant_for_user(other_user)


@pytest.mark.urls("tests.rls_urls")
def test_a_raw_read_inside_a_request_of_tenant_a_returns_nothing_of_tenant_b(
    two_tenants, user, as_app_role
):
    mine, _ = two_tenants
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    seen = api.get("/everything/").json()
    assert seen == {
        "forge_sessions_session": [mine.pk],
        "forge_sessions_message": [],
        "memory_memorycore": [mine.pk],
    }


def test_without_a_tenant_nothing_is_visible_and_all_means_all(two_tenants, as_app_role):
    def tenants_seen() -> list[int]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT DISTINCT tenant_id FROM forge_sessions_session")
            return sorted(row[0] for row in cursor.fetchall())

    with tenancy.scope([]):
        assert tenants_seen() == []
    with tenancy.scope(tenancy.ALL):
        assert tenants_seen() == sorted(t.pk for t in two_tenants)


def test_a_write_into_another_tenant_is_refused_by_the_database(two_tenants, as_app_role):
    mine, theirs = two_tenants
    with (
        tenancy.scope([mine.pk]),
        pytest.raises(ProgrammingError, match="row-level security"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(
            "UPDATE forge_sessions_session SET tenant_id = %s WHERE tenant_id = %s",
            [theirs.pk, mine.pk],
        )


def test_the_application_role_cannot_bypass_row_level_security():
    with connection.cursor() as cursor:
        cursor.execute("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = %s", [APP_ROLE])
        assert cursor.fetchone() == (False, False)
        cursor.execute("SELECT count(*) FROM pg_tables WHERE tableowner = %s", [APP_ROLE])
        assert cursor.fetchone() == (0,)


def test_pooled_connections_set_the_role_and_tenants_again_on_every_checkout(two_tenants, settings):
    """A pool of one connection (FORGE_DB_POOL) serving as the application role, used by
    two threads' connection wrappers, one per tenant, in turn: the same server
    connection arrives carrying the other tenant's setting, and each wrapper's raw read
    still sees its own tenant's rows only (a wrapper forgets what it sent at checkout)."""
    from forge.db.postgresql import base as app_backend
    from forge.settings.base import database_config

    mine, theirs = two_tenants
    config = {**connection.settings_dict, **database_config("postgres://x@y/z", pool=1)}
    config.update(
        {k: connection.settings_dict[k] for k in ("NAME", "USER", "HOST", "PORT", "PASSWORD")}
    )
    settings.FORGE_DB_APP_ROLE = APP_ROLE
    app_backend.serve_as_app()
    wrappers = {
        tenant.pk: app_backend.DatabaseWrapper(config, alias="pooled") for tenant in two_tenants
    }
    backends: set[int] = set()
    try:
        for _ in range(3):
            for tenant in (mine, theirs):
                pooled = wrappers[tenant.pk]
                with tenancy.scope([tenant.pk]), pooled.cursor() as cursor:
                    cursor.execute("SELECT DISTINCT tenant_id FROM forge_sessions_session")
                    assert [row[0] for row in cursor.fetchall()] == [tenant.pk]
                    cursor.execute("SELECT pg_backend_pid(), current_user")
                    pid, role = cursor.fetchone()
                backends.add(pid)
                assert role == APP_ROLE
                pooled.close()  # back to the pool
        assert len(backends) == 1  # one server connection, both tenants, in turn
    finally:
        for pooled in wrappers.values():
            pooled.close()
        wrappers[mine.pk].close_pool()
        settings.FORGE_DB_APP_ROLE = ""
        app_backend.serve_as_app()


def test_setup_app_role_run_twice_at_once_succeeds_both_times():
    """Roles are the cluster's: two databases set up side by side (the suite's passes,
    two deploys) both create or grant the same role at the same moment. The one that
    lost the race used to fail ("duplicate key value violates unique constraint
    pg_authid_rolname_index", or "tuple concurrently updated"); it tries again."""
    import threading

    from django.core.management import call_command
    from django.db import connections

    for round_ in range(3):
        role = f"forge_race_{round_}"
        barrier = threading.Barrier(2)
        failures: list[Exception] = []

        def setup(
            role: str = role, barrier: threading.Barrier = barrier, failures: list = failures
        ) -> None:
            try:
                barrier.wait()
                call_command("setup_app_role", role, verbosity=0)
            except Exception as exc:  # reported below
                failures.append(exc)
            finally:
                connections.close_all()

        threads = [threading.Thread(target=setup) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        try:
            assert failures == []
        finally:
            with connection.cursor() as cursor:
                cursor.execute(f'DROP OWNED BY "{role}"')
                cursor.execute(f'DROP ROLE "{role}"')


# Tables whose rows carry a tenant but must be read before any tenant is known: a
# caller's memberships are how their tenant is found (``accounts.selectors``), so
# they cannot hide behind it. Every other table with a ``tenant_id`` has the policy.
UNPOLICED = {"accounts_membership"}


def test_every_table_with_a_tenant_id_has_the_tenant_policy():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, c.relrowsecurity,"
            " EXISTS (SELECT 1 FROM pg_policies p WHERE p.tablename = c.relname"
            "         AND p.policyname = 'forge_tenant')"
            " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id'"
            " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')"
        )
        rows = cursor.fetchall()
    assert len(rows) > 10
    unprotected = sorted(name for name, enabled, policy in rows if not (enabled and policy))
    assert unprotected == sorted(UNPOLICED)


def test_a_lease_of_another_tenant_is_not_visible(two_tenants, as_app_role):
    from django.utils import timezone

    from forge.models import SessionLease
    from sessions.models import Session

    mine, theirs = two_tenants
    now = timezone.now()
    with tenancy.scope(tenancy.ALL):
        for tenant in (mine, theirs):
            session = Session.objects.filter(tenant=tenant).get()
            SessionLease.objects.create(
                session=session,
                tenant=tenant,
                owner="p",
                message_id="msg_x",
                acquired_at=now,
                heartbeat_at=now,
                expires_at=now,
            )
    with tenancy.scope([mine.pk]):
        seen = list(SessionLease.objects.values_list("tenant_id", flat=True))
    assert seen == [mine.pk]
