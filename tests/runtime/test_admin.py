import pytest
from django.urls import reverse

from forge.models import Agent

pytestmark = pytest.mark.django_db


@pytest.fixture
def build():
    return Agent.objects.update_or_create(name="build", defaults={"is_default": True})[0]


def test_agents_are_editable_in_the_admin_with_their_tools(admin_client, build):
    url = reverse("admin:forge_agent_change", args=[build.pk])
    page = admin_client.get(url)
    assert page.status_code == 200
    assert 'value="read_file"' in page.text
    assert 'value="task"' in page.text
    response = admin_client.post(
        url,
        {
            "name": "build",
            "description": "d",
            "system_prompt": "Be brief.",
            "model": "offline/echo",
            "tools": ["read_file", "list_files"],
            "step_limit": 5,
            "temperature": "0.2",
            "is_default": "on",
        },
    )
    assert response.status_code == 302, response.content[:2000]
    build.refresh_from_db()
    assert (build.tools, build.step_limit, build.system_prompt) == (
        ["read_file", "list_files"],
        5,
        "Be brief.",
    )


def test_an_agent_name_must_be_a_slug(admin_client):
    response = admin_client.post(
        reverse("admin:forge_agent_add"), {"name": "Bad Name", "step_limit": 3, "tools": []}
    )
    assert response.status_code == 200
    assert "lower-case letters" in response.text
    assert not Agent.objects.filter(name="Bad Name").exists()


def test_the_session_page_shows_what_the_model_sees_with_hidden_and_pruned_items(
    admin_client, session
):
    from forge.context.boundary import record_compaction
    from sessions import selectors, services

    done = "2026-11-30T00:00:01.000Z"
    for n in range(3):
        user = services.update_message(session=session, info={"role": "user"}).data["id"]
        services.update_part(
            session=session, part={"message_id": user, "type": "text", "text": f"question {n}"}
        )
        reply = services.update_message(
            session=session, info={"role": "assistant", "parent_id": user, "completed_at": done}
        ).data["id"]
        services.update_part(
            session=session,
            part={
                "message_id": reply,
                "type": "tool",
                "call_id": f"c{n}",
                "tool": "read_file",
                "state": {
                    "status": "completed",
                    "input": {"path": "a"},
                    "output": f"output {n}",
                    "title": "",
                    "metadata": {},
                    "time": {"start": done, "end": done, "compacted": done if n == 2 else None},
                },
            },
        )
        if n == 1:
            before = selectors.head_seq(tenant=session.tenant, session_id=session.pk)
            record_compaction(
                session, summary="THE SUMMARY", auto=False, overflow=False,
                tail_start_id=None, model="x/y",
            )  # fmt: skip
    change = admin_client.get(reverse("admin:forge_sessions_session_change", args=[session.pk]))
    url = reverse("admin:forge_sessions_session_context", args=[session.pk])
    assert url in change.text
    page = admin_client.get(url)
    assert page.status_code == 200
    assert "THE SUMMARY" in page.text
    assert "question 0" not in page.text
    assert "4 hidden" in page.text
    assert "1 tool output(s) pruned" in page.text
    then = admin_client.get(url + f"?at={before}")
    assert "question 0" in then.text
    assert "0 hidden" in then.text
    bad = admin_client.get(url + "?at=999999")
    assert "at must be a seq" in bad.text


def test_staff_see_only_the_leases_of_their_tenants_sessions(session, tenant, other_user):
    """Issue 17: the lease list showed every tenant's session ids to any staff user."""
    from datetime import timedelta

    from django.contrib.auth.models import Permission
    from django.test import Client
    from django.utils import timezone

    from accounts.models import Membership, User
    from forge.models import SessionLease

    now = timezone.now()
    SessionLease.objects.create(
        session=session,
        tenant_id=session.tenant_id,
        owner="worker-7",
        message_id="msg_1",
        acquired_at=now,
        heartbeat_at=now,
        expires_at=now + timedelta(minutes=1),
    )
    view = Permission.objects.get(codename="view_sessionlease")
    listings = {}
    for name, member_of in (("outsider", other_user.memberships.get().tenant), ("insider", tenant)):
        staff = User.objects.create_user(username=name, password="pw-staff-123", is_staff=True)
        Membership.objects.create(tenant=member_of, user=staff)
        staff.user_permissions.set([view])
        client = Client()
        client.force_login(staff)
        listings[name] = client.get(reverse("admin:forge_sessionlease_changelist"))
        assert listings[name].status_code == 200
    assert "worker-7" not in listings["outsider"].text
    assert "First chat" not in listings["outsider"].text
    assert "worker-7" in listings["insider"].text
    assert "First chat" in listings["insider"].text


def test_the_admin_refuses_to_delete_a_session_while_a_turn_runs(admin_client, session, tenant):
    """As the API's DELETE does (409 busy). Before, the admin deleted it under the turn: the
    turn lost its lease seconds later and its reply was counted nowhere (no usage, no
    budget, no ``turn.ended``; QA)."""
    from django.contrib.messages import get_messages
    from django.db import transaction

    from forge.runtime import lease
    from sessions.models import Session

    Session.objects.filter(pk=session.pk).update(tenant=tenant)
    idle = Session.objects.create(tenant=tenant, user=session.user, title="idle")
    with transaction.atomic():
        lease.acquire(session=session, message_id="msg_running")
    url = reverse("admin:forge_sessions_session_delete", args=[session.pk])
    response = admin_client.post(url, {"post": "yes"})
    assert response.status_code == 302
    assert Session.objects.filter(pk=session.pk).exists()
    shown = [str(m) for m in get_messages(response.wsgi_request)]
    assert any("running a turn" in m for m in shown), shown
    changelist = reverse("admin:forge_sessions_session_changelist")
    response = admin_client.post(
        changelist,
        {"action": "delete_selected", "post": "yes", "_selected_action": [session.pk, idle.pk]},
    )
    assert response.status_code == 302
    assert Session.objects.filter(pk=session.pk).exists()  # busy: kept
    assert not Session.objects.filter(pk=idle.pk).exists()  # idle: deleted
    shown = [str(m) for m in get_messages(response.wsgi_request)]
    assert any(session.pk in m and "running a turn" in m for m in shown), shown
    # Counted and logged as deleted: the idle one only (review).
    assert any("Successfully deleted 1 session" in m for m in shown), shown


@pytest.mark.parametrize(
    ("model", "error"),
    [
        ("gpt-4o", "provider/model"),
        ("nope/gpt-4o", "unknown provider"),
        ('openai/gpt"x y', "no spaces"),
        ("openai//", "empty segment"),
        ("openai/org//gpt-4o", "empty segment"),
        ("openai/gpt-4o/", "empty segment"),
    ],
)
def test_an_agent_model_must_name_a_known_provider(admin_client, build, model, error):
    """Any string was taken, and every turn of the agent then failed (QA)."""
    url = reverse("admin:forge_agent_change", args=[build.pk])
    response = admin_client.post(
        url, {"name": "build", "model": model, "tools": [], "step_limit": 5, "is_default": "on"}
    )
    assert response.status_code == 200
    assert error in response.text
    build.refresh_from_db()
    assert build.model != model
