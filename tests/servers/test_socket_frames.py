"""Socket frames too large for daphne, through a real daphne (issue 17).

daphne refuses a message over its limit (1 MiB) before the consumer sees it; the
client must learn why: a close code, 1009 ("message too big"), not a dropped TCP
connection. A frame within the limit whose prompt is too large is the consumer's: a
``too_large`` error frame, and the socket stays open.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.live import daphne

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

DAPHNE_LIMIT = 1024 * 1024  # daphne's --websocket-max-message-size default


def test_a_frame_over_daphnes_limit_closes_1009_one_within_it_gets_too_large(
    tmp_path: Path, agents: Any, session: Any, token: str
) -> None:
    with (
        daphne(tmp_path) as server,
        connect(
            f"{server.ws_url}/ws/sessions/{session.pk}/",
            additional_headers={"Authorization": f"Token {token}", "Origin": server.url},
            open_timeout=30,
        ) as ws,
    ):
        assert json.loads(ws.recv(timeout=30))["type"] == "session.created"
        assert json.loads(ws.recv(timeout=30))["type"] == "session.status"  # idle
        ws.send(json.dumps({"type": "prompt", "text": "x" * 200_000, "client_id": "big"}))
        frame = json.loads(ws.recv(timeout=30))
        assert (frame["kind"], frame["code"], frame["client_id"]) == ("error", "too_large", "big")
        ws.send(json.dumps({"type": "ping"}))
        assert json.loads(ws.recv(timeout=30)) == {"kind": "pong"}  # still open

        with pytest.raises(ConnectionClosed) as closed:
            ws.send("x" * (DAPHNE_LIMIT + 1))
            ws.recv(timeout=30)
    assert closed.value.rcvd is not None, "daphne dropped the connection without a close frame"
    assert closed.value.rcvd.code == 1009


def test_a_frame_over_the_limit_is_sent_live_and_on_replay(
    tmp_path: Path, agents: Any, session: Any, token: str
) -> None:
    """The limit is on what a client sends. What Forge sends is its own and can be larger
    (a reply of megabytes, a tool's output up to FORGE_TOOL_OUTPUT_MAX_BYTES): daphne's
    protocol used to refuse such a frame too, so the socket went silent, live and on
    every replay of the session from the start."""
    big = "word " * 300_000  # 1.5 MB: its delta and its part.updated are over 1 MiB
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                [
                    {"type": "text-start", "id": "t"},
                    {"type": "text-delta", "id": "t", "delta": big},
                    {"type": "text-end", "id": "t"},
                    {"type": "finish-step", "finish_reason": "stop"},
                ]
            ]
        )
    )
    headers = {"Authorization": f"Token {token}"}

    def written_texts(frames: list[dict[str, Any]]) -> list[str]:
        return [
            f["data"]["text"]
            for f in frames
            if f.get("type") == "part.updated" and f["data"].get("text")
        ]

    def frames_until_completed(ws: Any) -> list[dict[str, Any]]:
        frames: list[dict[str, Any]] = []
        while not any(
            f.get("type") == "message.updated" and f["data"].get("completed_at") for f in frames
        ):
            frames.append(json.loads(ws.recv(timeout=60)))
        return frames

    with daphne(tmp_path, FORGE_MODEL="offline/script", FORGE_SCRIPT=str(script)) as server:
        url = f"{server.ws_url}/ws/sessions/{session.pk}/"
        with connect(
            url, additional_headers={**headers, "Origin": server.url}, max_size=None
        ) as ws:
            assert json.loads(ws.recv(timeout=30))["type"] == "session.created"
            assert json.loads(ws.recv(timeout=30))["type"] == "session.status"
            ws.send(json.dumps({"type": "prompt", "text": "say a lot", "client_id": "c"}))
            live = frames_until_completed(ws)
        assert written_texts(live) == ["say a lot", big.rstrip()]
        deltas = [f for f in live if f.get("kind") == "delta"]
        assert "".join(f["delta"] for f in deltas) == big
        with connect(
            f"{url}?after=0", additional_headers={**headers, "Origin": server.url}, max_size=None
        ) as ws:
            replayed = frames_until_completed(ws)
            ws.send(json.dumps({"type": "ping"}))
            # The backlog ends with the session's status (busy while the runner still
            # holds the lease, then idle, live), and the socket answers still.
            rest = [json.loads(ws.recv(timeout=30))]
            while rest[-1] != {"kind": "pong"}:
                rest.append(json.loads(ws.recv(timeout=30)))
            assert rest[0]["type"] == "session.status"
        assert written_texts(replayed) == ["say a lot", big.rstrip()]
