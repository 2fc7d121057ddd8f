"""Forge's own pages send a Content-Security-Policy header (not only a meta tag)."""

import pytest

pytestmark = pytest.mark.django_db


def test_the_chat_and_login_pages_send_the_policy_header(client, user):
    login = client.get("/login/")
    policy = login["Content-Security-Policy"]
    assert "script-src 'self'" in policy
    assert "object-src 'none'" in policy
    assert "frame-ancestors 'none'" in policy
    client.force_login(user)
    chat = client.get("/")
    assert chat.status_code == 200
    assert "connect-src 'self' ws://testserver wss://testserver" in chat["Content-Security-Policy"]
    assert "http-equiv" not in chat.text  # one home for the policy: the header


def test_the_admin_and_the_api_docs_keep_their_own_defaults(admin_client):
    assert "Content-Security-Policy" not in admin_client.get("/admin/")
    assert "Content-Security-Policy" not in admin_client.get("/api/docs/")


def test_private_responses_are_not_stored_by_any_cache(client, user, session):
    """QA (LOW): the chat page and the API's sessions, messages and exports said nothing
    of caching; a back/forward cache kept them after a logout."""
    client.force_login(user)
    for path in ("/", "/api/sessions/", f"/api/sessions/{session.pk}/messages/"):
        response = client.get(path)
        assert response.status_code == 200, path
        assert "no-store" in response["Cache-Control"], path
        assert "private" in response["Cache-Control"], path
    export = client.get(f"/api/sessions/{session.pk}/export/")
    assert "no-store" in export["Cache-Control"]
