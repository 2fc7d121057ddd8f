"""The SSE stream's connect sequence, in process: the log after the cursor, then one
``session.status`` (busy or idle) with no ``id:``, as the socket sends
(tests/servers/test_sse.py runs it under daphne)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.test import AsyncClient

from forge.runtime import lease

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


async def connect_sequence(
    session_id: str, token: str, **headers: str
) -> list[tuple[int | None, dict[str, Any]]]:
    """(id, frame) of each SSE event up to and including the first status frame."""
    url = f"/api/sessions/{session_id}/stream/" + headers.pop("query", "")
    response = await AsyncClient().get(url, headers={"Authorization": f"Token {token}", **headers})
    assert response.status_code == 200
    chunks: AsyncIterator[bytes] = aiter(response.streaming_content)  # type: ignore[attr-defined]
    events: list[tuple[int | None, dict[str, Any]]] = []
    buffer = b""
    try:
        async with asyncio.timeout(10):
            while not events or events[-1][1]["kind"] != "status":
                buffer += await anext(chunks)
                while b"\n\n" in buffer:
                    block, buffer = buffer.split(b"\n\n", 1)
                    lines = block.decode().split("\n")
                    data = [line[6:] for line in lines if line.startswith("data: ")]
                    ids = [int(line[4:]) for line in lines if line.startswith("id: ")]
                    if data:  # not a comment
                        events.append((ids[0] if ids else None, json.loads("\n".join(data))))
    finally:
        with contextlib.suppress(Exception):
            await chunks.aclose()  # type: ignore[attr-defined]
        # Leave the hub now (close() only schedules it on this loop): the test's end
        # checks that no stream is left subscribed.
        await response.subscription.close()  # type: ignore[attr-defined]
        await database_sync_to_async(response.close)()
    return events


async def test_an_idle_sessions_stream_says_idle_after_its_backlog(session, token, user_message):
    events = await connect_sequence(session.pk, token)
    assert [event_id for event_id, _ in events] == [1, 2, None]
    assert events[-1][1] == {
        "kind": "status",
        "type": "session.status",
        "session_id": session.pk,
        "status": "idle",
        "attempt": None,
        "next_at": None,
    }


async def test_a_stream_opened_mid_reply_says_busy_after_its_backlog(session, token, user_message):
    """A page reopened mid-reply (or an EventSource reconnecting with Last-Event-ID)
    learnt that a turn ran only at the next status change."""
    await database_sync_to_async(lease.acquire)(session=session, message_id="msg_running")
    events = await connect_sequence(session.pk, token, **{"Last-Event-ID": "1"})
    assert [event_id for event_id, _ in events] == [2, None]
    assert (events[-1][1]["kind"], events[-1][1]["status"]) == ("status", "busy")
    events = await connect_sequence(session.pk, token, query="?after=2")
    assert [(event_id, frame["status"]) for event_id, frame in events] == [(None, "busy")]
