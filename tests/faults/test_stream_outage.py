"""Streams opened while Redis is away (issue 17, HIGH 2), against a real daphne.

The daphne uses the test's own ``redis-server`` as its channel layer and cache, and on
the server stack acts as the row-level-security application role. While Redis is
paused (``SIGSTOP``: connections open, nothing answers, like a network partition) or
stopped, a socket, an SSE stream and the AI SDK routes must answer at once: 503
``stream_unavailable`` with ``Retry-After`` before any streaming, or an error frame and
the close code 4503 (HTTP's 503 among the socket's 4xxx codes); a chat prompt must
write nothing. None of them may keep one of the user's stream slots: once Redis is
back, the same user opens the per-user limit of 20 streams, and live frames flow
through them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.utils import timezone
from websockets.asyncio.client import connect as asyncio_connect
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from forge.models import SessionLease
from sessions import services
from sessions.models import Session, SessionEvent
from tests.live import LiveServer, daphne

from .own_redis import OwnRedis

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

# A bound on every answer during the outage, so that a hang fails the test instead of
# wedging it (an answer is expected far sooner: the daphne's FORGE_LAYER_TIMEOUT is 1 s).
ANSWER_WITHIN = 30
LIMIT = 20  # FORGE_MAX_STREAMS_PER_USER's default


@pytest.fixture
def server(tmp_path: Path, agents: Any, own_redis: OwnRedis) -> Iterator[LiveServer]:
    with daphne(
        tmp_path,
        REDIS_URL=own_redis.url,
        FORGE_REDIS_PREFIX=f"forge-outage-{own_redis.port}",
        FORGE_LAYER_TIMEOUT="1",
        FORGE_ECHO_DELAY="0.001",
        FORGE_SSE_HEARTBEAT="1",
    ) as live:
        yield live


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Token {token}"}


def open_socket(server: LiveServer, session_id: str, token: str) -> ClientConnection:
    return connect(
        f"{server.ws_url}/ws/sessions/{session_id}/",
        additional_headers={**auth(token), "Origin": server.url},
        open_timeout=ANSWER_WITHIN,
    )


def refused_socket(server: LiveServer, session_id: str, token: str) -> tuple[dict[str, Any], int]:
    """The error frame and the close code of a socket the server refuses after accepting.

    Read with websockets' asyncio client, not the sync one: when the sync client's reader
    thread is late by more than autobahn's close handshake timeout (1 s: CI's loaded
    passes), the server has dropped the connection, the client's reply to the close
    fails to send, and the sync client drops the frames it read with that close (its
    ``recv_events``: "If self.send_data raised an exception, then events are lost"), so
    the test saw a 4503 without the error frame the server had sent before it."""

    async def refused() -> tuple[dict[str, Any], int]:
        async with asyncio_connect(
            f"{server.ws_url}/ws/sessions/{session_id}/",
            additional_headers={**auth(token), "Origin": server.url},
            open_timeout=ANSWER_WITHIN,
        ) as ws:
            frame = json.loads(await asyncio.wait_for(ws.recv(), ANSWER_WITHIN))
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), ANSWER_WITHIN)
        assert closed.value.rcvd is not None, "the server closed without a close frame"
        return frame, closed.value.rcvd.code

    return asyncio.run(refused())


def served_again(server: LiveServer, session_id: str, token: str, within: float = 15) -> None:
    """Wait until a socket is served again, each refusal being the outage's own."""
    deadline = time.monotonic() + within
    while True:
        with open_socket(server, session_id, token) as ws:
            frame = json.loads(ws.recv(timeout=ANSWER_WITHIN))
        if frame.get("type") == "session.created":
            return
        assert frame.get("code") == "stream_unavailable", frame
        assert time.monotonic() < deadline, "the server did not serve again once Redis was back"
        time.sleep(0.2)


