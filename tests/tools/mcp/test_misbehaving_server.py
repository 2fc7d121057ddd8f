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
from tests.runtime.conftest import alog

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
    assert "bad_remote_ref" not in names  # never fetched (QA: jsonschema's urlopen)
    assert listing.failures == {}


def test_a_tool_whose_output_schema_refers_elsewhere_is_left_out():
    """The SDK validates results against the output schema, fetching a remote ``$ref``."""
    from mcp import types as mcp_types

    from forge.tools.mcp.adapter import adapt
    from forge.tools.mcp.spec import parse_server

    spec = parse_server("bad", misbehaving())
    remote = {"type": "object", "properties": {"y": {"$ref": "http://192.0.2.1/out.json"}}}
    local = {"type": "object", "properties": {"y": {"type": "string"}}}
    plain = {"type": "object"}
    assert adapt(spec, mcp_types.Tool(name="t", inputSchema=plain, outputSchema=remote)) is None
    kept = adapt(spec, mcp_types.Tool(name="t", inputSchema=plain, outputSchema=local))
    assert kept is not None


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


@pytest.mark.parametrize(
    ("tool", "text"),
    [("bad_half_emoji", "cut \ufffd"), ("bad_latin1", "caf\ufffd")],
    ids=["lone-surrogate-escape", "not-utf-8"],
)
async def test_an_answer_with_a_half_character_is_the_result_with_u_fffd(
    session, agents, script, settings, tool, text
):
    """QA: the SDK's parser refused an answer holding a lone surrogate escape (a
    JavaScript server cutting a string inside an emoji), and its stdio reader one byte
    that is not UTF-8: the first waited for ``FORGE_TOOL_TIMEOUT`` and failed as a
    timeout, the second ended the transport ("the server went away"), each costing the
    server a restart. The character is U+FFFD, the rest of the answer is the result."""
    settings.FORGE_TOOL_TIMEOUT = 30
    await use_servers({"bad": misbehaving()})
    ok, _ = await two_calls(session, script, settings, tool_reply(tool, "{}"))
    assert ok["state"]["status"] == "completed", ok["state"]
    assert ok["state"]["output"] == text


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


async def test_an_oversized_error_is_logged_and_sent_cut(session, agents, script, settings):
    """QA: an ``isError`` answer of megabytes was logged whole, and sent whole to the
    model with every later request (only a completed output's projection is cut): the
    next step was over the model's context limit, and so was every later one."""
    from forge.context.tool_output import MODEL_OUTPUT_CHARS

    await use_servers({"bad": misbehaving()})
    failed, _ = await two_calls(
        session, script, settings, tool_reply("bad_big_error", json.dumps({"size": 3_000_000}))
    )
    error = failed["state"]["error"]
    assert failed["state"]["status"] == "error"
    assert len(error) == MODEL_OUTPUT_CHARS
    assert "e" * 1000 in error
    assert "\n\n[error truncated: showing the first " in error
    assert error.endswith(" characters]")


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
    # Its tools whose schema is unusable are named, with why (they were left out
    # silently, and the model was never told).
    assert "bad_bad_schema (server 'bad': tool 'bad_bad_schema'" in notice["text"]
    assert "bad_remote_ref (server 'bad': " in notice["text"]
    # The model is told (a context block other than system/tools/settings is system text).
    _, request = await asyncio.to_thread(_request, session)
    assert any("broken" in text for text in request.system)
    assert "bad_echo" in [t.name for t in request.tools]
    assert (await reply_of(session))["parts"][-2]["text"] == "fine"
    # Once it starts, the notice says no more of it.
    await use_servers({"bad": misbehaving()})
    script([text_reply("fine again")])
    await run_turn(session, "hello again")
    assert "broken" not in (await logged_context(session))["mcp:agent"]["text"]


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


async def test_a_result_the_sdk_cannot_read_is_a_short_error_without_the_servers_secrets(
    session, agents, script, tmp_path
):
    """QA (HIGH): a result the SDK could not parse failed the call with pydantic's whole
    text, which repeats the server's answer: a secret of its env that the answer quoted
    was logged as it was (the tool part's error: the model, /events/, exports, traces).
    The error is the failure's first line, masked."""
    secret = "Zq7private9Xw2"
    await use_servers({"rpc": {**rpc_errors(tmp_path / "runs"), "env": {"RPC_TOKEN": secret}}})
    script([tool_reply("rpc_malformed", "{}"), text_reply("went on")])
    await run_turn(session, "call it")
    [part] = tool_parts(await reply_of(session))
    assert part["state"]["status"] == "error"
    assert part["state"]["error"].startswith("MCP server 'rpc': ValidationError: ")
    assert "\n" not in part["state"]["error"]
    assert secret not in json.dumps(await alog(session))


