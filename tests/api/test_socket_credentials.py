"""An open socket does not outlive its credentials: before each prompt the user is
checked again (token still valid, user active, session cookie not logged out,
still a member of the tenant), and a socket that fails closes with 4401 without
starting a turn."""

from __future__ import annotations

import json
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.test import Client
from rest_framework.authtoken.models import Token

from accounts.models import Membership
from forge.asgi import application
from sessions.models import Message

from .test_socket import ORIGIN, backlog, frames_until, socket, until_ack

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


async def _closed_with(ws: WebsocketCommunicator, code: int) -> list[dict[str, Any]]:
    """The frames the socket is sent until it is closed, with ``code``."""
    frames = []
    while True:
        output = await ws.receive_output(timeout=5)
        if output["type"] == "websocket.close":
            break
        frames.append(json.loads(output["text"]))
    assert output == {"type": "websocket.close", "code": code}
    return frames


async def _prompt_is_refused(ws: WebsocketCommunicator) -> None:
    before = await database_sync_to_async(Message.objects.count)()
    await ws.send_to(text_data=json.dumps({"type": "prompt", "text": "hello", "client_id": "c"}))
    frame = json.loads(await ws.receive_from(timeout=5))
    assert (frame["kind"], frame["code"], frame["client_id"]) == (
        "error",
        "not_authenticated",
        "c",
    )
    assert (await ws.receive_output(timeout=5)) == {"type": "websocket.close", "code": 4401}
    assert await database_sync_to_async(Message.objects.count)() == before


async def _connected(session: Any, token: str) -> WebsocketCommunicator:
    ws = socket(session.pk, token)
    assert (await ws.connect(timeout=10))[0]
    await backlog(ws)  # session.created, then the status
    return ws


@pytest.mark.parametrize("change", ["token deleted", "user deactivated", "left the tenant"])
async def test_a_socket_whose_credentials_went_away_cannot_prompt(
    session, user, token, agents, settings, change
):
    settings.FORGE_MODEL = "offline/echo"
    ws = await _connected(session, token)
    await ws.send_to(text_data=json.dumps({"type": "prompt", "text": "first"}))
    await until_ack(ws)  # the credentials work while they are valid

    await frames_until(
        ws, lambda f: any(x["kind"] == "status" and x["status"] == "idle" for x in f)
    )
    await database_sync_to_async(_revoker(change, user, token))()
    await _prompt_is_refused(ws)


async def test_a_browser_socket_stops_prompting_once_its_session_logs_out(
    session, user, agents, settings
):
    settings.FORGE_MODEL = "offline/echo"
    client = Client()
    await database_sync_to_async(client.force_login)(user)
    cookie = client.cookies[django_settings.SESSION_COOKIE_NAME].value
    ws = WebsocketCommunicator(
        application,
        f"/ws/sessions/{session.pk}/",
        headers=[ORIGIN, (b"cookie", f"{django_settings.SESSION_COOKIE_NAME}={cookie}".encode())],
    )
    assert (await ws.connect(timeout=10))[0]
    await backlog(ws)
    await database_sync_to_async(client.logout)()
    await _prompt_is_refused(ws)


async def test_a_socket_whose_session_was_deleted_is_told_it_is_gone(session, token, agents):
    """A second-round finding: a prompt on a socket whose session was deleted since it
    opened got ``not_authenticated`` and 4401, and the chat page took that for a logout
    (it went to the login page). It is ``not_found`` and 4404, as at connect, and nothing
    is written."""
    from sessions import services

    ws = await _connected(session, token)
    await database_sync_to_async(services.delete_session)(session=session)
    await ws.send_to(text_data=json.dumps({"type": "prompt", "text": "hello", "client_id": "c"}))
    frames = []
    while True:  # the forwarder may see the deletion first; either way the end is 4404
        output = await ws.receive_output(timeout=5)
        if output["type"] == "websocket.close":
            break
        frames.append(json.loads(output["text"]))
    assert output == {"type": "websocket.close", "code": 4404}
    errors = [f for f in frames if f["kind"] == "error"]
    assert errors
    assert {f["code"] for f in errors} == {"not_found"}
    assert await database_sync_to_async(Message.objects.count)() == 0


async def test_an_idle_socket_is_told_at_once_that_its_session_was_deleted(session, token):
    """A third-round finding: a socket that sent nothing heard of its session's deletion
    only when it next sent a frame (the chat page sat on a session that was gone). The
    deletion is published: ``not_found`` and 4404, without a word from the client."""
    from sessions import services

    ws = await _connected(session, token)
    await database_sync_to_async(services.delete_session)(session=session)
    frames = await _closed_with(ws, 4404)
    assert [f["code"] for f in frames if f["kind"] == "error"] == ["not_found"]


def _revoker(change: str, user: Any, token: str) -> Any:
    def revoke() -> None:
        if change == "token deleted":
            Token.objects.filter(key=token).delete()
        elif change == "user deactivated":
            user.is_active = False
            user.save(update_fields=["is_active"])
        else:
            Membership.objects.filter(user=user).delete()

    return revoke


@pytest.mark.parametrize("change", ["token deleted", "user deactivated", "left the tenant"])
async def test_a_watching_socket_is_closed_once_its_credentials_went_away(
    session, user, token, settings, change
):
    """A QA finding: only a prompt or an answer checked the caller again, so a socket
    went on receiving the session's new prompts and replies after its token was
    deleted, its user deactivated or gone from the tenant. An open stream checks every
    FORGE_STREAM_RECHECK_SECONDS."""
    settings.FORGE_STREAM_RECHECK_SECONDS = 0.2
    ws = await _connected(session, token)
    await database_sync_to_async(_revoker(change, user, token))()
    frames = await _closed_with(ws, 4401)
    assert [f["code"] for f in frames if f["kind"] == "error"] == ["not_authenticated"]


@pytest.mark.parametrize("kind", ["abort", "snapshot"])
async def test_an_abort_or_a_snapshot_checks_the_caller_again(session, user, token, kind):
    """A QA finding: a user removed from the tenant could still abort its members'
    replies, and read what streamed, through a socket opened before."""
    ws = await _connected(session, token)
    await database_sync_to_async(_revoker("left the tenant", user, token))()
    await ws.send_to(text_data=json.dumps({"type": kind, "client_id": "c"}))
    frames = await _closed_with(ws, 4401)
    assert [f["code"] for f in frames if f["kind"] == "error"] == ["not_authenticated"]
