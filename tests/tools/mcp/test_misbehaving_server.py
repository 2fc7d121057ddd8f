"""Bad input from an MCP server (tests/tools/mcp/servers/misbehaving.py, written with the
SDK's FastMCP): garbage on stdout, a non-JSON answer, an oversized result, a schema
that is not JSON Schema, a hang, an exit mid-call, a server that does not start.
Each ends in a left-out tool or server, or a tool error; the turn always ends and the
next call works."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import pytest

from forge.tools import mcp

from .conftest import (
    SERVERS,
    logged_context,
    logged_tools,
    misbehaving,
    reply_of,
    run_turn,
    stored_file,
    text_reply,
    tool_parts,
    tool_reply,
    use_servers,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

ECHO = tool_reply("bad_echo", json.dumps({"text": "still here"}), call_id="call_2")


async def two_calls(session, script, settings, first: list[dict]) -> tuple[dict, dict]:
    """A turn calling ``first``, then a turn calling ``bad_echo``: both tool parts."""
    script([first, text_reply("the turn went on"), ECHO, text_reply("next")])
    await run_turn(session, "first")
    reply = await reply_of(session)
    [failed] = tool_parts(reply)
    assert reply["parts"][-2]["text"] == "the turn went on"
    settings.FORGE_TOOL_TIMEOUT = 60  # a loaded machine: restarting may take a while
    await run_turn(session, "second")
    [echoed] = tool_parts(await reply_of(session))
    assert echoed["state"]["status"] == "completed", echoed["state"]
    assert echoed["state"]["output"] == "echo: still here"
    return failed, echoed


async def test_a_schema_that_is_not_json_schema_leaves_that_tool_out():
    listing = await asyncio.to_thread(mcp.list_tools, {"bad": misbehaving()})
    names = [t.name for t in listing.tools]
    assert "bad_echo" in names
    assert "bad_bad_schema" not in names
    assert listing.failures == {}


async def test_garbage_on_stdout_before_the_handshake_does_not_break_the_server(
    session, agents, script
):
    await use_servers({"bad": misbehaving("garbage-first")})
    script([ECHO, text_reply("done")])
    await run_turn(session, "echo")
    [part] = tool_parts(await reply_of(session))
    assert part["state"]["status"] == "completed", part["state"]


async def test_a_hanging_server_times_out_and_is_restarted_for_the_next_call(
    session, agents, script, settings
):
    settings.FORGE_TOOL_TIMEOUT = 3
    await use_servers({"bad": misbehaving()})
    failed, _ = await two_calls(session, script, settings, tool_reply("bad_hang", "{}"))
    assert failed["state"]["status"] == "error"
    assert "timed out" in failed["state"]["error"]


async def test_a_non_json_answer_is_a_tool_error(session, agents, script, settings):
    settings.FORGE_TOOL_TIMEOUT = 3
    await use_servers({"bad": misbehaving()})
    failed, _ = await two_calls(session, script, settings, tool_reply("bad_garbage", "{}"))
    assert failed["state"]["status"] == "error"


async def test_a_server_exiting_mid_call_is_a_tool_error(session, agents, script, settings):
    settings.FORGE_TOOL_TIMEOUT = 120  # the error comes from the exit, not a timeout
    await use_servers({"bad": misbehaving()})
    failed, _ = await two_calls(session, script, settings, tool_reply("bad_die", "{}"))
    assert failed["state"]["status"] == "error"
    assert "went away" in failed["state"]["error"]


async def test_an_oversized_result_is_logged_and_the_turn_goes_on(
    session, agents, script, settings
):
    size = 3_000_000
    await use_servers({"bad": misbehaving()})
    ok, _ = await two_calls(
        session, script, settings, tool_reply("bad_big", json.dumps({"size": size}))
    )
    assert ok["state"]["status"] == "completed", ok["state"].get("error")
    assert ok["state"]["output"].startswith("x" * 1000)
    # Whole, or cut with the cut said (forge.tools.execute): never cut silently.
    output = ok["state"]["output"]
    assert len(output) >= size or ok["state"]["metadata"].get("truncated") is True


async def test_an_image_result_becomes_a_file_part(session, agents, script):
    await use_servers({"bad": misbehaving()})
    script([tool_reply("bad_picture", "{}"), text_reply("done")])
    await run_turn(session, "a picture")
    reply = await reply_of(session)
    [part] = tool_parts(reply)
    assert part["state"]["status"] == "completed", part["state"]
    [file] = [p for p in reply["parts"] if p["type"] == "file"]
    assert file["mime"] == "image/png"
    assert (await stored_file(file)).startswith(b"\x89PNG")


@pytest.fixture
def built_in_clash_echo():
    """A built-in tool named ``clash_echo``: what server ``clash``'s ``echo`` would be."""
    from forge.tools import registry
    from forge.tools.base import Tool

    async def built_in(ctx: Any, args: dict[str, Any]) -> str:
        return "the built-in"

    registry.register(
        Tool(
            name="clash_echo",
            description="built in",
            parameters={"type": "object"},
            function=built_in,
        )
    )
    yield
    with registry._lock:
        registry._registry.pop("clash_echo", None)