def open_stream(api: httpx.Client, url: str, held: list[Any]) -> Iterator[str]:
    """The lines of a streamed response that stays open (``held`` keeps it, and its line
    iterator: httpx closes the connection when that iterator is dropped)."""
    stream = api.stream("GET", url)
    response = stream.__enter__()
    lines = response.iter_lines()
    held.append((stream, lines))
    assert response.status_code == 200, response.read()
    return lines


def chat_body(chat_id: str) -> dict[str, Any]:
    return {
        "id": chat_id,
        "trigger": "submit-message",
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}],
    }


def assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["error"]["code"] == "stream_unavailable"
    assert response.headers["Retry-After"].isdigit()


def running_reply(user: Any) -> Session:
    """A session whose reply another server process is running (its lease is live), so
    ``GET /api/chat/{id}/stream`` follows it."""
    session = services.create_session(user=user, title="running elsewhere")
    prompt = services.update_message(session=session, info={"role": "user"}).data
    reply = services.update_message(
        session=session, info={"role": "assistant", "parent_id": prompt["id"]}
    ).data
    now = timezone.now()
    SessionLease.objects.create(
        session=session,
        tenant_id=session.tenant_id,
        owner="another-process:1:x",
        message_id=reply["id"],
        acquired_at=now,
        heartbeat_at=now,
        expires_at=now + timedelta(hours=1),
    )
    return session


@pytest.mark.parametrize("outage", ["paused", "stopped"])
def test_streams_during_a_redis_outage_answer_at_once_and_keep_no_slot(
    server: LiveServer, own_redis: OwnRedis, session, user, token, outage: str
) -> None:
    running = running_reply(user)
    # The server has been serving: its layer connections are warm.
    with open_socket(server, session.pk, token) as ws:
        assert json.loads(ws.recv(timeout=ANSWER_WITHIN))["type"] == "session.created"
    events_before = SessionEvent.objects.filter(session=session).count()

    (own_redis.pause if outage == "paused" else own_redis.stop)()
    try:
        with httpx.Client(base_url=server.url, headers=auth(token), timeout=ANSWER_WITHIN) as api:
            for _ in range(3):  # a chat page reconnecting, again and again
                frame, code = refused_socket(server, session.pk, token)
                assert (frame["kind"], frame["code"]) == ("error", "stream_unavailable")
                assert code == 4503
                assert_unavailable(api.get(f"/api/sessions/{session.pk}/stream/"))
            assert_unavailable(api.get(f"/api/chat/{running.pk}/stream"))
            assert_unavailable(api.post("/api/chat", json=chat_body(session.pk)))
            assert_unavailable(api.post("/api/chat", json=chat_body("chat-during-outage")))
    finally:
        (own_redis.resume if outage == "paused" else own_redis.start)()
    # Nothing was written by the refused chat prompts.
    assert not Session.objects.filter(pk="chat-during-outage").exists()
    assert SessionEvent.objects.filter(session=session).count() == events_before

    # Redis is back: once the server's layer connections are too (a restarted Redis is
    # reconnected to within a few seconds; until then a stream is refused at once, as
    # during the outage, which a loaded CI pass saw), the same user opens as many
    # streams as the limit allows.
    served_again(server, session.pk, token)
    with (
        httpx.Client(base_url=server.url, headers=auth(token), timeout=ANSWER_WITHIN) as api,
        contextlib.ExitStack() as sockets,
    ):
        streams: list[Any] = []
        try:
            opened = [
                sockets.enter_context(open_socket(server, session.pk, token)) for _ in range(7)
            ]
            for ws in opened:
                frame = json.loads(ws.recv(timeout=ANSWER_WITHIN))
                assert frame.get("type") == "session.created", frame
            for _ in range(7):
                lines = open_stream(api, f"/api/sessions/{session.pk}/stream/", streams)
                assert next(line for line in lines if line.startswith("id: ")) == "id: 1"
            for _ in range(LIMIT - 14):
                lines = open_stream(api, f"/api/chat/{running.pk}/stream", streams)
                first = next(line for line in lines if line.startswith("data: "))
                assert json.loads(first[6:])["type"] == "start"
            # The limit is reached, and no more.
            frame, code = refused_socket(server, session.pk, token)
            assert (frame["code"], code) == ("too_many_streams", 4429)
            refused = api.get(f"/api/sessions/{session.pk}/stream/")
            assert refused.status_code == 429
            assert refused.reason_phrase == "Too Many Requests"  # not twisted's "Unknown"
            assert refused.json()["error"]["code"] == "too_many_streams"
            # And the layer carries live frames again: a prompt's reply reaches a socket.
            ws = opened[0]
            ws.send(json.dumps({"type": "prompt", "text": "are you back", "client_id": "c"}))
            reply_id = None
            while True:
                frame = json.loads(ws.recv(timeout=ANSWER_WITHIN))
                if frame["kind"] == "ack":
                    reply_id = frame["assistant_message_id"]
                if (
                    frame.get("type") == "message.updated"
                    and frame["data"]["id"] == reply_id
                    and frame["data"]["completed_at"]
                ):
                    break
        finally:
            for stream, _ in streams:
                stream.__exit__(None, None, None)
    assert "Internal Server Error" not in server.output()  # no 500 on the way


