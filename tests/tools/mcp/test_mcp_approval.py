"""An MCP tool under an ``ask`` approval rule: the call waits, and once approved the
resumed turn finds the agent's MCP tool and runs it on the server."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from forge.runtime import answer, start_turn

from .conftest import (
    DEADLINE,
    reply_of,
    text_reply,
    time_server,
    tool_parts,
    tool_reply,
    use_servers,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


async def test_an_approved_mcp_call_runs_on_its_server(session, agents, settings, script, user):
    settings.FORGE_TOOL_APPROVAL = {"time_*": "ask", "*": "allow"}
    await use_servers({"time": time_server()})
    script(
        [
            tool_reply("time_get_current_time", json.dumps({"timezone": "UTC"})),
            text_reply("it is now"),
        ]
    )
    started = await start_turn(session=session, text="time?")
    await asyncio.wait_for(started.task, timeout=DEADLINE)
    [part] = tool_parts(await reply_of(session))
    assert part["state"]["status"] == "awaiting-approval"

    await answer(session=session, user=user, call_id="call_1", approve=True)
    deadline = time.monotonic() + DEADLINE
    while True:
        reply = await reply_of(session)
        if reply["info"].get("completed_at"):
            break
        assert time.monotonic() < deadline, "the approved turn did not finish"
        await asyncio.sleep(0.05)
    [part] = tool_parts(reply)
    assert part["state"]["status"] == "completed", part["state"]
    assert json.loads(part["state"]["output"])["timezone"] == "UTC"
    assert reply["parts"][-2]["text"] == "it is now"
