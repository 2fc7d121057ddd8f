"""``@modelcontextprotocol/server-everything`` from npm, over stdio and over streamable
HTTP: listing, a call, an image result landing as a ``file`` part, a server killed
mid-call (a tool error, the turn goes on), and restart (the next call works).

The server's tool names change between versions: the tests pick them by name and
fail clearly when one is absent.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from forge.runtime import start_turn
from forge.tools import mcp

from .conftest import (
    HttpServer,
    kill,
    logged_tools,
    one_child,
    reply_of,
    run_turn,
    stored_file,
    text_reply,
    tool_parts,
    tool_reply,
    use_servers,
    wait_running,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def pick(listing: mcp.Listing, *candidates: str) -> str:
    """The first of these tool names the server lists (``everything_`` prefixed)."""
    names = [t.name for t in listing.tools]
    for name in candidates:
        if f"everything_{name}" in names:
            return f"everything_{name}"
    raise AssertionError(f"server-everything lists none of {candidates}; it lists {names}")


@pytest.fixture(params=["stdio", "http"])
def transport(request: Any, everything: Path) -> str:
    return str(request.param)


@pytest.fixture
def spec(transport: str, everything: Path, request: Any) -> dict[str, Any]:
    if transport == "stdio":
        return {"command": "node", "args": [str(everything), "stdio"]}
    server: HttpServer = request.getfixturevalue("everything_http")
    request.node.http_server = server
    return {"url": server.url, "headers": {"X-Forge-Test": "secret-header-value"}}


async def test_lists_calls_and_returns_an_image_as_a_file_part(
    session, agents, script, spec, transport
):
    servers = {"everything": spec}
    listing = await asyncio.to_thread(mcp.list_tools, servers)
    assert listing.failures == {}
    echo = pick(listing, "echo")
    image = pick(listing, "get-tiny-image", "getTinyImage")
    await use_servers(servers)
    script(
        [
            tool_reply(echo, json.dumps({"message": "hello from forge"})),
            tool_reply(image, "{}", call_id="call_2"),
            text_reply("done"),
        ]
    )
    await run_turn(session, "echo, then a picture")
    reply = await reply_of(session)
    said, picture = tool_parts(reply)
    assert said["state"]["status"] == "completed", said["state"]
    assert "hello from forge" in said["state"]["output"]
    assert picture["state"]["status"] == "completed", picture["state"]
    files = [p for p in reply["parts"] if p["type"] == "file"]
    assert files, reply["parts"]
    png = next(p for p in files if p["mime"] == "image/png")
    assert png["filename"] in picture["state"]["output"]

    assert (await stored_file(png)).startswith(PNG_MAGIC)
    # The tool list the model was sent is logged, with the server's tools in it.
    assert echo in await logged_tools(session)


async def test_a_server_killed_mid_call_is_a_tool_error_then_it_restarts(
    session, agents, script, spec, transport, settings, request
):
    # Over HTTP, a server that dies mid-call leaves the call unanswered: the timeout ends it.
    settings.FORGE_TOOL_TIMEOUT = 20
    servers = {"everything": spec}
    listing = await asyncio.to_thread(mcp.list_tools, servers)
    slow = pick(listing, "trigger-long-running-operation", "longRunningOperation")
    echo = pick(listing, "echo")
    await use_servers(servers)
    script(
        [
            tool_reply(slow, json.dumps({"duration": 60, "steps": 2})),
            text_reply("the turn went on"),
            tool_reply(echo, json.dumps({"message": "back"}), call_id="call_2"),
            text_reply("again"),
        ]
    )
    started = await start_turn(session=session, text="slow")
    await wait_running(session, slow)
    if transport == "stdio":
        kill(await one_child("index.js stdio"))
    else:
        request.node.http_server.kill()
    await asyncio.wait_for(started.task, timeout=120)
    reply = await reply_of(session)
    [part] = tool_parts(reply)
    assert part["state"]["status"] == "error", part["state"]
    assert reply["parts"][-2]["text"] == "the turn went on"

    if transport == "http":
        request.node.http_server.start()  # the same port: the deployment's server is back
    settings.FORGE_TOOL_TIMEOUT = 60  # a loaded machine: reconnecting may take a while
    await run_turn(session, "echo")
    reply = await reply_of(session)
    [part] = tool_parts(reply)
    assert part["state"]["status"] == "completed", part["state"]
    assert "back" in part["state"]["output"]
