"""Reads that tolerate lag go to a real streaming replica; current ones to the primary
(issue 21, item 2; forge.db.routing).

The replica is made to lag deterministically: ``pg_wal_replay_pause()`` on it, then
writes on the primary. A read that went to the replica then misses those writes; one
that went to the primary has them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from cluster import pg
from forge.db import routing

pytestmark = [pytest.mark.postgres_only, pytest.mark.usefixtures("routed")]


@pytest.fixture
def chat(pg_pair: tuple[pg.Server, pg.Server]) -> Iterator[dict[str, Any]]:
    """A user, an API client and a session with one message, replayed on the replica."""
    from accounts.services import create_user
    from sessions.services import create_session, update_message, update_part

    primary, replica = pg_pair
    routing.mark_replica_up()
    n = Token.objects.count()
    user = create_user(
        username=f"routed{n}", tenant_name=f"routed{n}", password="x", validate=False
    ).user
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    session = create_session(user=user, title="routed")

    def say(text: str) -> None:
        message = update_message(session=session, info={"role": "user"}).data
        update_part(
            session=session, part={"message_id": message["id"], "type": "text", "text": text}
        )

    say("first")
    pg.wait_replayed(primary, replica)
    yield {"client": client, "session": session, "say": say, "tenant": session.tenant}
    replica.start()  # a test that stopped it
    if replica.psql("SELECT pg_is_wal_replay_paused()") == "t":
        replica.psql("SELECT pg_wal_replay_resume()")
    routing.mark_replica_up()


@pytest.fixture
def lagging(pg_pair: tuple[pg.Server, pg.Server], chat: dict[str, Any]) -> dict[str, Any]:
    """The replica stops replaying; then a second message is written on the primary."""
    _, replica = pg_pair
    replica.psql("SELECT pg_wal_replay_pause()")
    chat["say"]("second")
    return chat


def _texts(body: dict[str, Any]) -> list[str]:
    return [p["text"] for m in body["results"] for p in m["parts"] if p["type"] == "text"]


def _head(chat: dict[str, Any], alias: str) -> int:
    from sessions.models import SessionEvent

    newest = (
        SessionEvent.objects.using(alias)
        .filter(session=chat["session"])
        .order_by("-seq")
        .values_list("seq", flat=True)
        .first()
    )
    return newest or 0


def test_a_history_page_and_an_export_read_the_replica_once_it_has_the_log(
    chat: dict[str, Any],
) -> None:
    from django.db import connections
    from django.test.utils import CaptureQueriesContext

    session, client = chat["session"], chat["client"]
    with CaptureQueriesContext(connections["replica"]) as on_replica:
        page = client.get(f"/api/sessions/{session.pk}/messages/")
        export = client.get(f"/api/sessions/{session.pk}/export/")
        lines = b"".join(export.streaming_content).splitlines()
    assert page.status_code == 200
    assert _texts(page.json()) == ["first"]
    assert len(lines) == 1 + _head(chat, "default")
    read = " ".join(query["sql"] for query in on_replica.captured_queries)
    assert "forge_sessions_message" in read  # the page's rows
    assert "forge_sessions_sessionevent" in read


def test_a_lagging_replica_never_hides_the_callers_own_writes(lagging: dict[str, Any]) -> None:
    """A third-round finding: with the replica behind, the history page did not show
    the reply a ``?wait=1`` prompt had just returned (for as long as the lag lasted).
    Until the replica has the whole log, the page and the export are the primary's."""
    session, client = lagging["session"], lagging["client"]
    replica_head, primary_head = _head(lagging, "replica"), _head(lagging, "default")
    assert replica_head < primary_head  # the replica lags: the setup worked

    page = client.get(f"/api/sessions/{session.pk}/messages/")
    assert page.status_code == 200
    assert _texts(page.json()) == ["first", "second"]
    assert page.json()["head_seq"] == primary_head  # the head of what the page shows

    export = client.get(f"/api/sessions/{session.pk}/export/")
    lines = [json.loads(line) for line in b"".join(export.streaming_content).splitlines()]
    assert lines[0]["events"] == primary_head
    assert [event["seq"] for event in lines[1:]] == list(range(1, primary_head + 1))


