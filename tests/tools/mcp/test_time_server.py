"""``mcp-server-time`` from PyPI, over stdio: listing, a call, a server killed mid-call
(a tool error, the turn goes on), and its restart (the next call works)."""

from __future__ import annotations

import asyncio
import json
import signal

import pytest

from forge.runtime import start_turn
from forge.tools import mcp

from .conftest import (
    kill,
    logged_tools,
    one_child,
    reply_of,
    run_turn,
    text_reply,
    time_server,
    tool_parts,
    tool_reply,
    use_servers,
    wait_running,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

MARKER = "mcp_server_time"


def tool_named(listing: mcp.Listing, name: str) -> mcp.Listing:
    names = [t.name for t in listing.tools]
    assert name in names, f"{name} not listed by the server; it lists {names}"
    return listing


async def test_lists_and_calls_the_time_server(session, agents, script):
    listing = await asyncio.to_thread(mcp.list_tools, {"time": time_server()})
    assert listing.failures == {}
    tool_named(listing, "time_get_current_time")
    tool_named(listing, "time_convert_time")
    current = next(t for t in listing.tools if t.name == "time_get_current_time")
    assert current.parameters["type"] == "object"
    assert "timezone" in current.parameters["properties"]

    await use_servers({"time": time_server()})
    script(
        [
            tool_reply("time_get_current_time", json.dumps({"timezone": "Asia/Tokyo"})),
            text_reply("done"),
        ]
    )
    await run_turn(session, "what time is it in Tokyo?")
    reply = await reply_of(session)
    [part] = tool_parts(reply)
    assert part["state"]["status"] == "completed", part["state"]
    output = json.loads(part["state"]["output"])
    assert output["timezone"] == "Asia/Tokyo"
    assert "datetime" in output
    assert reply["parts"][-2]["text"] == "done"
    # The tool list the model was sent is in the log (replay stays exact).
    assert "time_get_current_time" in await logged_tools(session)


async def test_a_server_killed_mid_call_is_a_tool_error_and_the_next_call_restarts_it(
    session,
    agents,
    script,
    settings,
):
    settings.FORGE_TOOL_TIMEOUT = 120  # the error must come from the death, not a timeout
    await use_servers({"time": time_server()})
    call = json.dumps({"timezone": "UTC"})
    script(
        [
            tool_reply("time_get_current_time", call),
            text_reply("the turn went on"),
            tool_reply("time_get_current_time", call, call_id="call_2"),
            text_reply("again"),
        ]
    )
    await asyncio.to_thread(mcp.list_tools, {"time": time_server()})
    first = await one_child(MARKER)
    kill(first, signal.SIGSTOP)  # the call goes out and stays in flight
    started = await start_turn(session=session, text="time?")
    await wait_running(session, "time_get_current_time")
    kill(first, signal.SIGKILL)
    await asyncio.wait_for(started.task, timeout=120)
    reply = await reply_of(session)
    [part] = tool_parts(reply)
    assert part["state"]["status"] == "error"
    assert "went away" in part["state"]["error"], part["state"]["error"]
    assert "timed out" not in part["state"]["error"]
    assert reply["parts"][-2]["text"] == "the turn went on"

    await run_turn(session, "and now?")
    reply = await reply_of(session)
    [part] = tool_parts(reply)
    assert part["state"]["status"] == "completed", part["state"]
    assert json.loads(part["state"]["output"])["timezone"] == "UTC"
    second = await one_child(MARKER)
    assert second != first
