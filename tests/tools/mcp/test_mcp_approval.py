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


async def test_an_approved_built_in_call_does_not_wait_for_the_mcp_servers(
    session, agents, settings, script, user
):
    """A fourth-round finding: the process that took the answer listed (and so started)
    every MCP server of the agent before it ran an approved built-in tool: 8 s for a
    slow server, and a kill -9 meanwhile left the call interrupted before it began."""
    from forge.tools.mcp import connection

    from .conftest import misbehaving

    settings.FORGE_TOOL_APPROVAL = {"write_file": "ask", "*": "allow"}
    agents["build"].tools = ["write_file"]
    await asyncio.to_thread(agents["build"].save)
    await use_servers({"bad": misbehaving()})
    script([tool_reply("write_file", '{"path": "n.txt", "content": "hi"}'), text_reply("ok")])
    started = await start_turn(session=session, text="write")
    await asyncio.wait_for(started.task, timeout=DEADLINE)
    await connection.close_all()  # as a process that never ran this agent's turn
    await answer(session=session, user=user, call_id="call_1", approve=True)
    deadline = time.monotonic() + DEADLINE
    while not (await reply_of(session))["info"].get("completed_at"):
        assert time.monotonic() < deadline, "the approved turn did not finish"
        await asyncio.sleep(0.05)
    [part] = tool_parts(await reply_of(session))
    assert part["state"]["status"] == "completed", part["state"]
    assert not connection._connections  # no MCP server was started for it