async def test_a_tool_named_as_a_built_in_is_left_out_with_a_notice(
    session, agents, script, built_in_clash_echo
):
    """A fourth-round finding: a server ``history`` with a tool ``read`` gave a second
    ``history_read`` in the model's tool list, and its calls ran the MCP tool (which, MCP
    tools being always allowed, also got past the agent's allow-list)."""
    await use_servers({"clash": misbehaving()})
    script([tool_reply("clash_echo", "{}"), text_reply("done")])
    await run_turn(session, "hello")
    tools = await logged_tools(session)
    assert tools.count("clash_echo") == 1  # the built-in's, once
    assert "clash_big" in tools  # the server's other tools are in
    notice = (await logged_context(session))["mcp:agent"]
    assert "clash_echo (server 'clash': a built-in tool has that name)" in notice["text"]
    [called] = tool_parts(await reply_of(session))
    assert called["state"]["output"] == "the built-in"


async def test_a_server_that_fails_to_start_is_left_out_with_a_logged_notice(
    session, agents, script
):
    await use_servers({"bad": misbehaving(), "broken": misbehaving("exit-at-start")})
    script([text_reply("fine")])
    await run_turn(session, "hello")
    tools = await logged_tools(session)
    assert "bad_echo" in tools
    assert not [name for name in tools if name.startswith("broken_")]
    notice = (await logged_context(session))["mcp:agent"]
    assert "broken" in notice["text"]
    assert "bad:" not in notice["text"]
    # The model is told (a context block other than system/tools/settings is system text).
    _, request = await asyncio.to_thread(_request, session)
    assert any("broken" in text for text in request.system)
    assert "bad_echo" in [t.name for t in request.tools]
    assert (await reply_of(session))["parts"][-2]["text"] == "fine"
    # Once it starts, the notice goes.
    await use_servers({"bad": misbehaving()})
    script([text_reply("fine again")])
    await run_turn(session, "hello again")
    assert "mcp:agent" not in await logged_context(session)


def _request(session: Any) -> Any:
    from django.db import close_old_connections

    from forge.context import request_for

    try:
        return request_for(session)
    finally:
        close_old_connections()


def rpc_errors(counter: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(SERVERS / "rpc_errors.py"), str(counter)]}


async def test_a_json_rpc_error_the_server_sends_is_its_tool_error(
    session, agents, script, tmp_path
):
    """QA (MEDIUM): the SDK's own codes for a lost connection (-32000) and a forgotten
    HTTP session (32600) were read as such whoever sent them. A server answering a call
    with -32000 ("server error" in JSON-RPC) got "the server went away during the call",
    its message lost and the live server restarted; one answering 32600 on stdio had the
    call sent again (the tool ran twice). Only the SDK's own errors mean the transport."""
    counter = tmp_path / "runs"
    await use_servers({"rpc": rpc_errors(counter)})
    calls = ["rpc_pid", "rpc_server_error", "rpc_refused", "rpc_pid"]
    script([step for tool in calls for step in (tool_reply(tool, "{}"), text_reply("went on"))])
    parts = []
    for tool in calls:
        await run_turn(session, tool)
        [part] = tool_parts(await reply_of(session))
        parts.append(part["state"])
    assert parts[1]["error"] == "MCP server 'rpc': server side failure"
    assert parts[2]["error"] == "MCP server 'rpc': quota exceeded"
    assert counter.read_text() == "x"  # sent once
    assert parts[3]["output"] == parts[0]["output"]  # the same server: not restarted
