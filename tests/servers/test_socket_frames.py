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
