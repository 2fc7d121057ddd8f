"""A NUL character in a request's path, query string, headers or cookies, or in an admin
form, is a 400 before it reaches the database (issue 17: PostgreSQL refuses NUL in text,
so ``/admin/forge_sessions/sessionevent/?type__exact=%00`` was a 500). Both stacks:
the answer is the same on SQLite, where the NUL did no harm but meant nothing either."""

from __future__ import annotations

from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token

from sessions.models import Session

pytestmark = pytest.mark.django_db

NUL = "\x00"


@pytest.fixture
def token(user: Any) -> str:
    return Token.objects.get_or_create(user=user)[0].key


def plain_400(response: Any) -> None:
    assert response.status_code == 400, response.content[:300]
    assert response["Content-Type"].startswith("text/plain")
    assert b"NUL" in response.content


def json_400(response: Any) -> None:
    assert response.status_code == 400, response.content[:300]
    body = response.json()
    assert body["error"]["code"] == "invalid"
    assert "NUL" in body["error"]["message"]


def test_the_admin_answers_400_to_a_nul_in_a_filter_a_search_a_path_or_a_form(
    admin_client, session
):
    events = reverse("admin:forge_sessions_sessionevent_changelist")
    sessions = reverse("admin:forge_sessions_session_changelist")
    assert admin_client.get(events, {"type__exact": "session.created"}).status_code == 200
    for response in (
        admin_client.get(events, {"type__exact": NUL}),
        admin_client.get(events, {"q": f"a{NUL}b"}),
        admin_client.get(events, {f"type__exact{NUL}": "x"}),
        admin_client.get(sessions, {"tenant__id__exact": NUL}),
        admin_client.get(reverse("admin:accounts_user_changelist"), {"q": NUL}),
        admin_client.get("/admin/forge_sessions/session/%00/change/"),
        admin_client.post(sessions, {"action": "delete_selected", "_selected_action": [NUL]}),
    ):
        plain_400(response)
    assert Session.objects.filter(pk=session.pk).exists()


def test_a_nul_in_a_cookie_or_a_header_is_a_400_on_any_page(client, user):
    client.cookies["sessionid"] = f"abcdefgh{NUL}ijklmnop"
    plain_400(client.get("/login/"))
    plain_400(Client().get("/login/", HTTP_X_FORWARDED_FOR=f"1.2.3.4{NUL}"))
    assert Client().get("/login/").status_code == 200


def test_the_api_answers_a_json_400_to_a_nul_anywhere_in_the_request(client, session, token):
    auth = {"HTTP_AUTHORIZATION": f"Token {token}"}
    assert client.get("/api/sessions/", **auth).status_code == 200
    for response in (
        client.get("/api/sessions/", {"cursor": NUL}, **auth),
        client.get("/api/sessions/", {"limit": "10", "x": f"a{NUL}"}, **auth),
        client.get("/api/memory/search/", {"q": f"notes{NUL}"}, **auth),
        client.get(f"/api/sessions/{session.pk}/events/", {"after": NUL}, **auth),
        client.get("/api/sessions/%00/", **auth),
        client.get("/api/chat/%00/stream", **auth),
        client.get("/api/sessions/", HTTP_AUTHORIZATION=f"Token abc{NUL}def"),
    ):
        json_400(response)


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
async def test_a_socket_whose_handshake_holds_a_nul_closes_4400(session, token):
    from forge.asgi import application

    origin = (b"origin", b"http://testserver")
    good = (b"authorization", f"Token {token}".encode())
    for path, headers in (
        (f"/ws/sessions/{session.pk}/?after=0&x=%00", [origin, good]),
        (f"/ws/sessions/{session.pk}/", [origin, (b"authorization", b"Token abc\x00def")]),
        ("/ws/sessions/%00/", [origin, good]),
    ):
        ws = WebsocketCommunicator(application, path, headers=headers)
        connected, _ = await ws.connect(timeout=10)
        assert connected, path
        assert await ws.receive_output(timeout=10) == {"type": "websocket.close", "code": 4400}
        await ws.disconnect()


@pytest.mark.parametrize("debug", [False, True])
def test_too_many_query_parameters_or_form_fields_is_a_json_400_on_the_api(
    client, settings, session, token, debug
):
    """QA: more than ``DATA_UPLOAD_MAX_NUMBER_FIELDS`` (1,000) query parameters or form
    fields made Django raise ``TooManyFieldsSent`` from the first read of them (this
    middleware's, or DRF's parser's): an HTML 400, and under DEBUG a 500 (its error page
    reads the query string again). The API answers its JSON 400; a page, plain text."""
    settings.DEBUG = debug
    auth = {"HTTP_AUTHORIZATION": f"Token {token}"}
    many = "&".join("a=1" for _ in range(1001))
    for response in (
        client.get(f"/api/sessions/?{many}", **auth),
        client.get(f"/api/sessions/{session.pk}/events/?{many}", **auth),
        client.get(f"/api/sessions/?{many}"),  # before authentication too
        client.post(
            "/api/sessions/",
            data=f"title=x&{many}",
            content_type="application/x-www-form-urlencoded",
            **auth,
        ),
    ):
        assert response.status_code == 400, response.content[:300]
        error = response.json()["error"]
        assert error["code"] == "invalid"
        assert "more than 1000" in error["message"]
    page = client.get(f"/login/?{many}")
    assert page.status_code == 400
    assert page["Content-Type"].startswith("text/plain")
