"""``GET /api/chat/{id}/messages``: a chat as AI SDK UIMessages, paged, the same parts a
client ends with after streaming each reply."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from sessions import selectors
from tests.api.conftest import error

from .ui import expected_parts

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


@pytest.fixture
def api(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def test_history_as_ui_messages_paged(api: APIClient, session, agents: Any, stranger_token):
    for text in ("/tool list_files {}", "hello again"):
        reply = api.post(f"/api/sessions/{session.pk}/messages/?wait=1", {"text": text}, "json")
        assert reply.status_code == 200, reply.content
    stored = list(selectors.iter_history(tenant=session.tenant, session_id=session.pk))

    response = api.get(f"/api/chat/{session.pk}/messages")
    assert response.status_code == 200
    body = response.json()
    assert body["next"] is None
    messages = body["results"]
    assert [m["id"] for m in messages] == [item["info"]["id"] for item in stored]
    assert [m["role"] for m in messages] == ["user", "assistant"] * 2
    assert messages[0]["parts"] == [{"type": "text", "text": "/tool list_files {}"}]
    for message, item in zip(messages, stored, strict=True):
        if item["info"]["role"] == "assistant":
            assert message["parts"] == expected_parts(item)
            assert message["metadata"]["tokens"] == item["info"]["tokens"]
    tools = [p for p in messages[1]["parts"] if p["type"] == "tool-list_files"]
    assert tools[0]["state"] == "output-available"

    first = api.get(f"/api/chat/{session.pk}/messages?limit=3")
    assert [m["id"] for m in first.json()["results"]] == [m["id"] for m in messages[1:]]
    assert first["Link"] == f'<{first.json()["next"]}>; rel="next"'
    older = api.get(first.json()["next"])
    assert [m["id"] for m in older.json()["results"]] == [messages[0]["id"]]
    assert older.json()["next"] is None

    assert error(api.get(f"/api/chat/{session.pk}/messages?limit=0"))["code"] == "invalid_cursor"
    bogus = api.get(f"/api/chat/{session.pk}/messages?before=bogus")  # an empty page before
    assert (bogus.status_code, error(bogus)["code"]) == (400, "invalid_cursor")
    stranger = APIClient()
    stranger.credentials(HTTP_AUTHORIZATION=f"Token {stranger_token}")
    missing = stranger.get(f"/api/chat/{session.pk}/messages")
    assert (missing.status_code, error(missing)["code"]) == (404, "not_found")
