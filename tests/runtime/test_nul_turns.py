"""NUL characters (U+0000) in what a model or a tool produces never fail a reply
(issue 17, MEDIUM 5). The log stores no NUL (``sessions.services``), so:

* a tool call whose arguments hold one ends that tool call in error, and the reply
  goes on (the model hears why);
* a tool whose result holds one ends its call in error too;
* a model's NUL in text, reasoning, a tool's name or an error message becomes
  U+FFFD as it arrives, in the frames and the log alike.

Before, on PostgreSQL each of these ended the whole reply with
``UnknownError (DataError)``; on SQLite the NUL was stored.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from forge.runtime import start_turn
from forge.tools import Tool, ToolResult, temporary_tools

from .conftest import ahistory
from .test_turns import text_reply, tool_reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


async def run(session: Any, text: str) -> Any:
    started = await start_turn(session=session, text=text)
    await asyncio.wait_for(started.task, timeout=30)
    return started


def reply_of(items: list[dict[str, Any]]) -> dict[str, Any]:
    return next(item for item in reversed(items) if item["info"]["role"] == "assistant")


def tool_part(reply: dict[str, Any]) -> dict[str, Any]:
    return next(p for p in reply["parts"] if p["type"] == "tool")


def texts(reply: dict[str, Any], kind: str = "text") -> list[str]:
    return [p["text"] for p in reply["parts"] if p["type"] == kind]


async def test_a_tool_call_whose_arguments_hold_a_nul_ends_in_a_tool_error(session, agents, script):
    arguments = '{"path": "notes.txt", "content": "a\\u0000b"}'
    script([tool_reply("write_file", arguments), text_reply("I see the problem")])
    await run(session, "write it")
    reply = reply_of(await ahistory(session))
    part = tool_part(reply)
    assert part["state"]["status"] == "error"
    assert "NUL" in part["state"]["error"]
    assert part["state"]["input"] == {}
    assert part["state"]["metadata"]["raw_input"] == arguments  # JSON text: no NUL in it
    assert reply["info"]["error"] is None
    assert reply["info"]["finish"] == "stop"
    assert texts(reply) == ["I see the problem"]


async def test_a_tool_whose_result_holds_a_nul_ends_in_a_tool_error(session, agents, script):
    async def binary(ctx: Any, args: dict[str, Any]) -> ToolResult:
        return ToolResult(output="ok", metadata={"bytes": "\x00\x01"})

    script([tool_reply("binary", "{}"), text_reply("noted")])
    with temporary_tools(Tool("binary", "returns a NUL", {"type": "object"}, binary)):
        await run(session, "go")
    reply = reply_of(await ahistory(session))
    part = tool_part(reply)
    assert part["state"]["status"] == "error"
    assert "NUL" in part["state"]["error"]
    assert reply["info"]["error"] is None
    assert texts(reply) == ["noted"]


async def test_a_tool_that_raises_a_message_with_a_nul_ends_in_that_error(session, agents, script):
    async def broken(ctx: Any, args: dict[str, Any]) -> str:
        raise OSError("cannot open b'\x00'")

    script([tool_reply("broken", "{}"), text_reply("noted")])
    with temporary_tools(Tool("broken", "raises", {"type": "object"}, broken)):
        await run(session, "go")
    part = tool_part(reply_of(await ahistory(session)))
    assert part["state"]["status"] == "error"
    assert "cannot open b'\ufffd'" in part["state"]["error"]


async def test_a_models_nul_characters_become_u_fffd_in_the_frames_and_the_log(
    session, agents, script, record
):
    script(
        [
            [
                {"type": "reasoning-start", "id": "r"},
                {"type": "reasoning-delta", "id": "r", "delta": "think\x00"},
                {"type": "reasoning-end", "id": "r"},
                {"type": "text-start", "id": "t"},
                {"type": "text-delta", "id": "t", "delta": "a\x00"},
                {"type": "text-delta", "id": "t", "delta": "b\x00\x00c"},
                {"type": "text-end", "id": "t"},
                {"type": "finish-step", "finish_reason": "stop", "usage": {"output": 3}},
            ]
        ]
    )
    recorder = await record(session)
    await run(session, "say it")
    frames = await recorder.settle()
    reply = reply_of(await ahistory(session))
    assert texts(reply) == ["a\ufffdb\ufffd\ufffdc"]
    assert texts(reply, "reasoning") == ["think\ufffd"]
    assert reply["info"]["error"] is None
    text_id = reply["parts"][2]["id"]
    streamed = "".join(
        f["delta"] for f in frames if f["kind"] == "delta" and f["part_id"] == text_id
    )
    assert streamed == "a\ufffdb\ufffd\ufffdc"


async def test_a_tool_name_and_a_provider_error_with_nul_are_stored_with_u_fffd(
    session, agents, script
):
    script(
        [
            tool_reply("rm\x00rf", "{}"),
            [{"type": "error", "name": "API\x00Error", "message": "upstream said \x00"}],
        ]
    )
    await run(session, "go")
    reply = reply_of(await ahistory(session))
    part = tool_part(reply)
    # No function can have that name: logged as invalid_tool, the error naming it.
    assert part["tool"] == "invalid_tool"
    assert part["state"]["status"] == "error"
    assert "unknown tool 'rm\ufffdrf'" in part["state"]["error"]
    assert reply["info"]["error"]["name"] == "API\ufffdError"
    assert reply["info"]["error"]["message"] == "upstream said \ufffd"


async def test_through_the_openai_provider_a_nul_in_arguments_or_text_fails_nothing(
    session, agents, settings
):
    """The same, from a real HTTP stream (the official SDK against a fake server)."""
    from tests.providers.fake_openai import FakeOpenAI, ToolCallScript, reply

    with FakeOpenAI() as fake:
        settings.OPENAI_BASE_URL = fake.base_url
        settings.OPENAI_API_KEY = "sk-test"
        settings.FORGE_MODEL = "openai/gpt-4o-mini"
        fake.push(
            reply(
                text=["Writing\x00 it."],
                tool_calls=[
                    ToolCallScript(
                        "call_a", "write_file", ['{"path": "a.txt", ', '"content": "a\\u0000"}']
                    )
                ],
                finish_reason="tool_calls",
            ),
            reply(text=["The file has a NUL; ", "I left it out."]),
        )
        await run(session, "write it")
    reply_item = reply_of(await ahistory(session))
    part = tool_part(reply_item)
    assert part["state"]["status"] == "error"
    assert "arguments.content holds a NUL character" in part["state"]["error"]
    assert texts(reply_item) == ["Writing\ufffd it.", "The file has a NUL; I left it out."]
    assert reply_item["info"]["error"] is None
    assert reply_item["info"]["finish"] == "stop"


async def test_a_text_complete_hook_that_adds_a_nul_fails_nothing(session, agents, settings):
    from forge import hooks

    settings.FORGE_MODEL = "offline/echo"

    def stamp(text: str, context: hooks.TextContext) -> str:
        return text + "\x00"

    hooks.text_complete.register(stamp)
    try:
        await run(session, "hello")
    finally:
        hooks.text_complete.unregister(stamp)
    reply = reply_of(await ahistory(session))
    assert texts(reply) == ["hello\ufffd"]
    assert reply["info"]["error"] is None


async def test_a_models_lone_surrogates_become_u_fffd_and_the_reply_completes(
    session, agents, settings, record
):
    """A model server whose strings are UTF-16 (JavaScript) may send half a surrogate
    pair: one split between two chunks arrives whole (the emoji), one alone becomes
    U+FFFD, in text, reasoning, a tool's name and an error message, in the frames and
    the log alike. Before, hashing the text part's event failed (``UnicodeEncodeError:
    surrogates not allowed``), so did the failure handler's, and the reply stayed open
    for ever (``completed_at`` null) while the session said idle."""
    from tests.providers.fake_openai import FakeOpenAI, Stream, ToolCallScript, chunk, reply

    with FakeOpenAI() as fake:
        settings.OPENAI_BASE_URL = fake.base_url
        settings.OPENAI_API_KEY = "sk-test"
        settings.FORGE_MODEL = "openai/gpt-4o-mini"
        fake.push(
            reply(
                reasoning=["hmm \udc00"],
                text=["smile \ud83d", "\ude00 done", " bad \ud800 half"],
                tool_calls=[ToolCallScript("call_a", "rm\udfffrf", ["{}"])],
                finish_reason="tool_calls",
            ),
            Stream([chunk({"content": "then \ud83d"}), {"error": {"message": "down \udbff"}}]),
        )
        recorder = await record(session)
        await run(session, "smile")
        frames = await recorder.settle()
    reply_item = reply_of(await ahistory(session))
    assert texts(reply_item) == ["smile \U0001f600 done bad \ufffd half", "then \ufffd"]
    assert texts(reply_item, "reasoning") == ["hmm \ufffd"]
    assert tool_part(reply_item)["tool"] == "invalid_tool"
    assert "unknown tool 'rm\ufffdrf'" in tool_part(reply_item)["state"]["error"]
    assert reply_item["info"]["completed_at"] is not None
    assert "down \ufffd (after part" in reply_item["info"]["error"]["message"]
    streamed = "".join(f["delta"] for f in frames if f["kind"] == "delta")
    assert "smile \U0001f600 done bad \ufffd half" in streamed
    assert "\ud83d" not in streamed
    assert "\ud800" not in streamed


async def test_a_tool_call_whose_arguments_hold_a_lone_surrogate_ends_in_a_tool_error(
    session, agents, script
):
    """``"\\ud800"`` in the arguments' JSON decodes to half a surrogate pair, which the
    log cannot store: a tool error, as a NUL is, and the reply goes on."""
    arguments = '{"path": "notes.txt", "content": "a\\ud800b"}'
    script([tool_reply("write_file", arguments), text_reply("I see the problem")])
    await run(session, "write it")
    reply = reply_of(await ahistory(session))
    part = tool_part(reply)
    assert part["state"]["status"] == "error"
    assert "arguments.content holds a lone surrogate" in part["state"]["error"]
    assert part["state"]["input"] == {}
    assert part["state"]["metadata"]["raw_input"] == arguments  # JSON text: an escape
    assert reply["info"]["error"] is None
    assert reply["info"]["completed_at"] is not None
    assert texts(reply) == ["I see the problem"]


@pytest.mark.parametrize(
    "result",
    [
        ToolResult(output="smile \ud83d"),
        ToolResult(output="ok", title="\udc00"),
        ToolResult(output="ok", metadata={"name\ud800": 1}),
    ],
    ids=["output", "title", "metadata-key"],
)
async def test_a_tool_whose_result_holds_a_lone_surrogate_ends_in_a_tool_error(
    session, agents, script, result
):
    """A tool's (or an MCP server's) result holding half a surrogate pair ends its call
    in error, as a NUL does; before, the write of its result failed the reply."""

    async def half(ctx: Any, args: dict[str, Any]) -> ToolResult:
        return result

    script([tool_reply("half", "{}"), text_reply("noted")])
    with temporary_tools(Tool("half", "returns half a pair", {"type": "object"}, half)):
        await run(session, "go")
    reply = reply_of(await ahistory(session))
    part = tool_part(reply)
    assert part["state"]["status"] == "error"
    assert "lone surrogate" in part["state"]["error"]
    assert reply["info"]["error"] is None
    assert reply["info"]["completed_at"] is not None
    assert texts(reply) == ["noted"]


async def test_a_tool_that_raises_a_message_with_a_lone_surrogate_ends_in_that_error(
    session, agents, script
):
    async def broken(ctx: Any, args: dict[str, Any]) -> str:
        raise OSError("cannot open '\udcff'")

    script([tool_reply("broken", "{}"), text_reply("noted")])
    with temporary_tools(Tool("broken", "raises", {"type": "object"}, broken)):
        await run(session, "go")
    reply = reply_of(await ahistory(session))
    assert "cannot open '\ufffd'" in tool_part(reply)["state"]["error"]
    assert reply["info"]["completed_at"] is not None
