"""Turns through the HTTP API under ASGI (Django's AsyncClient: the turn runs as a task
of the test's event loop, as it would under daphne)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from django.test import AsyncClient

from tests.replies import paced, words

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


class client:
    """An AsyncClient sending the token with every request."""

    def __init__(self, token: str) -> None:
        self.inner = AsyncClient()
        self.headers = {"Authorization": f"Token {token}"}

    def __getattr__(self, method: str) -> Any:
        request = getattr(self.inner, method)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await request(*args, headers=self.headers, **kwargs)

        return call


async def test_a_prompt_while_busy_is_409_and_abort_finalizes_the_turn(
    session, token, agents, script
):
    script([paced(words(200), 0.02), paced(words(1), 0)])
    api = client(token)
    url = f"/api/sessions/{session.pk}/"
    first = await api.post(url + "messages/", {"text": "go"}, content_type="application/json")
    assert first.status_code == 202
    detail = await api.get(url)
    assert detail.json()["status"] == "busy"
    busy = await api.post(url + "messages/", {"text": "again"}, content_type="application/json")
    assert busy.status_code == 409
    assert busy.json()["error"]["code"] == "busy"
    await asyncio.sleep(0.2)
    aborted = await api.post(url + "abort/")
    assert aborted.status_code == 200
    assert aborted.json()["session"]["status"] == "idle"
    reply = (await api.get(url + "messages/")).json()["results"][-1]
    assert reply["info"]["id"] == first.json()["assistant_message_id"]
    assert reply["info"]["error"]["name"] == "MessageAbortedError"
    after = await api.post(
        url + "messages/?wait=1", {"text": "next"}, content_type="application/json"
    )
    assert after.status_code == 200
    assert after.json()["reply"]["info"]["error"] is None


async def test_deleting_a_busy_session_is_409(session, token, agents, script):
    script([paced(words(100), 0.02)])
    api = client(token)
    url = f"/api/sessions/{session.pk}/"
    await api.post(url + "messages/", {"text": "go"}, content_type="application/json")
    response = await api.delete(url)
    assert response.status_code == 409
    await api.post(url + "abort/")
    assert (await api.delete(url)).status_code == 204