def _echoing(tmp_path: Path, own_redis: OwnRedis, name: str) -> Any:
    return daphne(
        tmp_path,
        name=name,
        REDIS_URL=own_redis.url,
        FORGE_REDIS_PREFIX=f"forge-outage-{own_redis.port}",
        FORGE_LAYER_TIMEOUT="1",
        FORGE_ECHO_DELAY="0.1",
    )


def _completes(frame: dict[str, Any], reply_id: str | None) -> bool:
    data = frame.get("data") or {}
    return (
        frame.get("type") == "message.updated"
        and data.get("id") == reply_id
        and bool(data.get("completed_at"))
    )


def test_a_socket_open_across_a_redis_crash_still_sees_the_reply_end(
    tmp_path: Path, agents: Any, own_redis: OwnRedis, session, token
) -> None:
    """QA (HIGH): Redis killed mid-reply (SIGKILL) and back seconds later: a socket of
    another daphne than the one running the reply got nothing more, ever, though the
    reply finished in the log; open (its pings answered), stuck partway through until a
    reload. A client that reconnects when its socket closes, as the chat page does,
    sees the reply's end."""
    seen = [0]
    done = False
    with (
        _echoing(tmp_path, own_redis, "watching") as watching,
        _echoing(tmp_path, own_redis, "running") as running,
    ):
        words = " ".join(f"w{n}" for n in range(200))  # ~20 s of echo
        with open_socket(watching, session.pk, token) as ws:
            assert json.loads(ws.recv(timeout=ANSWER_WITHIN))["type"] == "session.created"
            sent = httpx.post(
                f"{running.url}/api/sessions/{session.pk}/messages/",
                json={"text": words},
                headers=auth(token),
                timeout=ANSWER_WITHIN,
            )
            assert sent.status_code == 202, sent.text
            reply_id = sent.json()["assistant_message_id"]
            deltas = 0
            while deltas < 5:
                frame = json.loads(ws.recv(timeout=ANSWER_WITHIN))
                deltas += frame["kind"] == "delta"
                if frame["kind"] == "event":
                    seen.append(frame["seq"])
            own_redis.stop()
            time.sleep(12)
            own_redis.start()
            try:
                deadline = time.monotonic() + 60
                while not done:
                    frame = json.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic())))
                    if frame["kind"] == "event":
                        seen.append(frame["seq"])
                        done = _completes(frame, reply_id)
            except ConnectionClosed:
                pass  # the client resumes from its last seq
        if not done:
            with connect(
                f"{watching.ws_url}/ws/sessions/{session.pk}/?after={max(seen)}",
                additional_headers={**auth(token), "Origin": watching.url},
                open_timeout=ANSWER_WITHIN,
            ) as again:
                while not done:
                    done = _completes(json.loads(again.recv(timeout=ANSWER_WITHIN)), reply_id)
    assert done
