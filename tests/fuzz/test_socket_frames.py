"""A hypothesis fuzz of the session socket's client frames and query string: whatever
a client sends, the server answers with frames of the contract (an error frame for
anything bad) and never closes the socket on it, and never fails (no 1011)."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any
from urllib.parse import parse_qs

import pytest
from channels.db import database_sync_to_async
from channels.layers import channel_layers
from channels.testing import WebsocketCommunicator
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from forge.asgi import application
from sessions import selectors

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(600)]

EXAMPLES = int(os.environ.get("FORGE_FUZZ_EXAMPLES", "25"))
KINDS = {"error", "ack", "pong", "snapshot", "event", "delta", "status"}

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["", "\x00", "²", "\ud800", "prompt", "abort", "ping", "snapshot"]),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3), max_leaves=8)
frames = st.one_of(
    st.text(min_size=1, max_size=120),  # (an empty text frame cannot be sent)
    st.fixed_dictionaries(
        {"type": st.one_of(st.sampled_from(["prompt", "abort", "ping", "snapshot"]), values)},
        optional={"text": values, "agent": values, "client_id": values},
    ).map(lambda frame: json.dumps(frame)),
    st.integers(min_value=1, max_value=3000).map(lambda depth: "[" * depth + "]" * depth),
)
queries = st.one_of(
    st.just(""),
    st.text(max_size=20).map(lambda after: "after=" + after),
    st.integers(min_value=-5, max_value=10**30).map(lambda after: f"after={after}"),
)


def refused(after: str, head: int) -> bool:
    """Whether the socket refuses this ``?after=``: not ASCII digits, over 18 of them,
    or past the log's head."""
    after = after.strip()
    if not after:
        return False
    return not (after.isascii() and after.isdigit()) or len(after) > 18 or int(after) > head


async def exchange(session: Any, token: str, query: str, sent: list[str]) -> None:
    channel_layers.backends = {}  # this example's event loop gets its own layer
    session_id = session.pk
    head = await database_sync_to_async(selectors.head_seq)(
        tenant=session.tenant, session_id=session_id
    )
    ws = WebsocketCommunicator(
        application,
        f"/ws/sessions/{session_id}/?{query}",
        headers=[(b"origin", b"http://testserver"), (b"authorization", f"Token {token}".encode())],
    )
    connected, _ = await ws.connect(timeout=10)
    assert connected
    try:
        if refused(parse_qs(query).get("after", [""])[-1], head):
            # A bad ?after= is refused: its error frame, then 4400.
            frame = json.loads(await ws.receive_from(timeout=5))
            assert (frame["kind"], frame["code"]) == ("error", "invalid_cursor")
            assert (await ws.receive_output(timeout=5)) == {
                "type": "websocket.close",
                "code": 4400,
            }
            return
        for frame in sent:
            await ws.send_to(text_data=frame)
        await ws.send_to(text_data=json.dumps({"type": "ping"}))
        while True:  # everything answered, up to the pong of our last frame
            output = await ws.receive_output(timeout=10)
            assert output["type"] == "websocket.send", output
            answer = json.loads(output["text"])
            assert answer["kind"] in KINDS, answer
            if answer["kind"] == "pong":
                break
    finally:
        await ws.disconnect()
        from forge.runtime import settle

        await settle()


@hypothesis_settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)
@given(query=queries, sent=st.lists(frames, max_size=6))
def test_no_client_frame_breaks_the_socket(
    session: Any, token: str, agents: Any, settings: Any, query: str, sent: list[str]
) -> None:
    settings.FORGE_MODEL = "offline/echo"
    asyncio.run(exchange(session, token, query, sent))
