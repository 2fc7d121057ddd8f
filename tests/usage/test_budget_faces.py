"""A used-up budget refuses the next prompt on every face, and writes nothing."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async

from forge.usage.services import record_reply, set_budget
from sessions.models import SessionEvent
from tests.api.test_socket import frames_until, socket

from .helpers import reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


@pytest.fixture
def spent(session, user, agents, settings):
    settings.FORGE_MODEL = "offline/echo"
    set_budget(tenant=session.tenant, monthly_tokens=100)
    _opened, done = reply(session, steps=[{"tokens": {"input": 90, "output": 10}, "cost": 0}])
    record_reply(session=session, info=done)
    return session


def events(session) -> int:
    return SessionEvent.objects.filter(session=session).count()


def test_http_refuses_with_429_and_when_it_resets(api, spent):
    before = events(spent)
    response = api.post(f"/api/sessions/{spent.pk}/messages/", {"text": "one more"}, format="json")
    assert response.status_code == 429
    error = response.json()["error"]
    assert error["code"] == "budget_exceeded"
    assert error["resets_at"].endswith("T00:00:00.000Z")  # a wire time, milliseconds too
    assert "100 tokens" in error["message"]
    assert int(response["Retry-After"]) > 0
    assert events(spent) == before  # nothing written


def test_compacting_is_refused_too(api, spent):
    """A second-round finding: a summary is a model call, and POST compact/ was
    accepted with the budget used up."""
    before = events(spent)
    response = api.post(f"/api/sessions/{spent.pk}/compact/")
    assert response.status_code == 429
    assert response.json()["error"]["code"] == "budget_exceeded"
    assert events(spent) == before


def test_the_ai_sdk_route_refuses_too(api, spent):
    """A new chat is refused before it is created (a third-round finding: the chat's
    session was left behind, and its messages route answered 200 for a chat that had
    none)."""
    from sessions.models import Session

    before = events(spent)
    sessions = Session.objects.count()
    body = {
        "id": "budgetChat",
        "trigger": "submit-message",
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}],
    }
    response = api.post("/api/chat", body, format="json")
    assert response.status_code == 429
    assert response.json()["error"]["code"] == "budget_exceeded"
    assert events(spent) == before
    assert Session.objects.count() == sessions
    assert api.get("/api/chat/budgetChat/messages").status_code == 404


def test_a_users_own_budget_refuses_only_them(api, spent, user):
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    from accounts.models import Membership, User

    set_budget(tenant=spent.tenant, monthly_tokens=0)  # the tenant's limit removed
    url = f"/api/sessions/{spent.pk}/messages/?wait=1"
    response = api.post(url, {"text": "ok"}, format="json")
    assert response.status_code == 200, response.json()
    set_budget(tenant=spent.tenant, user=user, monthly_tokens=50)
    refused = api.post(f"/api/sessions/{spent.pk}/messages/", {"text": "no"}, format="json")
    assert refused.status_code == 429
    assert "your monthly budget" in refused.json()["error"]["message"]
    carol = User.objects.create_user(username="carol", password="pw-carol-123")
    Membership.objects.create(tenant=spent.tenant, user=carol)
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=carol).key}")
    created = other.post("/api/sessions/", {"title": "carol's"}, format="json")
    assert created.status_code == 201, created.json()
    allowed = other.post(
        f"/api/sessions/{created.json()['id']}/messages/?wait=1", {"text": "hi"}, format="json"
    )
    assert allowed.status_code == 200, allowed.json()


async def test_the_socket_refuses_with_an_error_frame(spent, token):
    before = await sync_to_async(events)(spent)
    ws = socket(spent.pk, token)
    await ws.connect(timeout=10)
    await frames_until(ws, lambda f: len(f) >= 1)
    await ws.send_to(text_data=json.dumps({"type": "prompt", "text": "more", "client_id": "c9"}))
    frames = await frames_until(ws, lambda f: bool(f) and f[-1].get("kind") == "error")
    error = frames[-1]
    assert (error["code"], error["client_id"]) == ("budget_exceeded", "c9")
    assert error["resets_at"].endswith("Z")
    await ws.disconnect()
    assert await sync_to_async(events)(spent) == before


def test_a_member_over_their_own_budget_cannot_compact_a_teammates_session(api, spent):
    """The summary is billed to the session's owner, whose budget was the only one
    checked: a member over budget compacted a teammate's session, spending on the
    owner's budget (QA, LOW). The member asking must be within budget too."""
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    from accounts.models import Membership, User
    from sessions.models import Session

    set_budget(tenant=spent.tenant, monthly_tokens=0)  # the tenant's limit removed
    carol = User.objects.create_user(username="carol", password="pw-carol-123")
    Membership.objects.create(tenant=spent.tenant, user=carol)
    own = Session.objects.create(tenant=spent.tenant, user=carol, title="carol's")
    _opened, done = reply(own, steps=[{"tokens": {"input": 90, "output": 10}, "cost": 0}])
    record_reply(session=own, info=done)
    set_budget(tenant=spent.tenant, user=carol, monthly_tokens=50)
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=carol).key}")
    before = events(spent)
    refused = other.post(f"/api/sessions/{spent.pk}/compact/")
    assert refused.status_code == 429, refused.json()
    assert "your monthly budget" in refused.json()["error"]["message"]
    assert events(spent) == before
    assert api.post(f"/api/sessions/{spent.pk}/compact/").status_code != 429  # the owner's
