"""Streamed bodies under row-level security (issue 17, HIGH 1).

A streamed response's body is read by the server after the view has returned. On
PostgreSQL the serving process runs as the application role, which sees only the
tenants of ``accounts.tenancy`` at the time of the query: a body read after the
request's tenant setting is gone sees no rows at all. The export answered 200 with
its header line only (``"events": 0``) in exactly the production setup.

Each streamed route is read here through a real daphne, which on the server stack
runs as the application role (``tests.live``), and must hold the whole log.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from sessions import selectors, services
from tests.live import LiveServer, daphne

from .test_sse import SSE, headers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

EVENTS = 75


@pytest.fixture
def server(tmp_path: Path, agents: Any) -> Any:
    with daphne(tmp_path, FORGE_ECHO_DELAY="0.002") as live:
        yield live


@pytest.fixture
def long_session(session: Any, user_message: dict[str, Any]) -> Any:
    """A session whose log holds exactly ``EVENTS`` events."""
    while selectors.head_seq(tenant=session.tenant, session_id=session.pk) < EVENTS:
        services.update_part(
            session=session, part={"message_id": user_message["id"], "type": "text", "text": "x"}
        )
    return session


def test_the_export_holds_every_event(server: LiveServer, long_session: Any, token: str):
    response = httpx.get(
        f"{server.url}/api/sessions/{long_session.pk}/export/", headers=headers(token), timeout=30
    )
    assert response.status_code == 200
    lines = [json.loads(line) for line in response.text.splitlines()]
    header, events = lines[0], lines[1:]
    assert header["events"] == EVENTS
    assert [event["seq"] for event in events] == list(range(1, EVENTS + 1))
    assert all(event["session_id"] == long_session.pk for event in events)


def test_the_sse_backlog_holds_every_event(server: LiveServer, long_session: Any, token: str):
    url = f"{server.url}/api/sessions/{long_session.pk}/stream/?after=0"
    with (
        httpx.Client(timeout=30) as client,
        client.stream("GET", url, headers=headers(token)) as response,
    ):
        assert response.status_code == 200
        sse = SSE(response)
        seqs = [sse.next()[0] for _ in range(EVENTS)]
    assert seqs == list(range(1, EVENTS + 1))


def test_the_ai_sdk_stream_and_history_hold_the_reply(
    server: LiveServer, long_session: Any, token: str
):
    body = {
        "id": long_session.pk,
        "trigger": "submit-message",
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "one two"}]}],
    }
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", f"{server.url}/api/chat", json=body, headers=headers(token)) as r,
    ):
        assert r.status_code == 200
        chunks = [
            json.loads(line[6:])
            for line in r.iter_lines()
            if line.startswith("data: ") and line != "data: [DONE]"
        ]
    deltas = "".join(c["delta"] for c in chunks if c["type"] == "text-delta")
    assert deltas == "one two"
    assert chunks[-1]["type"] == "finish"
    history = httpx.get(
        f"{server.url}/api/chat/{long_session.pk}/messages", headers=headers(token), timeout=30
    )
    assert history.status_code == 200
    texts = [
        part["text"]
        for message in history.json()["results"]
        if message["role"] == "assistant"
        for part in message["parts"]
        if part["type"] == "text"
    ]
    assert texts == ["one two"]
