"""``GET /api/usage/``: staff see their tenant, users themselves; bad input is a 400."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import Permission
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from forge.usage.services import record_reply

from .helpers import reply

pytestmark = pytest.mark.django_db


def client_for(user):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client


@pytest.fixture
def used(session, user, other_user):
    from accounts.models import Membership, User
    from sessions.services import create_session

    mate = User.objects.create_user(username="carol", password="pw-carol-123")
    Membership.objects.create(tenant=session.tenant, user=mate)
    for speaker, tokens, cost in ((user, 10, 0.5), (mate, 30, 0.25), (user, 5, 0.25)):
        _opened, done = reply(
            session, steps=[{"tokens": {"input": tokens}, "cost": cost}], user_id=speaker.pk
        )
        record_reply(session=session, info=done)
    elsewhere = create_session(user=other_user)
    _opened, done = reply(elsewhere, steps=[{"tokens": {"input": 1000}, "cost": 9}])
    record_reply(session=elsewhere, info=done)
    return {"alice": user, "carol": mate, "bob": other_user}


def test_a_user_sees_their_own_usage_only(used):
    response = client_for(used["alice"]).get("/api/usage/", {"group_by": "user"})
    assert response.status_code == 200
    body = response.json()
    assert body["group_by"] == "user"
    assert [(r["user"], r["turns"], r["input_tokens"]) for r in body["results"]] == [
        (used["alice"].pk, 2, 15)
    ]
    assert body["results"][0]["cost"] == pytest.approx(0.75)
    refused = client_for(used["alice"]).get("/api/usage/", {"user": used["carol"].pk})
    assert refused.status_code == 403


def test_staff_without_the_view_usage_permission_see_themselves_only(used):
    """As the admin's dashboard refuses them (QA: the API showed them every user's)."""
    staff = used["carol"]
    staff.is_staff = True
    staff.save()
    client = client_for(staff)
    by_user = client.get("/api/usage/", {"group_by": "user"}).json()["results"]
    assert [r["user"] for r in by_user] == [staff.pk]
    refused = client.get("/api/usage/", {"user": used["alice"].pk})
    assert refused.status_code == 403
    assert "forge.view_usage" in refused.json()["error"]["message"]


def test_staff_see_their_tenant_by_user_agent_model_and_day(used):
    staff = used["carol"]
    staff.is_staff = True
    staff.save()
    staff.user_permissions.add(Permission.objects.get(codename="view_usage"))
    client = client_for(staff)
    by_user = client.get("/api/usage/", {"group_by": "user"}).json()["results"]
    assert [(r["user"], r["turns"]) for r in by_user] == [(used["alice"].pk, 2), (staff.pk, 1)]
    by_model = client.get("/api/usage/", {"group_by": "model"}).json()["results"]
    assert [(r["model"], r["turns"], r["input_tokens"]) for r in by_model] == [
        ("offline/echo", 3, 45)
    ]
    today = dt.datetime.now(dt.UTC).date().isoformat()
    by_day = client.get("/api/usage/").json()
    assert [r["day"] for r in by_day["results"]] == [today]
    assert by_day["results"][0]["cost"] == pytest.approx(1.0)  # never bob's tenant's 9
    one = client.get("/api/usage/", {"group_by": "agent", "user": used["alice"].pk}).json()
    assert [(r["agent"], r["turns"]) for r in one["results"]] == [("build", 2)]
    empty = client.get("/api/usage/", {"from": "2020-01-01", "to": "2020-01-31"}).json()
    assert empty["results"] == []
    # ``to`` alone: from the first of its month (it was a 400 for a day of an earlier month)
    alone = client.get("/api/usage/", {"to": "2020-01-31"})
    assert alone.status_code == 200
    assert (alone.json()["from"], alone.json()["to"]) == ("2020-01-01", "2020-01-31")


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"group_by": "tenant"}, "group_by"),
        ({"from": "yesterday"}, "from"),
        ({"to": "2026-13-01"}, "to"),
        ({"from": "2026-05-02", "to": "2026-05-01"}, "to"),
        ({"from": "2024-01-01", "to": "2026-01-01"}, "to"),
        ({"user": "alice"}, "user"),
        # a fourth-round finding: 500s and a user read from another script's digits
        ({"user": "\u00b2"}, "user"),
        ({"user": "\u0663"}, "user"),
        ({"user": "99999999999999999999999"}, "user"),
        ({"from": "20261201"}, "from"),
        ({"from": "2026-W49-1"}, "from"),
    ],
)
def test_bad_ranges_and_groups_are_400(used, params, field):
    response = client_for(used["alice"]).get("/api/usage/", params)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert field in error["fields"]


def test_usage_needs_a_login(used):
    assert APIClient().get("/api/usage/").status_code == 401