async def test_one_calls_timeout_does_not_end_another_call_on_the_same_server(tmp_path):
    """One connection per server and process serves every session: a call given up on
    (its tool timeout) stopped the server under the other calls still running on it,
    which failed as "the server went away" (QA). The server is restarted once no call
    is left on it."""
    from tests.tools import make_context

    listing = await asyncio.to_thread(mcp.list_tools, {"bad": misbehaving()})
    tools = {t.name: t for t in listing.tools}
    ctx = make_context(tmp_path)
    hanging = asyncio.ensure_future(
        asyncio.wait_for(tools["bad_hang"].function(ctx, {}), timeout=2)
    )
    await asyncio.sleep(0.5)
    slow = asyncio.ensure_future(tools["bad_sleep"].function(ctx, {"seconds": 3}))
    with pytest.raises(TimeoutError):
        await hanging
    result = await asyncio.wait_for(slow, timeout=30)
    assert result.output == "slept 3"
    # The hung call left the connection suspect: with no call on it, the next call gets
    # a fresh server, and answers.
    echoed = await asyncio.wait_for(tools["bad_echo"].function(ctx, {"text": "hi"}), 30)
    assert echoed.output == "echo: hi"


async def test_an_error_answer_quoting_the_servers_secret_is_masked(tmp_path):
    """FastMCP and the SDK's server turn every exception into an ``isError`` answer: the
    usual way a tool fails. Its text went to the log, the model and the API unmasked,
    while a JSON-RPC error's was masked (QA)."""
    from forge.tools import ToolError
    from tests.tools import make_context

    secret = "s3cr3t-VALUE-0123456789"
    server = {**misbehaving(), "env": {"QA_SECRET": secret}}
    listing = await asyncio.to_thread(mcp.list_tools, {"bad": server})
    tool = next(t for t in listing.tools if t.name == "bad_fail_quoting")
    with pytest.raises(ToolError) as failed:
        await asyncio.wait_for(tool.function(make_context(tmp_path), {"variable": "QA_SECRET"}), 30)
    assert secret not in failed.value.message
    assert "auth failed with token" in failed.value.message


def test_a_tool_whose_input_schema_is_huge_is_left_out():
    """The tools block goes to the model with every request: a 3 MB schema made every
    request 3.7 MB (QA)."""
    from mcp import types as mcp_types

    from forge.tools.mcp.adapter import MAX_SCHEMA_BYTES, adapt
    from forge.tools.mcp.spec import parse_server

    spec = parse_server("bad", misbehaving())
    many = {f"p{n}": {"type": "string", "description": "x" * 100} for n in range(1_000)}
    huge = {"type": "object", "properties": many}
    assert len(json.dumps(huge)) > MAX_SCHEMA_BYTES
    assert adapt(spec, mcp_types.Tool(name="t", inputSchema=huge)) is None
    # Counted in bytes: 30,000 CJK characters are 90 KB.
    wide = {"type": "object", "properties": {"p": {"type": "string", "description": "字" * 30_000}}}
    assert adapt(spec, mcp_types.Tool(name="t", inputSchema=wide)) is None
    fine = {"type": "object", "properties": dict(list(many.items())[:10])}
    assert adapt(spec, mcp_types.Tool(name="t", inputSchema=fine)) is not None


@pytest.mark.parametrize(
    ("mime", "ending"),
    [("audio/wav", ".wav"), ("audio/x-wav", ".wav"), ("image/png", ".png"), ("x/y", ".bin")],
)
def test_a_stored_media_file_is_named_by_its_type(mime, ending):
    """A WAV was stored as ``.bin`` (QA): Python's table has no extension for it."""
    from forge.tools.mcp.adapter import _filename

    assert _filename("bad_media", 3, mime).endswith(ending)