def test_a_session_the_replica_has_not_replayed_is_there(
    pg_pair: tuple[pg.Server, pg.Server], chat: dict[str, Any]
) -> None:
    """A third-round finding: a session created while the replica lagged was a 404 on
    its history page and an empty log on export."""
    from sessions.services import create_session, update_message

    _, replica = pg_pair
    replica.psql("SELECT pg_wal_replay_pause()")
    session = create_session(user=chat["session"].user, title="new")
    update_message(session=session, info={"role": "user"})
    client = chat["client"]
    page = client.get(f"/api/sessions/{session.pk}/messages/")
    assert page.status_code == 200, page.content
    assert len(page.json()["results"]) == 1
    export = client.get(f"/api/sessions/{session.pk}/export/")
    lines = [json.loads(line) for line in b"".join(export.streaming_content).splitlines()]
    assert lines[0]["events"] == 2


def test_a_cursor_beyond_the_replica_reads_the_primary(lagging: dict[str, Any]) -> None:
    session, client, tenant = lagging["session"], lagging["client"], lagging["tenant"]
    replica_head, primary_head = _head(lagging, "replica"), _head(lagging, "default")

    # The context as of the primary's head: the replica has not replayed it (it would
    # answer 400, "at must be a seq from 0 to <its head>"), so the primary serves it.
    beyond = client.get(f"/api/sessions/{session.pk}/context/?at={primary_head}")
    assert beyond.status_code == 200, beyond.content
    assert beyond.json()["at"] == primary_head

    # A position the replica has: it serves it.
    from sessions import selectors

    def head() -> int:
        return selectors.head_seq(tenant=tenant, session_id=session.pk)

    assert routing.lagging_read(head, at_least=(tenant, session.pk, replica_head)) == replica_head
    assert routing.lagging_read(head, at_least=(tenant, session.pk, primary_head)) == primary_head

    # A client resuming after what it was told exists (the events route, the stream)
    # reads the primary: it sees the second message although the replica lags.
    events = client.get(f"/api/sessions/{session.pk}/events/?after={replica_head}")
    assert [event["seq"] for event in events.json()["results"]] == list(
        range(replica_head + 1, primary_head + 1)
    )


def test_reads_inside_a_write_go_to_the_primary(lagging: dict[str, Any]) -> None:
    from django.db import transaction

    from sessions import selectors

    tenant, session = lagging["tenant"], lagging["session"]
    assert routing.replica_alias() == routing.REPLICA
    with transaction.atomic():
        assert routing.replica_alias() == routing.PRIMARY
        page = routing.lagging_read(
            lambda: selectors.message_page(tenant=tenant, session_id=session.pk)
        )
    assert len(page.items) == 2


def test_a_stopped_replica_falls_back_to_the_primary(
    pg_pair: tuple[pg.Server, pg.Server], chat: dict[str, Any]
) -> None:
    _, replica = pg_pair
    session, client = chat["session"], chat["client"]
    assert client.get(f"/api/sessions/{session.pk}/messages/").status_code == 200  # connected
    replica.stop()
    chat["say"]("second")

    page = client.get(f"/api/sessions/{session.pk}/messages/")
    assert page.status_code == 200
    assert _texts(page.json()) == ["first", "second"]  # from the primary
    assert routing.replica_alias() == routing.PRIMARY  # left out for a while

    export = client.get(f"/api/sessions/{session.pk}/export/")
    assert export.status_code == 200
    assert len(b"".join(export.streaming_content).splitlines()) == 1 + _head(chat, "default")


def test_the_admin_list_of_sessions_reads_the_replica(lagging: dict[str, Any]) -> None:
    from django.test import Client

    from accounts.services import create_user
    from sessions.services import create_session

    n = Token.objects.count()
    staff = create_user(
        username=f"staff{n}", tenant_name=f"staff{n}", password="x", staff=True, validate=False
    ).user
    staff.is_superuser = True
    staff.save(update_fields=["is_superuser"])
    new = create_session(user=lagging["session"].user, title="written while the replica lags")
    client = Client()
    client.force_login(staff)  # the login's session row: written to the primary

    listed = client.get("/admin/forge_sessions/session/")
    assert listed.status_code == 200
    assert lagging["session"].pk in listed.content.decode()
    assert new.pk not in listed.content.decode()  # the replica has not replayed it


