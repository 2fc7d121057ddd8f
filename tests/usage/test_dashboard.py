"""The operators' dashboard on the admin's index: what it shows, and to whom."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils import timezone

from forge.models import SessionLease
from forge.usage.services import record_reply
from memory.models import MemoryCore

from .helpers import reply

pytestmark = pytest.mark.django_db


@pytest.fixture
def busy(session, user):
    _opened, done = reply(session, steps=[{"tokens": {"input": 50, "output": 5}, "cost": 0.75}])
    record_reply(session=session, info=done)
    _opened, done = reply(
        session,
        steps=[{"tokens": {"input": 5}, "cost": 0.25}],
        error={"name": "ProviderError", "message": "upstream <b>503</b>"},
    )
    record_reply(session=session, info=done)
    now = timezone.now()
    SessionLease.objects.create(
        session=session,
        tenant_id=session.tenant_id,
        owner="daphne-2:4242",
        message_id=done["id"],
        acquired_at=now,
        heartbeat_at=now,
        expires_at=now + dt.timedelta(seconds=30),
    )
    MemoryCore.objects.create(
        tenant=session.tenant,
        user=user,
        agent="build",
        window_count=55,
        last_interaction_at=now - dt.timedelta(days=2),
    )
    return session


def test_the_index_is_the_dashboard(admin_client, busy):
    page = admin_client.get(reverse("admin:index"))
    assert page.status_code == 200
    text = page.text
    assert "Forge administration" in text
    assert "<strong>2</strong> turns · cost <strong>1.000000</strong>" in text
    assert "failure rate <strong>50 %</strong>" in text
    assert "<svg" in text
    assert "turns, cost 1.000000</title>" in text  # today's bar
    assert "<td>alice</td><td>2</td><td>1.000000</td>" in text
    assert "<td>build</td><td>2</td><td>1.000000</td>" in text
    assert "<code>ProviderError</code> upstream &lt;b&gt;503&lt;/b&gt;" in text  # escaped
    assert len(page.context["dashboard"].recent_failures) == 1  # the finished reply is none
    assert "daphne-2:4242" in text
    assert "<strong>1</strong> streaming now" in text
    assert "<td>55</td>" in text  # the overdue core's window
    # How long it waited, in whole seconds (QA: "idle for 0:02:04.630360").
    assert re.search(r"<td>55</td><td>2 days, 0:00:\d\d</td>", text), text
    assert "first delta" in text
    assert admin_client.get(reverse("admin:index"), {"days": "30"}).context["period"] == 30
    assert admin_client.get(reverse("admin:index"), {"days": "x"}).context["period"] == 14


def test_staff_see_only_their_tenants_and_only_with_the_permission(client, busy, other_user):
    other_user.is_staff = True
    other_user.save()
    client.force_login(other_user)
    page = client.get(reverse("admin:index"))
    assert page.status_code == 200
    assert "Dashboard:" not in page.text  # no view_usage permission
    other_user.user_permissions.add(Permission.objects.get(codename="view_usage"))
    page = client.get(reverse("admin:index"))
    assert "Dashboard:" in page.text
    assert "<strong>0</strong> turns" in page.text
    assert "daphne-2:4242" not in page.text
    assert "ProviderError" not in page.text
    assert "alice" not in page.text


def test_latency_samples_replies_not_fork_copies_or_summaries(busy, user):
    """A fourth-round finding: a fork's copies (which keep their replies' times) and a
    compaction's summary were sampled as replies."""
    from forge.dashboard import _latency
    from sessions import services
    from sessions.services.transfer import fork_session

    start = timezone.now() - dt.timedelta(days=1)
    assert _latency(None, start)["replies"] == 1  # the finished one; the failed is none
    services.update_message(
        session=busy,
        info={
            "role": "assistant",
            "summary": True,
            "agent": "build",
            "model": {"provider": "offline", "model": "echo"},
            "completed_at": "2099-01-01T00:00:00.000Z",
        },
    )
    fork_session(
        session=busy,
        user=user,
        before_message_id=services.update_message(session=busy, info={"role": "user"}).data["id"],
    )
    assert _latency(None, start)["replies"] == 1


def test_a_reply_completed_before_it_began_is_no_latency_sample(busy):
    """Times written through the store by a plugin, not a turn's: such a reply put a
    negative p50 on the page (QA)."""
    from forge.dashboard import _latency
    from sessions import services

    start = timezone.now() - dt.timedelta(days=1)
    before = _latency(None, start)
    opened = services.update_message(
        session=busy, info={"role": "assistant", "agent": "build"}
    ).data
    services.update_message(
        session=busy, info={"id": opened["id"], "completed_at": "2026-01-01T00:00:00.000Z"}
    )
    after = _latency(None, start)
    assert after == before
    assert after["reply_p50"] is not None
    assert after["reply_p50"] >= 0


