"""Server-Sent Events under a real daphne: ids, resume, snapshots, heartbeats, errors."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from forge.runtime import lease
from sessions import services
from tests.frames import Text
from tests.live import LiveServer, daphne

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


class SSE:
    """A minimal SSE reader over an httpx stream: (id, data) per event, comments counted."""

    def __init__(self, response: httpx.Response) -> None:
        self.lines = response.iter_lines()
        self.comments = 0

    def next(self) -> tuple[int | None, dict[str, Any]]:
        event_id: int | None = None
        data: list[str] = []
        for line in self.lines:
            if line == "":
                if data:
                    return event_id, json.loads("\n".join(data))
                continue
            if line.startswith(":"):
                self.comments += 1
            elif line.startswith("id: "):
                event_id = int(line[4:])
            elif line.startswith("data: "):
                data.append(line[6:])
        raise EOFError


def backlog(sse: SSE) -> list[tuple[int | None, dict[str, Any]]]:
    """What a stream sends on connect: the log after the cursor, snapshots of streaming
    parts, and last the session's status (``session.status``)."""
    frames = [sse.next()]
    while frames[-1][1]["kind"] != "status":
        frames.append(sse.next())
    return frames


def headers(token: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Token {token}", **extra}


@pytest.fixture
def server(tmp_path: Path, agents: Any) -> Any:
    with daphne(tmp_path, FORGE_SSE_HEARTBEAT="0.3", FORGE_ECHO_DELAY="0.002") as live:
        yield live


def test_the_stream_replays_the_log_with_ids_then_streams_a_reply(
    server: LiveServer, session, token
):
    url = f"{server.url}/api/sessions/{session.pk}/stream/"
    with (
        httpx.Client(timeout=30) as client,
        client.stream("GET", url, headers=headers(token)) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        sse = SSE(response)
        first_id, first = sse.next()
        assert (first_id, first["type"]) == (1, "session.created")
        prompt = client.post(
            f"{server.url}/api/sessions/{session.pk}/messages/",
            json={"text": "one two three four five"},
            headers=headers(token),
        )
        assert prompt.status_code == 202
        reply_id = prompt.json()["assistant_message_id"]
        ids: list[int] = []
        kinds: set[str] = set()
        text = Text()
        while True:
            event_id, frame = sse.next()
            kinds.add(frame["kind"])
            text.apply(frame)  # no hole, no repeat
            if frame["kind"] == "event":
                assert event_id == frame["seq"]
                ids.append(frame["seq"])
            else:
                assert event_id is None
            if (
                frame.get("type") == "message.updated"
                and frame["data"]["id"] == reply_id
                and frame["data"]["completed_at"]
            ):
                break
        assert ids == list(range(2, 2 + len(ids)))
        assert {"event", "delta", "status"} <= kinds
        assert "one two three four five" in text.finished.values()


def test_last_event_id_and_after_resume_with_no_gap(
    server: LiveServer, session, token, user_message
):
    for n in range(4):
        services.update_part(
            session=session, part={"message_id": user_message["id"], "type": "text", "text": str(n)}
        )
    url = f"{server.url}/api/sessions/{session.pk}/stream/"
    with httpx.Client(timeout=30) as client:
        with client.stream(
            "GET", url, headers=headers(token, **{"Last-Event-ID": "3"})
        ) as response:
            sse = SSE(response)
            assert [sse.next()[0] for _ in range(3)] == [4, 5, 6]
        with client.stream("GET", url + "?after=5", headers=headers(token)) as response:
            sse = SSE(response)
            assert sse.next()[0] == 6


def test_the_sessions_status_follows_the_backlog(server: LiveServer, session, token, user_message):
    """As on the socket (3441011): a client that connects, or reconnects with
    Last-Event-ID, mid-reply learnt that the session was busy only at the next change.
    After the log and the snapshots comes one ``session.status``, with no ``id:`` (it is
    not in the log: Last-Event-ID stays the last event's seq)."""
    url = f"{server.url}/api/sessions/{session.pk}/stream/"
    with httpx.Client(timeout=30) as client:
        with client.stream("GET", url, headers=headers(token)) as response:
            sse = SSE(response)
            assert [sse.next()[0] for _ in range(2)] == [1, 2]  # the log
            assert sse.next() == (
                None,
                {
                    "kind": "status",
                    "type": "session.status",
                    "session_id": session.pk,
                    "status": "idle",
                    "attempt": None,
                    "next_at": None,
                },
            )
        # A turn holds the session's lease (in any process): busy, after the backlog.
        lease.acquire(session=session, message_id="msg_running")
        with client.stream(
            "GET", url, headers=headers(token, **{"Last-Event-ID": "1"})
        ) as response:
            sse = SSE(response)
            assert sse.next()[0] == 2
            event_id, frame = sse.next()
            assert (event_id, frame["kind"], frame["status"]) == (None, "status", "busy")
        with client.stream("GET", url + "?after=2", headers=headers(token)) as response:
            event_id, frame = SSE(response).next()  # an empty backlog: the status first
            assert (event_id, frame["kind"], frame["status"]) == (None, "status", "busy")


def test_an_idle_stream_gets_heartbeat_comments(server: LiveServer, session, token):
    url = f"{server.url}/api/sessions/{session.pk}/stream/"
    with (
        httpx.Client(timeout=30) as client,
        client.stream("GET", url, headers=headers(token)) as response,
    ):
        sse = SSE(response)
        backlog(sse)
        started = time.monotonic()
        heartbeats = 0
        for line in sse.lines:
            if line.startswith(": heartbeat"):
                heartbeats += 1
                if heartbeats == 2:
                    break
        assert 0.4 < time.monotonic() - started < 5


def test_a_stream_whose_session_is_deleted_ends_with_an_error(server: LiveServer, session, token):
    """A second-round finding: it stayed open, sending heartbeats, for ever."""
    url = f"{server.url}/api/sessions/{session.pk}/stream/"
    with (
        httpx.Client(timeout=30) as client,
        client.stream("GET", url, headers=headers(token)) as response,
    ):
        sse = SSE(response)
        backlog(sse)  # session.created, then the status
        services.delete_session(session=session)
        started = time.monotonic()
        event_id, frame = sse.next()
        assert (event_id, frame["kind"], frame["code"]) == (None, "error", "not_found")
        assert list(sse.lines) == []  # and the stream ends
        assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("who", "extra", "status", "code"),
    [
        ("nobody", {}, 401, "not_authenticated"),
        # As the API's DRF views answer a token that does not authenticate.
        ("bad token", {"Authorization": "Token 0123456789abcdef"}, 401, "authentication_failed"),
        ("stranger", {}, 404, "not_found"),
        ("owner", {"Last-Event-ID": "yesterday"}, 400, "invalid_cursor"),
        ("owner", {"Last-Event-ID": "2"}, 400, "invalid_cursor"),  # past the log's head (1)
    ],
)
def test_stream_errors_are_json(
    server: LiveServer, session, token, stranger_token, who, extra, status, code
):
    credentials = {
        "owner": headers(token),
        "stranger": headers(stranger_token),
        "nobody": {},
        "bad token": {},
    }[who]
    response = httpx.get(
        f"{server.url}/api/sessions/{session.pk}/stream/",
        headers={**credentials, **extra},
        timeout=10,
    )
    assert response.status_code == status
    assert response.json()["error"]["code"] == code


def test_a_client_that_goes_away_is_let_go(server: LiveServer, session, token):
    url = f"{server.url}/api/sessions/{session.pk}/stream/"
    for _ in range(5):
        with (
            httpx.Client(timeout=10) as client,
            client.stream("GET", url, headers=headers(token)) as response,
        ):
            SSE(response).next()
    # The server is still healthy and logged no error about the closed streams.
    assert (
        httpx.get(f"{server.url}/api/sessions/{session.pk}/", headers=headers(token)).status_code
        == 200
    )
    assert "Traceback" not in server.output()


@pytest.mark.parametrize("by", ["token", "cookie"])
def test_a_stream_ends_once_its_caller_may_no_longer_watch(
    tmp_path: Path, agents: Any, session, user, token, by
):
    """A QA finding: the caller was checked when the stream opened only, so it went on
    carrying the session's new prompts and replies after the token was deleted, or the
    browser logged out. It checks again every FORGE_STREAM_RECHECK_SECONDS."""
    from rest_framework.authtoken.models import Token

    with (
        daphne(tmp_path, FORGE_SSE_HEARTBEAT="0.3", FORGE_STREAM_RECHECK_SECONDS="0.3") as live,
        httpx.Client(timeout=30) as browser,
    ):
        credentials = headers(token)
        if by == "cookie":  # signed in on the server's own page
            from django.contrib.auth.hashers import PBKDF2PasswordHasher

            # (the test settings' MD5 hashes are unknown to the server's settings)
            user.password = PBKDF2PasswordHasher().encode("pw-alice-123", "salt0123", 1000)
            user.save(update_fields=["password"])
            browser.get(f"{live.url}/login/")
            signed_in = browser.post(
                f"{live.url}/login/",
                data={
                    "username": user.username,
                    "password": "pw-alice-123",
                    "csrfmiddlewaretoken": browser.cookies["csrftoken"],
                },
                headers={"Referer": f"{live.url}/login/"},
            )
            assert signed_in.status_code == 302, signed_in.text[:300]
            credentials = {}
        url = f"{live.url}/api/sessions/{session.pk}/stream/"
        with browser.stream("GET", url, headers=credentials) as response:
            assert response.status_code == 200
            sse = SSE(response)
            backlog(sse)  # session.created, then the status
            time.sleep(1)  # still allowed: heartbeats only
            if by == "cookie":
                with httpx.Client(timeout=10, cookies=browser.cookies) as other_tab:
                    other_tab.post(
                        f"{live.url}/logout/",
                        data={"csrfmiddlewaretoken": browser.cookies["csrftoken"]},
                        headers={"Referer": f"{live.url}/"},
                    )
            else:
                Token.objects.filter(key=token).delete()
            started = time.monotonic()
            event_id, frame = sse.next()
            assert (event_id, frame["kind"], frame["code"]) == (
                None,
                "error",
                "not_authenticated",
            )
            assert list(sse.lines) == []  # and the stream ends
            assert time.monotonic() - started < 5