def test_row_level_security_holds_on_the_replica(
    pg_pair: tuple[pg.Server, pg.Server], chat: dict[str, Any]
) -> None:
    """A serving process acts as the application role on the replica too: a lag-tolerant
    read there sees the caller's tenant only, and nothing without one. (The role and
    its policies reach the replica by replication, like the rows.)"""
    from django.core.management import call_command
    from django.db import connections

    from accounts import tenancy
    from accounts.services import create_user
    from sessions.models import Session
    from sessions.services import create_session

    primary, replica = pg_pair
    n = Token.objects.count()
    other = create_user(
        username=f"other{n}", tenant_name=f"other{n}", password="x", validate=False
    ).user
    create_session(user=other, title="another tenant's")
    call_command("setup_app_role", "forge_replica_app", verbosity=0)
    pg.wait_replayed(primary, replica)

    def tenants_read() -> tuple[str, list[int]]:
        rows = Session.objects.values_list("tenant_id", flat=True).distinct()
        return rows.db, sorted(set(rows))

    mine = chat["tenant"].pk
    backend: Any = connections["replica"]
    backend.use_app_role("forge_replica_app")
    try:
        with tenancy.scope([mine]):
            assert routing.lagging_read(tenants_read) == ("replica", [mine])
        with tenancy.scope([]):
            assert routing.lagging_read(tenants_read) == ("replica", [])
    finally:
        backend.use_app_role("")
    # As the owner (management commands), the replica shows every tenant.
    db, seen = routing.lagging_read(tenants_read)
    assert db == "replica"
    assert mine in seen
    assert len(seen) >= 2


def test_every_admin_list_reads_the_replica_and_its_pages_the_primary(
    lagging: dict[str, Any],
) -> None:
    """Not only the sessions' list: every model's list page is a lag-tolerant read
    (``forge.admin_site.ForgeAdminSite.admin_view``); a change page reads the primary."""
    from django.test import Client

    from accounts.services import create_user

    n = Token.objects.count()
    staff = create_user(
        username=f"lists{n}", tenant_name=f"lists{n}", password="x", staff=True, validate=False
    ).user
    staff.is_superuser = True
    staff.save(update_fields=["is_superuser"])
    client = Client()
    client.force_login(staff)  # the login's session row: written to the primary

    # The staff user was written while the replica lags: the users' list, read there,
    # does not have it yet; its change page, read on the primary, does.
    listed = client.get("/admin/accounts/user/")
    assert listed.status_code == 200
    rows = listed.content.decode()
    assert f"/admin/accounts/user/{lagging['session'].user.pk}/change/" in rows
    assert f"/admin/accounts/user/{staff.pk}/change/" not in rows  # (the header names it)
    page = client.get(f"/admin/accounts/user/{staff.pk}/change/")
    assert page.status_code == 200
    assert f"lists{n}" in page.content.decode()


def test_a_session_deleted_and_imported_again_with_its_ids_is_never_read_stale(
    pg_pair: tuple[pg.Server, pg.Server], chat: dict[str, Any]
) -> None:
    """QA (LOW, cluster): an operator deleted a session and imported an older export of
    it, which keeps its ids. With the replica lagging, it still held the deleted log,
    longer than the new one's head: "the replica has the log up to the primary's head"
    held, and the history page and the export served the deleted history. The replica
    serves a session's log only when its head is the primary's, seq and hash."""
    from sessions import services
    from sessions.selectors import export_lines
    from sessions.services.imports import parse_log

    primary, replica = pg_pair
    session, client, user = chat["session"], chat["client"], chat["session"].user
    older = list(export_lines(session=session))  # "first"
    chat["say"]("second")
    pg.wait_replayed(primary, replica)
    replica.psql("SELECT pg_wal_replay_pause()")
    services.delete_session(session=session)
    again = services.import_log(user=user, events=parse_log(older), copy=False)
    assert again.pk == session.pk  # its ids kept
    assert _head(chat, "replica") > _head(chat, "default")  # the deleted log, longer

    page = client.get(f"/api/sessions/{session.pk}/messages/")
    assert page.status_code == 200
    assert _texts(page.json()) == ["first"]
    assert page.json()["head_seq"] == _head(chat, "default")
    export = client.get(f"/api/sessions/{session.pk}/export/")
    assert b"".join(export.streaming_content).decode().splitlines() == [
        line.rstrip("\n") for line in older
    ]