def test_an_imported_logs_replies_are_no_latency_and_no_failure(busy, user):
    """An import's replies ran elsewhere, and a hand-made log says what it likes: a kept
    log keeps its session's time, so its replies were sampled and listed as this
    server's. Only what this server wrote since the import is."""
    from forge.dashboard import dashboard
    from sessions import selectors, services

    now = timezone.now()
    before = dashboard(tenant_ids=None, days=14, now=now)
    events = services.parse_log(list(selectors.export_lines(session=busy)))
    services.import_log(user=user, events=events, copy=True)
    after = dashboard(tenant_ids=None, days=14, now=now)
    assert after.latency == before.latency
    assert len(after.recent_failures) == len(before.recent_failures) == 1
    assert (after.turns, after.cost) == (before.turns, before.cost)


def test_a_deleted_users_usage_still_shows(admin_client, tenant, busy):
    """A QA finding: usage rows keep a deleted user's id (what was used stays counted),
    but the admin's usage list and the dashboard's top users joined the users' table:
    the rows vanished from both, while the totals still held them."""
    from accounts.models import Membership, User
    from sessions.services import create_session

    dave = User.objects.create_user(username="dave", password="pw-dave-123")
    Membership.objects.create(tenant=tenant, user=dave)
    _opened, done = reply(create_session(user=dave), steps=[{"tokens": {"input": 9}, "cost": 5}])
    from sessions.models import Session

    record_reply(session=Session.objects.get(user=dave), info=done)
    dave_id = dave.pk
    dave.delete()
    page = admin_client.get(reverse("admin:index"))
    assert f"<td>user {dave_id}</td><td>1</td><td>5.000000</td>" in page.text
    listed = admin_client.get(reverse("admin:forge_usage_changelist"))
    assert listed.status_code == 200
    rows = listed.context["cl"].result_list
    assert len(rows) == listed.context["cl"].result_count == 2
    assert f"user {dave_id}" in listed.text


def test_a_search_of_the_usage_list_keeps_a_deleted_users_rows(admin_client, tenant, busy):
    """QA: the list kept a deleted user's rows, but a search (by agent, model or user)
    joined the users' table and dropped them: searching "build" listed 1 of 2 rows. The
    user is searched by the name each row shows."""
    from accounts.models import Membership, User
    from sessions.models import Session
    from sessions.services import create_session

    dave = User.objects.create_user(username="dave", password="pw-dave-123")
    Membership.objects.create(tenant=tenant, user=dave)
    _opened, done = reply(create_session(user=dave), steps=[{"tokens": {"input": 9}, "cost": 5}])
    record_reply(session=Session.objects.get(user=dave), info=done)
    dave.delete()
    url = reverse("admin:forge_usage_changelist")
    assert admin_client.get(url, {"q": "build"}).context["cl"].result_count == 2
    assert admin_client.get(url, {"q": "alice"}).context["cl"].result_count == 1
    assert admin_client.get(url, {"q": "dave"}).context["cl"].result_count == 0
    assert admin_client.get(url, {"q": 'alice "offline/echo"'}).context["cl"].result_count == 1
    assert admin_client.get(url, {"q": " ".join(["build"] * 1000)}).status_code == 200


def test_a_failure_behind_many_newer_aborts_is_still_listed(admin_client, busy):
    """The list read the newest 50 replies with any error, then dropped the aborted ones:
    fifty aborts newer than a failure hid it, under a header that counted it (QA)."""
    aborted = {"name": "MessageAbortedError", "message": "aborted by the user"}
    for _ in range(55):
        _opened, done = reply(busy, steps=[{"tokens": {"input": 1}, "cost": 0}], error=aborted)
        record_reply(session=busy, info=done)
    failures = admin_client.get(reverse("admin:index")).context["dashboard"].recent_failures
    assert [f["name"] for f in failures] == ["ProviderError"]


def test_the_charts_scale_names_a_small_cost_as_the_bars_do():
    """QA: the chart's scale was written with four places, so a demo's days of
    ~0.00001 each read "max 0.0000" over bars of full height (their titles, the
    totals and the tables write six)."""
    from decimal import Decimal

    from forge.admin_site import chart
    from forge.dashboard import Day

    svg = chart([Day(dt.date(2026, 12, 6)), Day(dt.date(2026, 12, 7), 3, Decimal("0.0000273"))])
    assert "turns, cost 0.000027</title>" in svg
    assert ">max 0.000027</text>" in svg
