"""An abort of a turn that another process runs, while Redis (the channel layer that
carries the abort to that process) is away (QA MEDIUM: every face answered 500, and
a dead holder's turn was not finalized).

The turn's process is a lease held by "another process" (as ``tests/faults/
test_stream_outage.running_reply``): alive when its heartbeat is on time, dead when
it is overdue. Each test uses its own ``redis-server`` as the layer, and stops it.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone
from rest_framework.test import APIClient

from forge.models import SessionLease
from sessions import selectors, services
from tests.api.test_socket import backlog, frames_until, socket

from .test_redis_away import use_redis

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def held_elsewhere(session: Any, *, dead: bool) -> str:
    """An open reply whose turn another process runs; its holder's heartbeat is overdue
    (``lease.judged_dead``) when ``dead``, though the lease has not expired. Returns the
    reply's id."""
    prompt = services.update_message(session=session, info={"role": "user"}).data
    reply = services.update_message(
        session=session, info={"role": "assistant", "parent_id": prompt["id"]}
    ).data
    beat = timezone.now() - timedelta(seconds=25 if dead else 0)
    SessionLease.objects.create(
        session=session,
        tenant_id=session.tenant_id,
        owner="another-process:1:x",
        message_id=reply["id"],
        acquired_at=beat,
        heartbeat_at=beat,
        expires_at=beat + timedelta(seconds=30 if dead else 3600),
    )
    return str(reply["id"])


def reply_info(session: Any, reply_id: str) -> dict[str, Any]:
    message = selectors.get_message(
        tenant=session.tenant, session_id=session.pk, message_id=reply_id
    )
    return dict(message["info"])


def api_of(token: str) -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return api


@pytest.mark.parametrize("route", ["abort", "stop"])
def test_an_abort_that_cannot_reach_a_live_holder_is_503_and_leaves_the_turn(
    settings, own_redis, session, token, route
):
    use_redis(settings, own_redis.url)
    reply_id = held_elsewhere(session, dead=False)
    own_redis.stop()
    url = (
        f"/api/chat/{session.pk}/stop" if route == "stop" else f"/api/sessions/{session.pk}/abort/"
    )
    response = api_of(token).post(url)
    assert response.status_code == 503, response.content
    assert response["Content-Type"].startswith("application/json")
    error = response.json()["error"]
    assert error["code"] == "abort_unavailable"
    assert 1 <= int(response["Retry-After"]) <= 5
    assert error["retry_after"] == int(response["Retry-After"])
    assert SessionLease.objects.filter(session=session).exists()  # left running
    assert reply_info(session, reply_id)["completed_at"] is None


def test_an_abort_of_a_dead_holder_s_turn_finalizes_it_without_redis(
    settings, own_redis, session, token
):
    use_redis(settings, own_redis.url)
    reply_id = held_elsewhere(session, dead=True)
    own_redis.stop()
    response = api_of(token).post(f"/api/sessions/{session.pk}/abort/")
    assert response.status_code == 200, response.content
    assert response.json()["aborted"] is True
    assert not SessionLease.objects.filter(session=session).exists()
    info = reply_info(session, reply_id)
    assert info["completed_at"] is not None
    assert info["error"]["name"] == "MessageAbortedError"


async def test_the_socket_s_abort_frame_gets_an_error_frame(settings, own_redis, session, token):
    use_redis(settings, own_redis.url)
    reply_id = await sync_to_async(held_elsewhere)(session, dead=False)
    ws = socket(session.pk, token)
    connected, _ = await ws.connect(timeout=20)
    assert connected
    await backlog(ws)
    own_redis.stop()
    await ws.send_to(text_data=json.dumps({"type": "abort", "client_id": "a1"}))
    frames = await frames_until(ws, lambda f: bool(f) and f[-1]["kind"] == "error")
    error = frames[-1]
    assert (error["code"], error["client_id"]) == ("abort_unavailable", "a1")
    assert 1 <= error["retry_after"] <= 5
    assert (await sync_to_async(reply_info)(session, reply_id))["completed_at"] is None
    await ws.disconnect()
