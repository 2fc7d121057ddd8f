"""The socket's approval frame (CONTRACT §4): it answers through the same service as the
REST route, and its refusals are error frames that keep the socket open."""

from __future__ import annotations

import json

import pytest

from tests.runtime.test_turns import text_reply, tool_reply

from .test_socket import finished, frames_until, socket, until_ack

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(90)]

WRITE = '{"path": "notes.txt", "content": "hi"}'


def _awaiting(frames: list[dict]) -> bool:
    return any(
        f.get("type") == "part.updated"
        and f["data"].get("state", {}).get("status") == "awaiting-approval"
        for f in frames
    )


def _error(frames: list[dict]) -> bool:
    return bool(frames) and frames[-1].get("kind") == "error"


async def test_an_approval_frame_answers_and_the_reply_finishes(
    session, token, agents, settings, script
):
    settings.FORGE_TOOL_APPROVAL = {"write_file": "ask"}
    script([tool_reply("write_file", WRITE), text_reply("socket approved")])
    ws = socket(session.pk, token)
    await ws.connect(timeout=10)
    await ws.send_to(text_data=json.dumps({"type": "prompt", "text": "write"}))
    ack, _ = await until_ack(ws)
    await frames_until(ws, _awaiting)
    for bad, code in [
        ({"type": "approval", "call_id": "call_1", "approve": "yes"}, "invalid_answer"),
        ({"type": "approval", "call_id": "call_9", "approve": True}, "approval_not_found"),
    ]:
        await ws.send_to(text_data=json.dumps(bad))
        frames = await frames_until(ws, _error)
        assert frames[-1]["code"] == code
    await ws.send_to(
        text_data=json.dumps({"type": "approval", "call_id": "call_1", "approve": True})
    )
    frames = await frames_until(ws, finished(ack["assistant_message_id"]))
    texts = [
        f["data"]["text"]
        for f in frames
        if f.get("type") == "part.updated" and f["data"].get("type") == "text"
    ]
    assert "socket approved" in texts
    await ws.send_to(
        text_data=json.dumps({"type": "approval", "call_id": "call_1", "approve": True})
    )
    frames = await frames_until(ws, _error)
    assert (frames[-1]["code"], frames[-1]["call_id"]) == ("approval_answered", "call_1")
    await ws.disconnect()