def test_an_embedded_resource_is_named_by_its_uri_s_path():
    """QA: the name was the URI's last ``/`` piece, a signed URL's query with it
    (``report.txt?sig=…``), and ``..`` was one."""
    from mcp import types as mcp_types

    from forge.tools.mcp.adapter import convert

    def resource(uri: str) -> mcp_types.EmbeddedResource:
        contents = mcp_types.TextResourceContents.model_validate(
            {"uri": uri, "mimeType": "text/plain", "text": "t"}
        )
        return mcp_types.EmbeddedResource(type="resource", resource=contents)

    uris = ["https://h/a/report.txt?sig=abcdef#k", "https://h/x/..", "file:///r/my%20notes.md"]
    result = convert("s_t", mcp_types.CallToolResult(content=[resource(u) for u in uris]))
    assert [f.filename for f in result.files] == ["report.txt", "s_t-2.txt", "my notes.md"]
    assert "sig" not in result.output


def test_an_error_result_names_no_file_it_does_not_keep():
    """QA: an ``isError`` result with an image said ``[file: …]``; no part held it."""
    from mcp import types as mcp_types

    from forge.tools.base import ToolError
    from forge.tools.mcp.adapter import convert

    png = mcp_types.ImageContent(type="image", data="iVBORw0KGgo=", mimeType="image/png")
    text = mcp_types.TextContent(type="text", text="it failed")
    with pytest.raises(ToolError) as failed:
        convert("s_t", mcp_types.CallToolResult(content=[text, png], isError=True))
    assert failed.value.message == "it failed"


async def test_a_changed_tool_list_is_listed_again(tmp_path):
    """``notifications/tools/list_changed`` was ignored: the tools of the server's start
    were offered until it restarted, a new one was an unknown tool (QA)."""
    from tests.tools import make_context

    server = {"grower": misbehaving("start-log=" + str(tmp_path / "starts.log"))}
    listing = await asyncio.to_thread(mcp.list_tools, server)
    names = {t.name for t in listing.tools}
    assert "grower_added" not in names
    grow = next(t for t in listing.tools if t.name == "grower_grow")
    assert (await asyncio.wait_for(grow.function(make_context(tmp_path), {}), 30)).output == "grown"
    deadline = asyncio.get_running_loop().time() + 10
    while "grower_added" not in names:
        assert asyncio.get_running_loop().time() < deadline, names
        await asyncio.sleep(0.1)
        names = {t.name for t in (await asyncio.to_thread(mcp.list_tools, server)).tools}
    assert (tmp_path / "starts.log").read_text().count("\n") == 1  # not restarted


async def test_a_hung_server_is_replaced_even_while_calls_keep_overlapping(tmp_path, settings):
    """Calls that keep overlapping on a hung server kept it: each timed out with another
    still running, so none replaced it (review). A call made on a suspect connection
    gives the others at most its own timeout, then replaces the server."""
    from tests.tools import make_context

    log = tmp_path / "starts.log"
    listing = await asyncio.to_thread(mcp.list_tools, {"bad": misbehaving(f"start-log={log}")})
    tools = {t.name: t for t in listing.tools}
    ctx = make_context(tmp_path)

    def hung() -> asyncio.Future:
        return asyncio.ensure_future(asyncio.wait_for(tools["bad_hang"].function(ctx, {}), 2))

    first = hung()
    await asyncio.sleep(1)
    second = hung()  # overlaps the first's timeout
    with pytest.raises(TimeoutError):
        await first
    third = hung()  # made while the second still runs on the suspect connection
    for call in (second, third):
        with pytest.raises((TimeoutError, Exception)):
            await call
    # The third call replaced the server once the second had drained (a second start),
    # and its own timeout left it suspect again: the next call starts a third one.
    # Before, the third call joined the suspect server, and only one restart followed.
    echoed = await asyncio.wait_for(tools["bad_echo"].function(ctx, {"text": "hi"}), 30)
    assert echoed.output == "echo: hi"
    assert log.read_text().count("\n") >= 3


def test_the_notice_names_so_many_left_out_tools_and_counts_the_rest():
    """A server listing thousands of unusable tools does not make a notice of them all."""
    from forge.runtime.agents import FALLBACK
    from forge.runtime.prompting import MAX_LEFT_OUT_SHOWN, agent_blocks

    listing = mcp.Listing(left_out={f"bad_t{n:04}": "server 'bad': why" for n in range(500)})
    [notice] = [b for b in agent_blocks(FALLBACK, listing) if b["kind"] == "mcp"]
    assert notice["text"].count("(server 'bad': why)") == MAX_LEFT_OUT_SHOWN
    assert notice["text"].startswith("These MCP tools are left out: bad_t0000 (")
    assert notice["text"].endswith(f"; and {500 - MAX_LEFT_OUT_SHOWN} more")
