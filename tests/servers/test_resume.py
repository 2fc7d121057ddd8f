"""A client cut off mid-reply reconnects and ends with exactly the text the log holds.

On the server stack the reconnection goes to a second daphne process sharing
PostgreSQL and Redis (the first one runs the turn); on the embedded stack, whose
in-memory channel layer lives in one process, to the same daphne.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings
from websockets.sync.client import ClientConnection, connect

from tests.frames import Text
from tests.live import LiveServer, daphne

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

WORDS = 5000


def open_socket(server: LiveServer, session_id: str, token: str, after: int) -> ClientConnection:
    return connect(
        f"{server.ws_url}/ws/sessions/{session_id}/?after={after}",
        additional_headers={"Authorization": f"Token {token}", "Origin": server.url},
        max_size=None,
        open_timeout=10,
    )


def test_cut_off_at_a_random_point_of_a_5000_delta_reply_then_resume(
    tmp_path: Path, session: Any, token: str, agents: Any
) -> None:
    seed = random.randrange(1_000_000)
    cut_after = random.Random(seed).randrange(100, WORDS - 100)
    print(f"seed {seed}: cutting the socket after {cut_after} words of text deltas")
    two_processes = bool(settings.REDIS_URL)
    # Paced (about ten seconds for the reply) so the cut lands while it still streams.
    with daphne(tmp_path, "a", FORGE_ECHO_DELAY="0.002") as first:
        second_context = daphne(tmp_path, "b") if two_processes else None
        second = second_context.__enter__() if second_context else first
        try:
            text = Text()
            last_seq = 0
            prompt = " ".join(f"w{i}" for i in range(WORDS))
            with open_socket(first, session.pk, token, after=0) as ws:
                ws.send(json.dumps({"type": "prompt", "text": prompt, "client_id": "p"}))
                reply_id = None
                deltas = 0
                while deltas < cut_after:
                    frame = json.loads(ws.recv(timeout=30))
                    if frame["kind"] == "ack":
                        reply_id = frame["assistant_message_id"]
                        continue
                    text.apply(frame)
                    if frame["kind"] == "event":
                        last_seq = frame["seq"]
                    if frame["kind"] == "delta" and frame["message_id"] == reply_id:
                        deltas += len(frame["delta"].split())  # a frame carries a window
            assert reply_id is not None
            # The socket is gone mid-reply; reconnect (to the other process) after the last seq.
            resumed_kinds: list[str] = []
            with open_socket(second, session.pk, token, after=last_seq) as ws:
                while True:
                    frame = json.loads(ws.recv(timeout=60))
                    resumed_kinds.append(frame["kind"])
                    text.apply(frame)  # refuses any hole or repeated character
                    if frame["kind"] == "event":
                        assert frame["seq"] == last_seq + 1  # no event missed or repeated
                        last_seq = frame["seq"]
                        if (
                            frame["type"] == "message.updated"
                            and frame["data"]["id"] == reply_id
                            and frame["data"]["completed_at"]
                        ):
                            break
            messages = httpx.get(
                f"{second.url}/api/sessions/{session.pk}/messages/",
                headers={"Authorization": f"Token {token}"},
                timeout=10,
            ).json()["results"]
            stored = next(p for p in messages[-1]["parts"] if p["type"] == "text")
            assert stored["text"] == prompt
            assert text.parts[stored["id"]] == prompt
            # It resumed mid-reply: the part's text so far, then the rest as deltas.
            assert resumed_kinds.count("snapshot") >= 1
            assert "delta" in resumed_kinds
        finally:
            if second_context:
                second_context.__exit__(None, None, None)
        if two_processes:
            assert "Traceback" not in first.output() + second.output()
