"""Two runners racing for one session's lease on PostgreSQL, where taking it is one
statement whose read runs on the statement's snapshot (``lease._TAKE_ONE``): the
second runner waits for the first's session lock, and when the first commits, it
is refused (``SessionBusy``), not handed the lease its stale read missed.

The second runner is let go only once PostgreSQL shows its backend waiting for a
lock (``pg_stat_activity``), so the race is the one meant, not a timing guess."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, connections, transaction

from forge.errors import SessionBusy
from forge.models import SessionLease
from forge.runtime import lease

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgres_only,
    pytest.mark.timeout(60),
]


def _waiting_for_a_lock(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return row is not None and row[0] == "Lock"


@pytest.mark.parametrize("held", ["none", "expired"])
def test_a_runner_that_waited_for_the_lock_is_refused_the_lease_the_first_took(
    session: Any, held: str
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    if held == "expired":  # a dead runner's lease, which both would take over
        past = timezone.now() - timedelta(hours=1)
        SessionLease.objects.create(
            session=session, tenant_id=session.tenant_id, owner="gone", message_id="msg_old",
            acquired_at=past, heartbeat_at=past, expires_at=past,
        )  # fmt: skip
    first_holds = threading.Event()
    first_may_commit = threading.Event()
    second: dict[str, Any] = {}

    def first() -> None:
        try:
            with transaction.atomic():
                lease.acquire(session=session, message_id="msg_first")
                first_holds.set()
                assert first_may_commit.wait(30)
        finally:
            connections.close_all()

    def second_runner() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                second["pid"] = cursor.fetchone()[0]
            second["ready"].set()
            with transaction.atomic():
                lease.acquire(session=session, message_id="msg_second")
            second["outcome"] = "took it"
        except SessionBusy:
            second["outcome"] = "busy"
        finally:
            connections.close_all()

    second["ready"] = threading.Event()
    a = threading.Thread(target=first)
    a.start()
    assert first_holds.wait(30)
    b = threading.Thread(target=second_runner)
    b.start()
    assert second["ready"].wait(30)
    while not _waiting_for_a_lock(second["pid"]):  # blocked on the first's session lock
        if not b.is_alive():
            break
    first_may_commit.set()
    a.join(30)
    b.join(30)
    assert second["outcome"] == "busy"
    held_now = SessionLease.objects.get(session_id=session.pk)
    assert held_now.message_id == "msg_first"
