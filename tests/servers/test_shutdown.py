"""A daphne asked to stop (SIGTERM) ends its running turns before it exits.

A turn is a task of the runtime, not of its connection: daphne stopped its event loop
under it, and the reply stayed open, the session busy until the lease expired, the
streamed text lost on a stack without Redis. Now the turn finishes within
``FORGE_SHUTDOWN_GRACE``, or ends as aborted with what streamed.
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from forge.models import SessionLease
from sessions.models import Message, Part
from tests.live import daphne

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

WORDS = " ".join(f"w{i}" for i in range(400))


def stream_then_stop(server: Any, session: Any, token: str, *, deltas: int) -> str:
    """Prompt over the socket, read ``deltas`` deltas, SIGTERM the daphne and wait for it
    to exit; the text the client was sent."""
    streamed = ""
    with connect(
        f"{server.ws_url}/ws/sessions/{session.pk}/",
        additional_headers={"Authorization": f"Token {token}", "Origin": server.url},
        open_timeout=30,
    ) as ws:
        assert json.loads(ws.recv(timeout=30))["type"] == "session.created"
        ws.send(json.dumps({"type": "prompt", "text": WORDS, "client_id": "c"}))
        seen = 0
        while seen < deltas:
            frame = json.loads(ws.recv(timeout=30))
            if frame.get("kind") == "delta":
                streamed += frame["delta"]
                seen += 1
        server.process.send_signal(signal.SIGTERM)
        with contextlib.suppress(ConnectionClosed):  # closed as the server stops
            while True:  # what the window still held reaches the client before the end
                frame = json.loads(ws.recv(timeout=30))
                if frame.get("kind") == "delta":
                    streamed += frame["delta"]
    assert server.process.wait(30) == 0, server.output()
    return streamed


def reply_of(session: Any) -> tuple[dict[str, Any], list[str]]:
    message = Message.objects.filter(session=session).order_by("id").last()
    assert message is not None
    texts = [
        p.data["text"] for p in Part.objects.filter(session=session, message=message, type="text")
    ]
    return message.data, texts


def test_sigterm_ends_a_streaming_reply_as_aborted_keeping_what_streamed(
    tmp_path: Path, agents: Any, session: Any, token: str
) -> None:
    with daphne(
        tmp_path, FORGE_MODEL="offline/echo", FORGE_ECHO_DELAY="0.02", FORGE_SHUTDOWN_GRACE="0"
    ) as server:
        began = time.monotonic()
        streamed = stream_then_stop(server, session, token, deltas=20)
        assert time.monotonic() - began < 20
    info, texts = reply_of(session)
    assert info["completed_at"] is not None
    assert info["error"]["name"] == "MessageAbortedError"
    # Said as the server's stop, not the user's (QA: the page showed "aborted" for both).
    assert info["error"]["message"] == "interrupted: the server shut down"
    # The reply's text is what its deltas sent (the echo's reasoning streamed first).
    assert len(texts) == 1
    assert texts[0].startswith("w0 w1")
    assert streamed.endswith(texts[0])
    assert not SessionLease.objects.filter(session_id=session.pk).exists()


def test_sigterm_lets_a_reply_finish_within_the_grace(
    tmp_path: Path, agents: Any, session: Any, token: str
) -> None:
    with daphne(
        tmp_path, FORGE_MODEL="offline/echo", FORGE_ECHO_DELAY="0.005", FORGE_SHUTDOWN_GRACE="60"
    ) as server:
        stream_then_stop(server, session, token, deltas=5)
    info, texts = reply_of(session)
    assert info["completed_at"] is not None
    assert info["error"] is None
    assert texts[0].split()[-1] == "w399"
    assert not SessionLease.objects.filter(session_id=session.pk).exists()
