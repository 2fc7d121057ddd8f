"""Another tenant's session is a 404 on every route (and invisible in lists)."""

from __future__ import annotations

import pytest

from .conftest import error

pytestmark = pytest.mark.django_db

ROUTES = [
    ("get", "/api/sessions/{id}/", None),
    ("patch", "/api/sessions/{id}/", {"title": "mine now"}),
    ("delete", "/api/sessions/{id}/", None),
    ("get", "/api/sessions/{id}/messages/", None),
    ("post", "/api/sessions/{id}/messages/", {"text": "hello"}),
    ("get", "/api/sessions/{id}/events/", None),
    ("get", "/api/sessions/{id}/stream/", None),
    ("post", "/api/sessions/{id}/abort/", None),
    ("post", "/api/sessions/{id}/compact/", None),
    ("post", "/api/sessions/{id}/fork/", {"message_id": "msg_x"}),
    ("get", "/api/sessions/{id}/context/", None),
    ("get", "/api/sessions/{id}/export/", None),
]


@pytest.mark.parametrize(("method", "url", "body"), ROUTES, ids=[f"{m} {u}" for m, u, _ in ROUTES])
def test_a_second_tenants_token_gets_404_on_every_session_route(
    stranger, session, user_message, method, url, body
):
    response = getattr(stranger, method)(url.format(id=session.pk), body, format="json")
    assert response.status_code == 404, response.content
    assert error(response)["code"] == "not_found"
    assert session.events.count() == 2  # nothing written


def test_lists_show_only_the_callers_sessions(stranger, api, session):
    assert stranger.get("/api/sessions/").json()["results"] == []
    assert [s["id"] for s in api.get("/api/sessions/").json()["results"]] == [session.pk]


def test_importing_someone_elses_exported_log_lands_in_your_tenant_not_theirs(
    api, stranger, session, other_user
):
    from sessions.models import Session

    body = b"".join(api.get(f"/api/sessions/{session.pk}/export/").streaming_content)
    response = stranger.generic(
        "POST", "/api/sessions/import/", body, content_type="application/x-ndjson"
    )
    assert response.status_code == 201
    imported = Session.objects.get(pk=response.json()["id"])  # a copy: new ids
    assert imported.pk != session.pk
    assert imported.tenant == other_user.memberships.get().tenant
    assert api.get(f"/api/sessions/{imported.pk}/").status_code == 404
    assert Session.objects.get(pk=session.pk).tenant_id == session.tenant_id  # untouched


@pytest.mark.parametrize("method", ["post", "put", "delete", "head"])
def test_another_method_on_the_stream_is_a_json_405(session, token, method):
    """A third-round finding: CSRF's HTML 403 answered (before the view's own 405)."""
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    response = getattr(client, method)(
        f"/api/sessions/{session.pk}/stream/", HTTP_AUTHORIZATION=f"Token {token}"
    )
    assert response.status_code == 405
    assert response["Allow"] == "GET, OPTIONS"
    if method != "head":
        assert error(response)["code"] == "method_not_allowed"


def test_options_on_the_stream_describes_it(session, token):
    """As ``OPTIONS`` on the API's DRF routes does (it was 405 here)."""
    from django.test import Client

    response = Client(enforce_csrf_checks=True).options(f"/api/sessions/{session.pk}/stream/")
    assert response.status_code == 200
    assert response["Allow"] == "GET, OPTIONS"
    assert response.json()["renders"] == ["text/event-stream"]
